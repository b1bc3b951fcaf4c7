package recover

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/talosbot/talosbot/internal/offsite"
	"github.com/talosbot/talosbot/internal/offsite/s3test"
	"github.com/talosbot/talosbot/plugins/sdk"
	"github.com/talosbot/talosbot/plugins/sdk/sdktest"
)

// When the only copy of the snapshot is off-site, the guide downloads it
// first and restores from that download: the bot's own download is checked
// (sha256 and etcd's trailer) and removed when the guide is rendered, so a
// path to it would name a file that is gone.
func TestGuideFromAnOffsiteOnlySnapshotDownloadsItFirst(t *testing.T) {
	t.Parallel()
	f := setup(t)
	endpoint, _ := s3test.Start(t, "snaps")
	cfg := offsite.Config{Endpoint: endpoint, Bucket: "snaps", Prefix: "tb/", Region: "us-east-1", Insecure: true, AccessKeyID: "key", SecretAccessKey: "secret"}
	st, err := offsite.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	name := filepath.Base(f.snap.Path)
	key := st.Key("production", name)
	if err := st.Put(ctx(t), key, f.snap.Path, f.snap.StoredSHA256); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(f.snap.Path); err != nil {
		t.Fatal(err)
	}

	req := f.req(1, nil)
	req.Command = GuideCommand
	req.Evidence.Backups.Offsite = &sdk.Offsite{Endpoint: cfg.Endpoint, Bucket: cfg.Bucket, Prefix: cfg.Prefix, Region: cfg.Region, Insecure: true}
	req.Credentials.OffsiteAccessKeyID, req.Credentials.OffsiteSecretAccessKey = []byte(cfg.AccessKeyID), []byte(cfg.SecretAccessKey)
	rec, err := sdktest.Run(ctx(t), f.plugin(time.Hour), req, nil)
	if err != nil || !rec.FinalResult().OK {
		t.Fatalf("guide: %v %v", err, rec.FinalResult())
	}
	text := strings.Join(rec.FinalResult().Lines, "\n")
	for _, w := range []string{
		"off-site verified s3://snaps/" + key + " (downloaded, sha256 checked)",
		"1. `aws s3 cp --endpoint-url http://" + endpoint + " s3://snaps/" + key + " " + name + "`",
		"bootstrap --recover-from=" + name + "`",
	} {
		if !strings.Contains(text, w) {
			t.Fatalf("guide lacks %q:\n%s", w, text)
		}
	}
	if strings.Contains(text, f.dir) {
		t.Fatalf("the guide names a file under the bot's snapshot dir %s, which holds no copy:\n%s", f.dir, text)
	}
	left, err := os.ReadDir(filepath.Join(f.dir, "production"))
	if err != nil {
		t.Fatal(err)
	}
	if len(left) != 0 {
		t.Fatalf("the guide left %v in the snapshot dir (its download must be removed)", left)
	}
}
