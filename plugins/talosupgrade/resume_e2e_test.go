package talosupgrade

import (
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/talosbot/talosbot/internal/servetest"

	"github.com/talosbot/talosbot/sim"
)

// TestResumeAfterSIGKILL drives a real `talosbot serve` through the console
// API: the roll of 5 nodes is killed with SIGKILL right after node 2 is
// done, the bot restarts, `/talos resume` continues it: nodes 1–2 are
// skipped and nodes 3–5 are upgraded, each exactly once (the sim's counts).
func TestResumeAfterSIGKILL(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("builds and runs talosbot")
	}
	bin := servetest.Binary(t)
	e := start(t, 3, 2, false, nil)
	b := servetest.Config{Dir: t.TempDir(), SnapshotDir: true, Clusters: []servetest.Cluster{{Sim: e.c, Declared: "talos_version: " + from}},
		Releases: "{talos: [" + from + ", " + target + "]}", Timeouts: "{gate: 8s, node: 30s}"}.Bot(t, bin)
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
	// Node 2 is done once worker-2 runs the target and the gate after it has
	// started asking cp-1 (whose fault keeps it failing): the message shows
	// nodes, not steps, so the sim says when the plugin moved on.
	gateCalls := func() int { return e.c.Calls("cp-1", "ServiceList") + e.c.Calls("cp-1", "HealthCheck") }
	b.WaitForWithin("worker-2 to run the target", time.Minute, func() bool { return e.c.NodeVersion("worker-2") == target })
	before := gateCalls()
	var opID string
	b.WaitForWithin("the gate after node 2 of 5", time.Minute, func() bool {
		m, ok := find(b, func(m servetest.Message) bool { return m.Field("Operation") != "" })
		opID = m.Field("Operation")
		return ok && gateCalls() >= before+2
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
	// The resumed run skipped nodes 1–2 (already at the target): the
	// result says so, and their rows in the node table are not "done" again.
	if !strings.Contains(final.Text, "3 upgraded, 2 already there") {
		t.Fatalf("final message lacks the result: %s", final.Text)
	}
	for _, n := range []string{"worker-1", "worker-2"} {
		row := ""
		for _, l := range strings.Split(final.Text, "\n") {
			if strings.HasPrefix(l, "| "+n+" |") {
				row = l
			}
		}
		// Two ways the resume goes (bot/engine/resume.go): planned again,
		// the row says the node was already at the target; or, when the
		// re-plan fails because a node is still settling (apid's reconnect
		// backoff right after the kill), the approved plan goes on and the
		// node's steps are recorded as done in attempt 1: "✅ done" with no
		// time spent in this attempt ("—"). A node worked on again would
		// show a duration.
		doneBefore := strings.Contains(row, "✅ done") && strings.HasSuffix(strings.TrimSpace(row), "| — |")
		if !doneBefore && !strings.Contains(row, "skipped") && !strings.Contains(row, "attempt 1") && !strings.Contains(row, "already there") {
			t.Fatalf("%s's row in the final message says neither skipped, attempt 1 nor already there: %q\n%s", n, row, final.Text)
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
