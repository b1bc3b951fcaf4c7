package config

import (
	"fmt"
	"os"
	"strings"
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
	p := strings.TrimPrefix(s, "file:")
	b, err := os.ReadFile(p)
	if err != nil {
		return nil, fmt.Errorf("secret %s: %w", s, err)
	}
	return TrimFileSecret(b), nil
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
