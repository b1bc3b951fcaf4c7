package testenv

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func writeExe(t *testing.T, path string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
}

func TestFindToolOrder(t *testing.T) {
	root := t.TempDir()
	toolsDir := filepath.Join(root, "cache")
	fromEnv := filepath.Join(root, "env", "kube-apiserver")
	fromFile := filepath.Join(root, "file", "kube-apiserver")
	fromPath := filepath.Join(root, "path", "kube-apiserver")
	for _, p := range []string{fromEnv, fromFile, fromPath} {
		writeExe(t, p)
	}
	t.Setenv(EnvToolsDir, toolsDir)
	t.Setenv("PATH", filepath.Dir(fromPath))
	t.Setenv(EnvKubeAPIServer, "")

	// Only PATH.
	got, err := KubeAPIServerPath()
	if err != nil || got != fromPath {
		t.Fatalf("PATH lookup: got %q, %v; want %q", got, err, fromPath)
	}

	// The env file wins over PATH.
	if err := os.MkdirAll(toolsDir, 0o755); err != nil {
		t.Fatal(err)
	}
	env := fmt.Sprintf("# comment\n\n%s=%s\n%s=/nonexistent/tofu\n", EnvKubeAPIServer, fromFile, EnvTofu)
	if err := os.WriteFile(filepath.Join(toolsDir, "env"), []byte(env), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err = KubeAPIServerPath()
	if err != nil || got != fromFile {
		t.Fatalf("env file lookup: got %q, %v; want %q", got, err, fromFile)
	}

	// The variable wins over the env file.
	t.Setenv(EnvKubeAPIServer, fromEnv)
	got, err = KubeAPIServerPath()
	if err != nil || got != fromEnv {
		t.Fatalf("env var lookup: got %q, %v; want %q", got, err, fromEnv)
	}

	// A stale env file entry is an error that says how to fix it, not a
	// silent fallback to PATH.
	t.Setenv(EnvTofu, "")
	_, err = TofuPath()
	if !errors.Is(err, ErrToolMissing) || !strings.Contains(err.Error(), "make tools") {
		t.Fatalf("stale env file: got %v, want ErrToolMissing mentioning make tools", err)
	}
}

func TestFindToolMissing(t *testing.T) {
	t.Setenv(EnvToolsDir, t.TempDir())
	t.Setenv("PATH", t.TempDir())
	t.Setenv(EnvTofu, "")
	_, err := TofuPath()
	if !errors.Is(err, ErrToolMissing) {
		t.Fatalf("got %v, want ErrToolMissing", err)
	}
	if !strings.Contains(err.Error(), "make tools") {
		t.Fatalf("error %q does not say to run make tools", err)
	}

	t.Setenv(EnvTofu, filepath.Join(t.TempDir(), "nope"))
	if _, err := TofuPath(); !errors.Is(err, ErrToolMissing) {
		t.Fatalf("bad %s: got %v, want ErrToolMissing", EnvTofu, err)
	}
}

func TestToolsDirDefaults(t *testing.T) {
	t.Setenv(EnvToolsDir, "")
	t.Setenv("XDG_CACHE_HOME", "/x/cache")
	if got := ToolsDir(); got != "/x/cache/talosbot/tools" {
		t.Fatalf("XDG: got %q", got)
	}
	t.Setenv("XDG_CACHE_HOME", "")
	t.Setenv("HOME", "/home/u")
	if got := ToolsDir(); got != "/home/u/.cache/talosbot/tools" {
		t.Fatalf("HOME: got %q", got)
	}
	t.Setenv(EnvToolsDir, "/custom")
	if got := ToolsDir(); got != "/custom" {
		t.Fatalf("override: got %q", got)
	}
}

// recordTB captures how Require ends a test.
type recordTB struct {
	testing.TB
	fatal, skip string
}

func (r *recordTB) Helper()                        {}
func (r *recordTB) Fatalf(format string, a ...any) { r.fatal = fmt.Sprintf(format, a...) }
func (r *recordTB) Skipf(format string, a ...any)  { r.skip = fmt.Sprintf(format, a...) }

func TestRequire(t *testing.T) {
	missing := fmt.Errorf("%w: run `make tools`", ErrToolMissing)
	cases := []struct {
		name, ci, require string
		wantFatal         bool
	}{
		{name: "local skips", ci: "", require: "", wantFatal: false},
		{name: "CI fails", ci: "true", require: "", wantFatal: true},
		{name: "opt-in fails", ci: "", require: "1", wantFatal: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("CI", tc.ci)
			t.Setenv(EnvRequireTools, tc.require)
			r := &recordTB{}
			Require(r, missing)
			if tc.wantFatal && (r.fatal == "" || r.skip != "") {
				t.Fatalf("want Fatal, got fatal=%q skip=%q", r.fatal, r.skip)
			}
			if !tc.wantFatal && (r.skip == "" || r.fatal != "") {
				t.Fatalf("want Skip, got fatal=%q skip=%q", r.fatal, r.skip)
			}
			if msg := r.fatal + r.skip; !strings.Contains(msg, "make tools") {
				t.Fatalf("message %q lost the reason", msg)
			}
			r = &recordTB{}
			Require(r, nil)
			if r.fatal != "" || r.skip != "" {
				t.Fatalf("nil error ended the test: %+v", r)
			}
		})
	}
}
