// Package offsite copies snapshots to S3-compatible storage (Backblaze B2,
// MinIO, Garage, AWS) with minio-go, and reads them back.
//
// A copy counts as off-site only after the server's own checksum of the
// object was read back and matched: every part is sent with its Content-MD5
// (the server refuses a part whose bytes differ), and after the upload a
// HEAD returns the object's ETag, which must equal the MD5 (or, for a
// multipart object, the MD5 of the part MD5s, "-N") computed here while the
// bytes were sent. Objects are named <prefix><cluster>/<name>, the same
// name as the local file, so one retention rule serves both places.
package offsite

import (
	"bytes"
	"context"
	"crypto/md5"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path"
	"strings"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/talosbot/talosbot/internal/retention"
	"github.com/talosbot/talosbot/internal/snapname"
)

// Config is the bucket and its credentials.
type Config struct {
	Endpoint, Bucket, Prefix, Region string
	// Insecure uses plain http (loopback test servers only; config refuses
	// it elsewhere).
	Insecure                     bool
	AccessKeyID, SecretAccessKey string
	// PartSize is the multipart part size (default 16 MiB; S3's minimum is
	// 5 MiB). One part is in memory at a time.
	PartSize int64
	// Transport overrides the HTTP transport (tests).
	Transport http.RoundTripper
}

// Store is one bucket prefix.
type Store struct {
	core     minio.Core
	bucket   string
	prefix   string
	partSize int64
	endpoint string
	api      string
}

// DefaultPartSize is the multipart part size.
const DefaultPartSize = 16 << 20

// metaSHA256 is the user metadata key holding the sha256 of the object's
// bytes, so a read-back can be checked without the local copy.
const metaSHA256 = "Sha256"

// New returns a Store. It does not contact the server.
func New(cfg Config) (*Store, error) {
	if cfg.Endpoint == "" || cfg.Bucket == "" {
		return nil, errors.New("off-site storage needs snapshots.offsite.endpoint and snapshots.offsite.bucket")
	}
	if cfg.AccessKeyID == "" || cfg.SecretAccessKey == "" {
		return nil, errors.New("off-site storage needs credentials: set snapshots.offsite.access_key_id and secret_access_key (env: or file: references)")
	}
	c, err := minio.NewCore(cfg.Endpoint, &minio.Options{
		Creds:     credentials.NewStaticV4(cfg.AccessKeyID, cfg.SecretAccessKey, ""),
		Secure:    !cfg.Insecure,
		Region:    cfg.Region,
		Transport: cfg.Transport,
	})
	if err != nil {
		return nil, fmt.Errorf("off-site client for %s: %w", cfg.Endpoint, err)
	}
	ps := cfg.PartSize
	if ps == 0 {
		ps = DefaultPartSize
	}
	api := "https://" + cfg.Endpoint
	if cfg.Insecure {
		api = "http://" + cfg.Endpoint
	}
	return &Store{core: *c, bucket: cfg.Bucket, prefix: cfg.Prefix, partSize: ps, endpoint: "s3://" + cfg.Bucket + "/", api: api}, nil
}

// Key is the object key of a snapshot file name in cluster.
func (s *Store) Key(cluster, name string) string { return s.prefix + cluster + "/" + name }

// URL names an object for people: s3://bucket/key.
func (s *Store) URL(key string) string { return s.endpoint + key }

// API is the S3 endpoint's base URL, for an S3 client's --endpoint-url.
func (s *Store) API() string { return s.api }

// Object is one stored snapshot.
type Object struct {
	Key  string
	ID   string // "<cluster>/<timestamp>-<node>"
	At   time.Time
	Size int64
	// Encrypted: the name ends in .age.
	Encrypted bool
}

// Put uploads the file at localPath as key, streaming it part by part, and
// returns only after the server's ETag, read back with a HEAD, matched the
// MD5s computed while sending, and the bytes sent hashed to wantSHA256
// (the local file's digest: it did not change under us). On failure the
// partial upload is aborted; nothing half-written is left as an object.
// A key that already holds an object is refused, never overwritten.
func (s *Store) Put(ctx context.Context, key, localPath, wantSHA256 string) error {
	f, err := os.Open(localPath)
	if err != nil {
		return fmt.Errorf("open %s for upload: %w", localPath, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	size := fi.Size()
	// An object already at key is never replaced (nor removed by the clean-up
	// below): snapshot names are unique, so one there is another snapshot.
	switch _, err := s.core.StatObject(ctx, s.bucket, key, minio.StatObjectOptions{}); {
	case err == nil:
		return fmt.Errorf("%s already exists and a snapshot is never replaced; it was left as it was: take the snapshot again (it gets a new name)", s.URL(key))
	case minio.ToErrorResponse(err).StatusCode != http.StatusNotFound:
		return fmt.Errorf("check that %s is free before the upload: %w", s.URL(key), err)
	}
	opts := minio.PutObjectOptions{UserMetadata: map[string]string{metaSHA256: wantSHA256}, ContentType: "application/octet-stream"}
	whole, wholeMD5 := sha256.New(), md5.New()
	sent := io.MultiWriter(whole, wholeMD5)
	var wantETag string
	if size <= s.partSize {
		buf, md5b64, sha, err := readPart(f, size, sent)
		if err != nil {
			return err
		}
		if _, err := s.core.PutObject(ctx, s.bucket, key, bytes.NewReader(buf), size, md5b64, sha, opts); err != nil {
			return fmt.Errorf("upload %s: %w", s.URL(key), err)
		}
		raw, _ := base64.StdEncoding.DecodeString(md5b64)
		wantETag = hex.EncodeToString(raw)
	} else {
		wantETag, err = s.putMultipart(ctx, key, f, size, opts, sent)
		if err != nil {
			return err
		}
	}
	if got := hex.EncodeToString(whole.Sum(nil)); got != wantSHA256 {
		_ = s.core.RemoveObject(ctx, s.bucket, key, minio.RemoveObjectOptions{})
		return fmt.Errorf("%s changed while it was uploaded (sha256 %s, recorded %s); the upload was removed", localPath, got[:12], short(wantSHA256))
	}
	info, err := s.core.StatObject(ctx, s.bucket, key, minio.StatObjectOptions{})
	if err != nil {
		return fmt.Errorf("read back %s after upload: %w", s.URL(key), err)
	}
	// S3 and B2 report a multipart object's ETag as the MD5 of its part
	// MD5s ("…-N"); some servers (MinIO in some modes, gofakes3) report the
	// MD5 of the whole object. Both are the server's checksum of what it
	// stored, so either must match what was sent.
	got := strings.Trim(info.ETag, `"`)
	if (got != wantETag && got != hex.EncodeToString(wholeMD5.Sum(nil))) || info.Size != size {
		return fmt.Errorf("read-back of %s does not match: the server reports ETag %s and %d bytes, the upload sent ETag %s and %d bytes", s.URL(key), got, info.Size, wantETag, size)
	}
	return nil
}

func (s *Store) putMultipart(ctx context.Context, key string, f io.Reader, size int64, opts minio.PutObjectOptions, whole io.Writer) (_ string, err error) {
	id, err := s.core.NewMultipartUpload(ctx, s.bucket, key, opts)
	if err != nil {
		return "", fmt.Errorf("start upload of %s: %w", s.URL(key), err)
	}
	defer func() {
		if err != nil {
			// A failed upload leaves no parts to pay for.
			_ = s.core.AbortMultipartUpload(context.WithoutCancel(ctx), s.bucket, key, id)
		}
	}()
	var parts []minio.CompletePart
	var md5s []byte
	for n, off := 1, int64(0); off < size; n++ {
		l := min(s.partSize, size-off)
		buf, md5b64, sha, err := readPart(f, l, whole)
		if err != nil {
			return "", err
		}
		p, err := s.core.PutObjectPart(ctx, s.bucket, key, id, n, bytes.NewReader(buf), l, minio.PutObjectPartOptions{Md5Base64: md5b64, Sha256Hex: sha, DisableContentSha256: true})
		if err != nil {
			return "", fmt.Errorf("upload part %d of %s: %w", n, s.URL(key), err)
		}
		raw, _ := base64.StdEncoding.DecodeString(md5b64)
		md5s = append(md5s, raw...)
		parts = append(parts, minio.CompletePart{PartNumber: n, ETag: p.ETag})
		off += l
	}
	if _, err = s.core.CompleteMultipartUpload(ctx, s.bucket, key, id, parts, opts); err != nil {
		return "", fmt.Errorf("complete upload of %s: %w", s.URL(key), err)
	}
	sum := md5.Sum(md5s)
	return fmt.Sprintf("%s-%d", hex.EncodeToString(sum[:]), len(parts)), nil
}

// readPart reads n bytes and returns them with their MD5 (base64, for
// Content-MD5) and sha256 (hex, for the request signature), feeding whole.
func readPart(r io.Reader, n int64, whole io.Writer) ([]byte, string, string, error) {
	buf := make([]byte, n)
	if _, err := io.ReadFull(r, buf); err != nil {
		return nil, "", "", fmt.Errorf("read snapshot for upload: %w", err)
	}
	whole.Write(buf)
	m := md5.Sum(buf)
	h := sha256.Sum256(buf)
	return buf, base64.StdEncoding.EncodeToString(m[:]), hex.EncodeToString(h[:]), nil
}

func short(s string) string {
	if len(s) > 12 {
		return s[:12]
	}
	return s
}

// List returns the snapshots of cluster, in key order.
func (s *Store) List(ctx context.Context, cluster string) ([]Object, error) {
	var out []Object
	pfx := s.prefix + cluster + "/"
	marker := ""
	for {
		res, err := s.core.ListObjects(s.bucket, pfx, marker, "/", 1000)
		if err != nil {
			return nil, fmt.Errorf("list %s: %w", s.URL(pfx), err)
		}
		for _, o := range res.Contents {
			name, at, enc, ok := snapname.Parse(path.Base(o.Key))
			if !ok {
				continue
			}
			out = append(out, Object{Key: o.Key, ID: cluster + "/" + name, At: at, Size: o.Size, Encrypted: enc})
		}
		if !res.IsTruncated {
			return out, nil
		}
		marker = res.NextMarker
		if marker == "" && len(res.Contents) > 0 {
			marker = res.Contents[len(res.Contents)-1].Key
		}
	}
}

// Get streams the object key into w and checks that its bytes hash to the
// sha256 recorded at upload (a full read-back: it catches an object that
// changed at rest, whatever the server's metadata says).
func (s *Store) Get(ctx context.Context, key string, w io.Writer) (int64, error) {
	rc, info, _, err := s.core.GetObject(ctx, s.bucket, key, minio.GetObjectOptions{})
	if err != nil {
		return 0, fmt.Errorf("fetch %s: %w", s.URL(key), err)
	}
	defer rc.Close()
	want := info.UserMetadata[metaSHA256]
	if want == "" {
		want = info.Metadata.Get("X-Amz-Meta-" + metaSHA256)
	}
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(w, h), rc)
	if err != nil {
		return n, fmt.Errorf("fetch %s: %w", s.URL(key), err)
	}
	if want == "" {
		return n, fmt.Errorf("%s has no recorded sha256 (it was not uploaded by talosbot), so it cannot be verified", s.URL(key))
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != want {
		return n, fmt.Errorf("%s is corrupted: its %d bytes hash to sha256 %s, the upload recorded %s; use another copy", s.URL(key), n, short(got), short(want))
	}
	return n, nil
}

// Verify reads the object back in full and checks its sha256.
func (s *Store) Verify(ctx context.Context, key string) error {
	_, err := s.Get(ctx, key, io.Discard)
	return err
}

// ApplyRetention deletes the objects of cluster that policy does not keep;
// the newest and the protected ids are never deleted.
func (s *Store) ApplyRetention(ctx context.Context, cluster string, policy retention.Policy, now time.Time, protected map[string]bool) ([]string, error) {
	if policy.Empty() {
		return nil, nil
	}
	objs, err := s.List(ctx, cluster)
	if err != nil {
		return nil, err
	}
	keys := map[string]string{}
	var items []retention.Item
	for _, o := range objs {
		keys[o.ID] = o.Key
		items = append(items, retention.Item{ID: o.ID, At: o.At})
	}
	var removed []string
	var errs []error
	for _, d := range retention.Select(items, policy, now, protected) {
		if !d.Delete {
			continue
		}
		if err := s.core.RemoveObject(ctx, s.bucket, keys[d.ID], minio.RemoveObjectOptions{}); err != nil {
			errs = append(errs, fmt.Errorf("delete %s: %w", s.URL(keys[d.ID]), err))
			continue
		}
		removed = append(removed, s.URL(keys[d.ID]))
	}
	return removed, errors.Join(errs...)
}
