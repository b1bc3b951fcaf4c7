package config

import (
	"fmt"
	"io"
	"os"
	"strings"
	"syscall"
)

// Ref is a reference to a secret: "env:NAME" or "file:/absolute/path".
// Its String form is the reference itself, never the secret. A file secret
// loses one trailing newline (TrimFileSecret); an env secret is used as is.
type Ref string

// Empty reports whether no reference is set.
func (r Ref) Empty() bool { return r == "" }

// Check returns a message describing why r is not a valid reference, or "".
func (r Ref) Check() string {
	s := string(r)
	switch {
	case strings.HasPrefix(s, "env:"):
		if name := s[4:]; name == "" || strings.ContainsAny(name, " =") {
			return fmt.Sprintf("%q is not a valid env reference (use env:NAME)", s)
		}
	case strings.HasPrefix(s, "file:"):
		if p := s[5:]; !strings.HasPrefix(p, "/") {
			return fmt.Sprintf("%q must name an absolute path (use file:/path/to/secret)", s)
		}
	default:
		// Do not echo the value: it may be a pasted secret.
		return "secrets are given by reference only: use env:NAME or file:/path (the value here is not shown)"
	}
	return ""
}

// Resolve reads the secret. Errors name the reference, never the value.
func (r Ref) Resolve() ([]byte, error) {
	if msg := r.Check(); msg != "" {
		return nil, fmt.Errorf("secret reference: %s", msg)
	}
	s := string(r)
	if name, ok := strings.CutPrefix(s, "env:"); ok {
		v, ok := os.LookupEnv(name)
		if !ok || v == "" {
			return nil, fmt.Errorf("secret %s: environment variable %s is not set", s, name)
		}
		return []byte(v), nil
	}
	b, err := readSecretFile(strings.TrimPrefix(s, "file:"))
	if err != nil {
		return nil, fmt.Errorf("secret %s: %w", s, err)
	}
	return TrimFileSecret(b), nil
}

// MaxSecretSize is the largest file secret read (1 MiB; a kubeconfig with
// its certificates is a few kilobytes).
const MaxSecretSize = 1 << 20

// readSecretFile reads a regular file (a symlink is followed to one) of at
// most MaxSecretSize bytes. Anything else is refused before a byte is read:
// /dev/zero never ends and would fill memory, a FIFO blocks the start until
// someone writes to it, and a directory is a mistake.
func readSecretFile(p string) ([]byte, error) {
	if st, err := os.Stat(p); err != nil {
		return nil, err
	} else if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is not a regular file (%s); point the reference at the file that holds the secret", p, st.Mode().Type())
	}
	// O_NONBLOCK: should the path turn into a FIFO after the Stat above,
	// opening it must not wait for a writer; the Stat of the open file below
	// then refuses it.
	f, err := os.OpenFile(p, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if st, err := f.Stat(); err != nil {
		return nil, err
	} else if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is not a regular file (%s); point the reference at the file that holds the secret", p, st.Mode().Type())
	}
	b, err := io.ReadAll(io.LimitReader(f, MaxSecretSize+1))
	if err != nil {
		return nil, err
	}
	if len(b) > MaxSecretSize {
		return nil, fmt.Errorf("%s is larger than %d bytes (the secret size limit); is it the right file?", p, MaxSecretSize)
	}
	return b, nil
}

// TrimFileSecret drops one trailing newline ("\n" or "\r\n") from a file
// secret: `echo TOKEN > file` and editors add one, and a token with a newline
// is refused everywhere. Only one is dropped, so a secret that really ends in
// whitespace can still be written (with an extra newline).
func TrimFileSecret(b []byte) []byte {
	if n := len(b); n > 0 && b[n-1] == '\n' {
		b = b[:n-1]
		if n := len(b); n > 0 && b[n-1] == '\r' {
			b = b[:n-1]
		}
	}
	return b
}
