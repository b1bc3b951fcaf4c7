//go:build demo

package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestDemoDataDirCleanup: the dir the demo creates (its own temp dir, or a
// --data-dir that did not exist) is removed on exit unless --keep; a
// --data-dir that existed before is left in place; the demo token (a
// secret) goes in every case.
func TestDemoDataDirCleanup(t *testing.T) {
	t.Setenv("TMPDIR", t.TempDir())
	existing := t.TempDir()
	for _, c := range []struct {
		name, dir  string
		keep, gone bool
		say        string
	}{
		{name: "temp dir", gone: true, say: "removed the demo's data dir"},
		{name: "temp dir --keep", keep: true, say: "(--keep)"},
		{name: "new --data-dir", dir: filepath.Join(t.TempDir(), "a", "demo"), gone: true, say: "removed the demo's data dir"},
		{name: "new --data-dir --keep", dir: filepath.Join(t.TempDir(), "demo"), keep: true, say: "(--keep)"},
		{name: "existing --data-dir", dir: existing, say: "it existed before the demo"},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir, cleanup, err := demoDataDir(c.dir, c.keep)
			if err != nil {
				t.Fatal(err)
			}
			if c.dir != "" && dir != c.dir {
				t.Fatalf("data dir %s, want %s", dir, c.dir)
			}
			must(t, os.MkdirAll(filepath.Join(dir, "clusters", "staging"), 0o700))
			must(t, os.WriteFile(filepath.Join(dir, "clusters", "staging", "member.db"), []byte("etcd"), 0o600))
			if _, err := newDemoToken(dir); err != nil {
				t.Fatal(err)
			}
			var out bytes.Buffer
			cleanup(&out)
			if !strings.Contains(out.String(), c.say) {
				t.Errorf("cleanup said %q, want %q", out.String(), c.say)
			}
			_, err = os.Stat(dir)
			if gone := os.IsNotExist(err); gone != c.gone {
				t.Fatalf("data dir removed: %v, want %v (%v)", gone, c.gone, err)
			}
			if !c.gone {
				if _, err := os.Stat(filepath.Join(dir, "demo-token")); !os.IsNotExist(err) {
					t.Errorf("the demo token outlived the run (%v)", err)
				}
				if _, err := os.Stat(filepath.Join(dir, "clusters", "staging", "member.db")); err != nil {
					t.Errorf("a kept data dir lost its state: %v", err)
				}
			}
		})
	}
}

// TestDemoRefusesBadRebootDelay: a zero or negative --reboot-delay is a
// usage error, before anything starts.
func TestDemoRefusesBadRebootDelay(t *testing.T) {
	dataDir := filepath.Join(t.TempDir(), "demo")
	err := runDemo(t.Context(), &bytes.Buffer{}, demoOptions{listen: "127.0.0.1:0", dataDir: dataDir, rebootDelay: 0})
	if err == nil || !strings.Contains(err.Error(), "--reboot-delay 8s") {
		t.Fatalf("reboot delay 0: %v", err)
	}
	if _, err := os.Stat(dataDir); !os.IsNotExist(err) {
		t.Fatalf("the refused demo created its data dir (%v)", err)
	}
}
