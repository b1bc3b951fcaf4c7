package main

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/talosbot/talosbot/internal/servetest"
)

// build compiles this example the way docs/PLUGINS.md says and returns its
// path and sha256.
func build(t *testing.T) (path, sum string) {
	t.Helper()
	path = filepath.Join(t.TempDir(), "hello-plugin")
	if b, err := exec.Command("go", "build", "-o", path, ".").CombinedOutput(); err != nil {
		t.Fatalf("build hello-plugin: %v\n%s", err, b)
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	h := sha256.Sum256(raw)
	return path, hex.EncodeToString(h[:])
}

// TestHelloFromChatThroughServe builds the example, configures it as an
// external plugin with its sha256, and runs `/talos hello` from the web
// console of a real `talosbot serve`. A wrong checksum keeps serve from
// starting at all.
func TestHelloFromChatThroughServe(t *testing.T) {
	plugin, sum := build(t)
	bin := servetest.Binary(t)
	// config writes a serve configuration that names the plugin with sha.
	config := func(sha string) (cfg, addr string, tokens map[string]string) {
		dir := t.TempDir()
		tc := filepath.Join(dir, "talosconfig")
		if err := os.WriteFile(tc, []byte("context: e2e\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		addr = servetest.FreeAddr(t)
		web, tokens := servetest.ConsoleUsers(t, "alice")
		cfg = filepath.Join(dir, "talosbot.yaml")
		if err := os.WriteFile(cfg, []byte(fmt.Sprintf(`
data_dir: %s/data
listen: %s
clusters:
  - name: staging
    environment: staging
    channels: [ops]
    endpoints: [127.0.0.1]
    nodes: [{name: cp-1, address: 127.0.0.1, role: controlplane, host: pve1}]
    credentials: {source: files, talosconfig: "file:%s"}
policy: {staging: {viewers: ["*"]}}
chat:
%splugins:
  external: [{name: hello, path: %s, sha256: %s}]
`, dir, addr, tc, web, plugin, sha)), 0o600); err != nil {
			t.Fatal(err)
		}
		return cfg, addr, tokens
	}

	// A binary that does not match its configured sha256 is never run:
	// serve refuses to start and says how to fix the configuration.
	badCfg, _, badTokens := config(strings.Repeat("0", 64))
	bad := exec.CommandContext(t.Context(), bin, "serve", "--config", badCfg)
	bad.Env = os.Environ()
	for u, tok := range badTokens {
		bad.Env = append(bad.Env, servetest.TokenEnv(u)+"="+tok)
	}
	out, err := bad.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "checksum mismatch") || !strings.Contains(string(out), "got "+sum) {
		t.Fatalf("serve with a wrong sha256: err = %v, output:\n%s", err, out)
	}

	cfg, addr, tokens := config(sum)
	b := &servetest.Bot{T: t, Bin: bin, Config: cfg, Addr: addr, Tokens: tokens}
	b.Start()
	t.Cleanup(func() { _ = b.Cmd.Process.Signal(syscall.SIGTERM); _ = b.Cmd.Wait() })
	b.Command("alice", "ops", "/talos hello --name ops")
	b.WaitFor("the greeting", func() bool {
		return b.HasMessage("ops", func(m servetest.Message) bool {
			return strings.Contains(m.Text+m.Title, "hello, ops, from staging") && strings.Contains(m.Text, "cp-1 (controlplane)")
		})
	})
	// The SDK's EX1 refusal reaches chat with its fix.
	b.Command("alice", "ops", "/talos hello --name "+strings.Repeat("x", maxName+1))
	b.WaitFor("the refusal", func() bool {
		return b.HasMessage("ops", func(m servetest.Message) bool {
			return strings.Contains(m.Text+m.Title, "EX1") && strings.Contains(m.Text+m.Title, "use a shorter --name")
		})
	})
}
