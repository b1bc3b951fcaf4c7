package talosupgrade

import (
	"syscall"
	"testing"
	"time"

	"github.com/talosbot/talosbot/internal/servetest"
	"github.com/talosbot/talosbot/sim"
)

// TestMultiHopResumeAfterSIGKILL drives a real `talosbot serve`: one
// command (staging needs no approval here) plans v1.11.3 → v1.11.6 →
// v1.12.6 → v1.13.9; the bot is killed with SIGKILL in hop 2, right after
// its first node is done; `/talos resume` lands on hop 2: hop 1 is not run
// again, that node is skipped, and every node ends with exactly one upgrade
// per hop (the sim's counts) on v1.13.9.
func TestMultiHopResumeAfterSIGKILL(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("builds and runs talosbot")
	}
	bin := servetest.Binary(t)
	e := start(t, 1, 2, false, func(o *sim.Options) { o.TalosVersion = hopFrom })
	b := servetest.Config{Dir: t.TempDir(), SnapshotDir: true, Clusters: []servetest.Cluster{{Sim: e.c, Declared: "talos_version: " + hopFrom}},
		Releases: "{talos: [v1.11.3, v1.11.6, v1.12.0, v1.12.6, v1.13.9]}", Timeouts: "{gate: 8s, node: 30s}"}.Bot(t, bin)
	b.Start()
	t.Cleanup(func() {
		if b.Cmd.ProcessState == nil {
			_ = b.Cmd.Process.Kill()
			_ = b.Cmd.Wait()
		}
	})
	b.Command("alice", "ops", "/talos upgrade talos "+target+" staging")

	// Hop 2's first node is worker-1 (workers first). Once its second
	// upgrade is requested, cp-1 reports an unhealthy service, so the gate
	// after worker-1 keeps retrying (up to the 8 s gate timeout) and the
	// kill lands inside hop 2, after worker-1, whatever the timing.
	b.WaitForWithin("hop 2 to start on worker-1", 3*time.Minute, func() bool { return e.upgradeCalls("worker-1") == 2 })
	if err := e.c.Inject(ctxFor(t, time.Minute), "cp-1", sim.Fault{UnhealthyService: "syslogd"}); err != nil {
		t.Fatal(err)
	}
	b.WaitForWithin("worker-1 to reach v1.12.6", time.Minute, func() bool { return e.c.NodeVersion("worker-1") == "v1.12.6" })
	var opID string
	if m, ok := find(b, func(m servetest.Message) bool { return m.Field("Operation") != "" }); ok {
		opID = m.Field("Operation")
	}
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
	if killed["worker-1"] != 2 || killed["worker-2"] != 1 || killed["cp-1"] != 1 {
		t.Fatalf("at the kill: %v, want hop 1 done everywhere and hop 2 only on worker-1", killed)
	}

	if err := e.c.ClearAll(ctxFor(t, time.Minute)); err != nil {
		t.Fatal(err)
	}
	b.Start()
	b.Command("alice", "ops", "/talos resume "+opID)
	if st := b.AwaitEnd("ops", opID, 4*time.Minute); st != "succeeded" {
		t.Fatalf("resumed path: %s\nbot stderr:\n%s", st, b.Stderr)
	}
	_ = b.Cmd.Process.Signal(syscall.SIGTERM)
	_ = b.Cmd.Wait()
	for _, n := range e.names() {
		if got := e.upgradeCalls(n); got != 3 {
			t.Errorf("%s: %d upgrade calls over both runs, want 3, one per hop (at the kill: %d)", n, got, killed[n])
		}
		if v := e.c.NodeVersion(n); v != target {
			t.Errorf("%s runs %s", n, v)
		}
	}
}
