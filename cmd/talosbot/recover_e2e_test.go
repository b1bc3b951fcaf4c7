package main

import (
	"strings"
	"testing"
	"time"

	"github.com/talosbot/talosbot/internal/servetest"
)

// TestRecoverProductionFromChat is issue 20's end-to-end run: a 3 control
// plane sim whose kube-apiserver stores into the sim's etcd; objects
// written; `/talos snapshot production` through the bot; more objects;
// quorum lost; `/talos recover production` shows the evidence and needs two
// approvers (the requester cannot approve); the bot is SIGKILLed while the
// recovery's upload is held at cp-2 and `/talos resume` finishes it. Then etcd has one leader
// and three voters, the objects from before the snapshot are back, the ones
// after are gone and the report names them as lost; the closing gate passed
// (the operation succeeded), and the upload and the bootstrap happened on
// one node, the bootstrap once. The same recovery by the real talosctl is
// conformance.TestConformanceEtcdRecovery; a kill at every step is
// TestRecoverKilledAtEveryStep.
func TestRecoverProductionFromChat(t *testing.T) {
	// Waits on processes and the sim's reboots, not the CPU: runs beside the package's other slow tests.
	t.Parallel()
	slow(t)
	h := &holder{hit: make(chan string, 1)}
	f := startRecoverFixture(t, h.onCall)
	b := f.b
	f.mk("before-snapshot")
	f.snapshot()
	f.mk("after-snapshot")

	if _, err := f.c.LoseEtcdQuorum(f.ctx); err != nil {
		t.Fatal(err)
	}
	b.Command("alice", "ops", "/talos recover production --accept-loss") // cp-1 survives stale with the newer write
	approval := f.opOf("recover", func(m servetest.Message) bool {
		return m.Field("State") == "awaiting approval" && m.Button("Approve") != ""
	})
	for _, w := range []string{"cp-1: etcd stale", "cp-2: etcd waiting", "production/", "on cp-2",
		"Lost by this recovery (in cp-1's newer data)", "configmaps default/after-snapshot"} {
		if !strings.Contains(approval.Text, w) {
			t.Fatalf("the approval request lacks %q:\n%s", w, approval.Text)
		}
	}
	id := approval.Field("Operation")
	f.approve("alice", approval)
	b.WaitFor("alice's self-approval refused", func() bool {
		return b.HasMessage("ops", func(m servetest.Message) bool {
			return strings.Contains(m.Text, "alice requested "+id+" and cannot approve it")
		})
	})
	h.arm(&killPoint{"upload", func(_, method string) bool { return strings.HasSuffix(method, "/EtcdRecover") }})
	f.approveByBoth(approval)

	// Kill the bot once the recovery's upload reached cp-2 (held there,
	// unhandled), then resume it: cp-1 still holds its newer data, so the
	// resumed run names what it loses.
	b.WaitForWithin("the recovery's upload", 2*time.Minute, func() bool { return len(h.hit) > 0 })
	f.killAndRestart()
	h.letGo()
	// The console's history is in memory: the restarted bot says so in its log.
	b.WaitFor("the interrupted recovery", func() bool { return strings.Contains(b.Stderr.String(), `"op":"`+id+`"`) })
	b.Command("alice", "ops", "/talos resume "+id)
	f.approveResumed(id, nil)
	report := f.awaitSucceeded(id)
	// The objects written after the snapshot are named (cp-1's stale data
	// held them); the one from before is not.
	for _, w := range []string{"restored production/", "lost: everything written after", "took",
		"lost objects (in cp-1's data, newer than the snapshot)", "configmaps default/after-snapshot"} {
		if !strings.Contains(report, w) {
			t.Fatalf("the report lacks %q:\n%s", w, report)
		}
	}
	if strings.Contains(report, "before-snapshot") {
		t.Fatalf("the report names an object from before the snapshot as lost:\n%s", report)
	}
	f.assertRecovered("cp-2")
}
