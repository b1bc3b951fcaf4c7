package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/talosbot/talosbot/internal/servetest"

	"github.com/talosbot/talosbot/state"
)

// The binaries under test: $TALOSBOT_BIN, $TALOSBOT_PLUGINS_BIN and
// $TALOSBOT_DEMO_BIN (make test sets them to bin/), or builds made once by
// TestMain into one directory, so that talosbot finds talosbot-plugins next
// to itself as it does when installed.
var binPath, pluginsBinPath, demoBinPath string

func TestMain(m *testing.M) {
	binPath = os.Getenv("TALOSBOT_BIN")
	var tmp string
	if binPath == "" {
		var err error
		if tmp, err = os.MkdirTemp("", "talosbot-bin"); err != nil {
			panic(err)
		}
		binPath = filepath.Join(tmp, "talosbot")
		// As make build does: talosbot records the sha256 of its talosbot-plugins.
		if err := servetest.Build(tmp, true); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	}
	pluginsBinPath = envOr("TALOSBOT_PLUGINS_BIN", filepath.Join(filepath.Dir(binPath), "talosbot-plugins"))
	demoBinPath = envOr("TALOSBOT_DEMO_BIN", filepath.Join(filepath.Dir(binPath), "talosbot-demo"))
	code := m.Run()
	if tmp != "" {
		_ = os.RemoveAll(tmp)
	}
	os.Exit(code)
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

func talosbotBinary(*testing.T) string { return binPath }

// buildEnginePlugin builds the engine tests' external plugin.
func buildEnginePlugin(t *testing.T) (path, sum string) {
	return servetest.BuildPlugin(t, "../../bot/engine/testdata/engineplugin")
}

// TestServeSIGKILLLeavesInterruptedOperation runs `talosbot serve` as a real
// process, kills it with SIGKILL while a disruptive operation runs, restarts
// it and checks that the operation is interrupted (not running, not lost),
// that its lock still holds, and that the audit chain verifies.
func TestServeSIGKILLLeavesInterruptedOperation(t *testing.T) {
	slow(t)
	dir := t.TempDir()
	plugin, sum := buildEnginePlugin(t)
	b := servetest.Config{Dir: dir, Clusters: []servetest.Cluster{{Nodes: []string{"{name: cp-1, address: 127.0.0.1, role: controlplane, host: pve1}"},
		Endpoints: []string{"127.0.0.1"}, Talosconfig: []byte("context: e2e\n")}},
		Extra: fmt.Sprintf("plugins:\n  external: [{name: eng, path: %s, sha256: %s}]\n", plugin, sum)}.Bot(t, talosbotBinary(t))
	b.Start()
	if code := b.Post("/api/console/commands", map[string]string{"user": "alice", "channel": "ops", "text": "/talos roll v2 staging --mode wait"}); code != 202 {
		t.Fatalf("command: HTTP %d", code)
	}
	var opID string
	b.WaitFor("the roll to run", func() bool {
		return b.HasMessage("ops", func(m servetest.Message) bool {
			running := false
			for _, f := range m.Fields {
				if f.Label == "Operation" {
					opID = f.Value
				}
				running = running || (f.Label == "State" && f.Value == "running")
			}
			return running
		})
	})
	children := servetest.ChildPIDs(b.Cmd.Process.Pid)
	if len(children) == 0 {
		t.Fatal("the running operation has no plugin process")
	}
	if err := b.Cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = b.Cmd.Wait()
	// An orphaned plugin would go on changing the cluster untracked.
	b.WaitFor("the plugin processes to die with the bot", func() bool {
		for _, pid := range children {
			if servetest.Alive(pid) {
				return false
			}
		}
		return true
	})

	b.Start()
	if code := b.Post("/api/console/commands", map[string]string{"user": "alice", "channel": "ops", "text": "/talos status staging"}); code != 202 {
		t.Fatalf("status: HTTP %d", code)
	}
	b.WaitFor("status to show the interrupted operation", func() bool {
		return b.HasMessage("ops", func(m servetest.Message) bool {
			return strings.Contains(m.Text, "lock: held by `"+opID+"`") && strings.Contains(m.Text, "/talos resume "+opID)
		})
	})
	// Bad input over the API gets 400 and a reason, never a crash.
	if code := b.Post("/api/console/commands", map[string]string{"user": "alice", "channel": "nowhere", "text": "/talos status"}); code != 400 {
		t.Fatalf("unbound channel: HTTP %d, want 400", code)
	}
	_ = b.Cmd.Process.Signal(syscall.SIGTERM)
	_ = b.Cmd.Wait()

	db := filepath.Join(dir, "data", "talosbot.db")
	st, err := state.Open(db, state.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ctx := context.Background()
	var op *state.Operation
	if err := st.View(ctx, func(tx *state.Tx) error { op, err = tx.Operation(opID); return err }); err != nil {
		t.Fatal(err)
	}
	if op.State != state.StateInterrupted {
		t.Fatalf("op state = %s, want interrupted", op.State)
	}
	recs, err := st.QueryAudit(ctx, state.AuditQuery{OpID: opID, Action: "interrupted"})
	if err != nil || len(recs) != 1 {
		t.Fatalf("interrupted audit record: %v %v", recs, err)
	}
	if _, err := st.VerifyAudit(ctx); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(b.Stderr.String(), b.Tokens["alice"]) {
		t.Fatal("the console token reached the log")
	}
}
