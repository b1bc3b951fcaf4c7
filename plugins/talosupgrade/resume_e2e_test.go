package talosupgrade

import (
	"fmt"
	"github.com/talosbot/talosbot/internal/servetest"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/talosbot/talosbot/sim"
)

// TestResumeAfterSIGKILL drives a real `talosbot serve` through the console
// API: the roll of 5 nodes is killed with SIGKILL right after node 2 is
// done, the bot restarts, `/talos resume` continues it: nodes 1–2 are
// skipped and nodes 3–5 are upgraded, each exactly once (the sim's counts).
func TestResumeAfterSIGKILL(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs talosbot")
	}
	bin := servetest.Binary(t)
	e := start(t, 3, 2, false, nil)
	dir := t.TempDir()
	tc := filepath.Join(dir, "talosconfig")
	if err := os.WriteFile(tc, e.c.Talosconfig(), 0o600); err != nil {
		t.Fatal(err)
	}
	var nodes []string
	for _, n := range e.c.Nodes() {
		nodes = append(nodes, fmt.Sprintf("{name: %s, address: %s, role: %s, host: %s, platform: %s, installer_class: default}",
			n.Name, n.IP, n.Role, n.Host, n.Platform))
	}
	addr := servetest.FreeAddr(t)
	cfg := filepath.Join(dir, "talosbot.yaml")
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf(`
data_dir: %[1]s/data
snapshot_dir: %[1]s/snapshots
listen: %[2]s
clusters:
  - name: staging
    environment: staging
    channels: [ops]
    endpoints: [%[3]s]
    nodes:
      - %[4]s
    credentials: {source: files, talosconfig: "file:%[5]s"}
    declared: {schematic_id: %[6]s, talos_version: %[7]s}
releases:
  talos: [%[7]s, %[8]s]
timeouts:
  gate: 8s
  node: 30s
policy: {staging: {operators: ["*"]}}
chat:
  web: {enabled: true, users: [{name: alice, token: env:TB_CONSOLE_TOKEN_ALICE}]}
`, dir, addr, e.c.Nodes()[0].IP, strings.Join(nodes, "\n      - "), tc, sim.DefaultSchematic, from, target)), 0o600); err != nil {
		t.Fatal(err)
	}
	b := &servetest.Bot{T: t, Bin: bin, Config: cfg, Addr: addr, Tokens: servetest.NewTokens(t, "alice")}
	b.Start()
	t.Cleanup(func() {
		if b.Cmd.ProcessState == nil {
			_ = b.Cmd.Process.Kill()
			_ = b.Cmd.Wait()
		}
	})
	b.Command("alice", "ops", "/talos upgrade talos "+target+" staging")

	// Hold the roll after node 2 of 5 so the kill lands between nodes 2 and
	// 3 whatever the timing: once worker-2's upgrade is requested, cp-1
	// reports an unhealthy service, so the gate after worker-2 keeps failing
	// and retries (up to the 8 s gate timeout) instead of moving on.
	b.WaitForWithin("node 2 of 5 to start", 2*time.Minute, func() bool { return e.upgradeCalls("worker-2") == 1 })
	if err := e.c.Inject(ctxFor(t, time.Minute), "cp-1", sim.Fault{UnhealthyService: "syslogd"}); err != nil {
		t.Fatal(err)
	}
	var opID string
	b.WaitForWithin("node 2 of 5 to be done", time.Minute, func() bool {
		m, ok := find(b, func(m servetest.Message) bool {
			return m.Field("Operation") != "" && strings.Contains(m.Text, "✅ node 2/5 worker-2")
		})
		opID = m.Field("Operation")
		return ok
	})
	atKill := b.Messages("ops")
	if err := b.Cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = b.Cmd.Wait()
	if opID == "" {
		t.Fatal("no operation id seen")
	}
	killed := map[string]int{}
	for _, n := range e.names() {
		killed[n] = e.upgradeCalls(n)
	}
	if killed["worker-1"] != 1 || killed["worker-2"] != 1 || killed["cp-1"]+killed["cp-2"]+killed["cp-3"] != 0 {
		t.Fatalf("at the kill: %v, want only the workers upgraded\n%v", killed, atKill)
	}

	if err := e.c.ClearAll(ctxFor(t, time.Minute)); err != nil {
		t.Fatal(err)
	}
	b.Start()
	b.Command("alice", "ops", "/talos resume "+opID)
	var final servetest.Message
	b.WaitForWithin("the resumed roll to succeed", 3*time.Minute, func() bool {
		m, ok := find(b, func(m servetest.Message) bool {
			return m.Field("Operation") == opID && (m.Field("State") == "succeeded" || m.Field("State") == "failed")
		})
		final = m
		return ok
	})
	if final.Field("State") != "succeeded" {
		t.Fatalf("resumed roll: %+v\nbot stderr:\n%s", final, b.Stderr)
	}
	_ = b.Cmd.Process.Signal(syscall.SIGTERM)
	_ = b.Cmd.Wait()

	for _, n := range e.names() {
		if got := e.upgradeCalls(n); got != 1 {
			t.Errorf("%s: %d upgrade calls over both runs, want exactly 1 (at the kill: %d)", n, got, killed[n])
		}
		if v := e.c.NodeVersion(n); v != target {
			t.Errorf("%s runs %s", n, v)
		}
	}
	// The resumed run skipped nodes 1–2 (already at the target).
	for _, want := range []string{"3 upgraded, 2 already there", "⏭️ node 1/5 worker-1", "⏭️ node 2/5 worker-2"} {
		if !strings.Contains(final.Text, want) {
			t.Fatalf("final message lacks %q: %s", want, final.Text)
		}
	}
	if strings.Contains(b.Stderr.String(), b.Tokens["alice"]) {
		t.Fatal("the console token reached the log")
	}
}

// find returns the first message in ops that satisfies pred.
func find(b *servetest.Bot, pred func(servetest.Message) bool) (servetest.Message, bool) {
	for _, m := range b.Messages("ops") {
		if pred(m) {
			return m, true
		}
	}
	return servetest.Message{}, false
}
