// Package seal encrypts etcd snapshots at rest with age (filippo.io/age).
// Taking a snapshot needs only the recipients (public keys); reading one
// back needs the identity, which the host hands to that one operation.
package seal

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"

	"filippo.io/age"
)

// Ext is the file-name suffix of an encrypted snapshot ("….db.age").
const Ext = ".age"

// Recipients parses age recipients ("age1…"), one per entry.
func Recipients(list []string) ([]age.Recipient, error) {
	var out []age.Recipient
	for i, s := range list {
		rs, err := age.ParseRecipients(strings.NewReader(s))
		if err != nil {
			return nil, fmt.Errorf("age recipient %d (%q) is not valid: %w; set snapshots.encryption.recipients to the output of `age-keygen -y KEYFILE`", i, s, err)
		}
		out = append(out, rs...)
	}
	return out, nil
}

// Identities parses an age identity file's contents (AGE-SECRET-KEY-…
// lines). The error never quotes the contents.
func Identities(b []byte) ([]age.Identity, error) {
	ids, err := age.ParseIdentities(bytes.NewReader(b))
	if err != nil {
		return nil, errors.New("the age identity given by snapshots.encryption.identity is not an age identity file (AGE-SECRET-KEY-… lines, from age-keygen)")
	}
	return ids, nil
}

// Encrypt returns a writer that encrypts to recipients into dst; Close
// flushes the last chunk (it does not close dst).
func Encrypt(dst io.Writer, recipients []age.Recipient) (io.WriteCloser, error) {
	w, err := age.Encrypt(dst, recipients...)
	if err != nil {
		return nil, fmt.Errorf("start age encryption: %w", err)
	}
	return w, nil
}

// Decrypt returns the plaintext of src. A snapshot encrypted to other
// recipients fails here with an error that says so and names the public
// key of the identity that was tried.
func Decrypt(src io.Reader, ids []age.Identity) (io.Reader, error) {
	r, err := age.Decrypt(src, ids...)
	var noMatch *age.NoIdentityMatchError
	switch {
	case errors.As(err, &noMatch):
		return nil, fmt.Errorf("the snapshot is encrypted to other age recipients: the identity given (%s) does not decrypt it; "+
			"give the identity whose public key is in snapshots.encryption.recipients when the snapshot was taken", describe(ids))
	case err != nil:
		return nil, fmt.Errorf("the snapshot is not a readable age file (%w): it may be truncated or not encrypted", err)
	}
	return r, nil
}

// describe names identities by their public keys, never their secrets.
func describe(ids []age.Identity) string {
	var pubs []string
	for _, id := range ids {
		if x, ok := id.(*age.X25519Identity); ok {
			pubs = append(pubs, x.Recipient().String())
		} else {
			pubs = append(pubs, fmt.Sprintf("%T", id))
		}
	}
	return strings.Join(pubs, ", ")
}
