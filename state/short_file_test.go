package state

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A file shorter than bbolt's two meta pages is named as truncated, with
// the fix, instead of whatever bbolt makes of it.
func TestOpenReadOnlyNamesATruncatedFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	if err := os.WriteFile(path, make([]byte, 100), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := OpenReadOnly(path, 0)
	if err == nil || !strings.Contains(err.Error(), "100 bytes is too short for a bbolt file") || !strings.Contains(err.Error(), "restore it from a backup") {
		t.Fatalf("OpenReadOnly of a 100-byte file: %v", err)
	}
}
