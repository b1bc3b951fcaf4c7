package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/talosbot/talosbot/internal/servetest"
)

// TestServeRefusesUnverifiedPluginsBinary: a wrapper script set as
// TALOSBOT_PLUGINS_BIN (which would see every request, credentials
// included) is refused: serve does not start, names both sums and says what
// to do, and the wrapper never runs.
func TestServeRefusesUnverifiedPluginsBinary(t *testing.T) {
	dir := t.TempDir()
	ran := filepath.Join(dir, "wrapper-ran")
	wrapper := filepath.Join(dir, "talosbot-plugins-wrapper")
	script := "#!/bin/sh\necho \"$@\" >> " + ran + "\nexec " + pluginsBinPath + " \"$@\"\n"
	if err := os.WriteFile(wrapper, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	b := servetest.Config{Dir: dir, Clusters: []servetest.Cluster{{Nodes: []string{"{name: cp-1, address: 127.0.0.1, role: controlplane, host: pve1}"},
		Endpoints: []string{"127.0.0.1"}, Talosconfig: []byte("context: e2e\n")}}}.Bot(t, talosbotBinary(t))
	// A serve that took the wrapper would run until killed: a minute is far
	// more than refusing takes.
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, b.Bin, "serve", "--config", b.Config)
	cmd.Env = append(append(os.Environ(), b.TokenEnv()...), pluginsBinEnv+"="+wrapper)
	out, err := cmd.CombinedOutput()
	want, got := sha256Of(t, pluginsBinPath), sha256Of(t, wrapper)
	for _, s := range []string{wrapper + " has sha256 " + got, "expects " + want, "install talosbot and talosbot-plugins from the same build"} {
		if err == nil || !strings.Contains(string(out), s) {
			t.Fatalf("serve with a wrapper as its plugins: err %v, output lacks %q:\n%s", err, s, out)
		}
	}
	if _, err := os.Stat(ran); !os.IsNotExist(err) {
		t.Fatalf("the wrapper ran (%v)", err)
	}
}

// TestPluginsSHA256 covers a talosbot without a recorded sum, as this test
// binary is (a plain go build): it refuses its built-ins with the fix, unless
// TALOSBOT_PLUGINS_SHA256 names the sum, and then takes only that binary.
func TestPluginsSHA256(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "talosbot-plugins")
	if err := os.WriteFile(bin, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv(pluginsBinEnv, bin)
	t.Setenv(pluginsSHA256Env, "")
	if _, err := pluginsBinary(); err == nil || !strings.Contains(err.Error(), "built without the sha256") || !strings.Contains(err.Error(), "make build") || !strings.Contains(err.Error(), pluginsSHA256Env) {
		t.Fatalf("no recorded sum, none stated: %v", err)
	}
	t.Setenv(pluginsSHA256Env, "skip")
	if _, err := pluginsBinary(); err == nil || !strings.Contains(err.Error(), "64-character hex") {
		t.Fatalf("a stated sum that is not one: %v", err)
	}
	t.Setenv(pluginsSHA256Env, strings.ToUpper(sha256Of(t, bin)))
	if path, err := pluginsBinary(); err != nil || path != bin {
		t.Fatalf("the stated sum: %q, %v", path, err)
	}
	other := strings.Repeat("ab", 32)
	t.Setenv(pluginsSHA256Env, other)
	if _, err := pluginsBinary(); err == nil || !strings.Contains(err.Error(), "has sha256 "+sha256Of(t, bin)) || !strings.Contains(err.Error(), "expects "+other) {
		t.Fatalf("another binary than the stated one: %v", err)
	}
}

func sha256Of(t *testing.T, path string) string {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(raw)
	return hex.EncodeToString(sum[:])
}
