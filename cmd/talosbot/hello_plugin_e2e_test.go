package main

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"

	"github.com/talosbot/talosbot/internal/servetest"
)

// TestHelloFromChatThroughServe builds the example (its own module, which
// requires only the SDK module), configures it as an
// external plugin with its sha256, and runs `/talos hello` from the web
// console of a real `talosbot serve`. A wrong checksum keeps serve from
// starting at all.
func TestHelloFromChatThroughServe(t *testing.T) {
	plugin, sum := servetest.BuildPluginModule(t, "../../examples/hello-plugin") // as docs/PLUGINS.md builds it
	bin := servetest.Binary(t)
	// config writes a serve configuration that names the plugin with sha.
	section := "{greeting: Moin}" // plugins.hello, the plugin's own section
	config := func(sha string) (cfg, addr string, tokens map[string]string) {
		b := servetest.Config{Dir: t.TempDir(), Clusters: []servetest.Cluster{{Nodes: []string{"{name: cp-1, address: 127.0.0.1, role: controlplane, host: pve1}"},
			Endpoints: []string{"127.0.0.1"}, Talosconfig: []byte("context: e2e\n")}}, Policy: `{staging: {viewers: ["*"]}}`,
			Extra: fmt.Sprintf("plugins:\n  external: [{name: hello, path: %s, sha256: %s}]\n  hello: %s\n", plugin, sha, section)}.Bot(t, bin)
		return b.Config, b.Addr, b.Tokens
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

	// The section is the plugin's to check: config check asks it, and a
	// misspelt key is refused with its path.
	section = "{greting: Moin}"
	typo, _, _ := config(sum)
	if out, err := exec.CommandContext(t.Context(), bin, "config", "check", "--config", typo).CombinedOutput(); err == nil ||
		!strings.Contains(string(out), `plugins.hello.greting: unknown key "greting"; did you mean "greeting"?`) {
		t.Fatalf("config check of a misspelt key: err = %v, output:\n%s", err, out)
	}
	section = "{greeting: Moin}"
	cfg, addr, tokens := config(sum)
	b := &servetest.Bot{T: t, Bin: bin, Config: cfg, Addr: addr, Tokens: tokens}
	b.Start()
	t.Cleanup(func() { _ = b.Cmd.Process.Signal(syscall.SIGTERM); _ = b.Cmd.Wait() })
	b.Command("alice", "ops", "/talos hello --name ops")
	b.WaitFor("the greeting", func() bool {
		return b.HasMessage("ops", func(m servetest.Message) bool {
			return strings.Contains(m.Text+m.Title, "Moin, ops, from staging") && strings.Contains(m.Text, "cp-1 (controlplane)")
		})
	})
	// The SDK's EX1 refusal reaches chat with its fix.
	b.Command("alice", "ops", "/talos hello --name "+strings.Repeat("x", 33)) // hello.go maxName is 32
	b.WaitFor("the refusal", func() bool {
		return b.HasMessage("ops", func(m servetest.Message) bool {
			return strings.Contains(m.Text+m.Title, "EX1") && strings.Contains(m.Text+m.Title, "use a shorter --name")
		})
	})
}
