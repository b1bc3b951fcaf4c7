package main

import (
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/talosbot/talosbot/internal/servetest"
	"github.com/talosbot/talosbot/sim"
)

// TestRecoverKilledAtEveryStep is issue 20's "kill -9 of the bot at each
// step of a recovery": one recovery of production is SIGKILLed once in each
// of its steps (confirm, upload, bootstrap, etcd, rejoin, members, gate) —
// each time the step's call has reached the sim and is held there — and
// after every restart the operation is announced as interrupted with a
// Resume button, resumed (approved again when the new plan asks) and runs
// on to the next kill point; the last attempt succeeds. From the sim's
// side: only the recovery node accepted an upload, it bootstrapped exactly
// once, and etcd ends with one leader and three voting members; the closing
// gate passed (the operation succeeded). isolate has no call of its own: it
// is decided from the confirm step's reads, so its kill point is confirm's.
func TestRecoverKilledAtEveryStep(t *testing.T) {
	// Waits on processes and the sim's reboots, not the CPU: runs beside the package's other slow tests.
	t.Parallel()
	slow(t)
	t0 := time.Now()
	h := &holder{hit: make(chan string, 1)}
	var c *sim.Cluster
	f := startRecoverFixture(t, h.onCall)
	c = f.c
	b := f.b
	f.mk("before-snapshot")
	f.snapshot()
	f.mk("after-snapshot")
	if _, err := c.LoseEtcdQuorum(f.ctx); err != nil {
		t.Fatal(err)
	}

	// The run's evidence reading (confirm) streams cp-1's stale data once
	// per check; the plan at the request and the re-plan right before the
	// run read it first, so the run's own read is the third.
	snapshots := 0
	points := []*killPoint{
		{"confirm", func(node, method string) bool {
			if node != "cp-1" || !strings.HasSuffix(method, "/EtcdSnapshot") {
				return false
			}
			snapshots++
			return snapshots == 3
		}},
		{"upload", func(node, method string) bool { return strings.HasSuffix(method, "/EtcdRecover") }},
		{"bootstrap", func(node, method string) bool { return strings.HasSuffix(method, "/Bootstrap") }},
		// waitEtcd's first read of the recovery node after the bootstrap
		// was accepted.
		{"etcd", func(node, method string) bool {
			return node == "cp-2" && strings.HasSuffix(method, "/ServiceList") && c.RecoveryCounts("cp-2").Bootstraps == 1
		}},
		{"rejoin", func(node, method string) bool { return node == "cp-1" && strings.HasSuffix(method, "/Reset") }},
		// The members step's first membership read once cp-1's reset
		// (the second Reset call; the first was held) went through.
		{"members", func(node, method string) bool {
			return strings.HasSuffix(method, "/EtcdMemberList") && c.Calls("cp-1", "/machine.MachineService/Reset") >= 2
		}},
		// Only the closing gate asks the server-side health check.
		{"gate", func(node, method string) bool {
			return strings.HasSuffix(method, "/cluster.ClusterService/HealthCheck")
		}},
	}

	var id string
	hitOrEnd := func(kp *killPoint) {
		t.Helper()
		var ended string
		b.WaitForWithin("the "+kp.step+" step's call to reach the sim", 3*time.Minute, func() bool {
			select {
			case s := <-h.hit:
				if s != kp.step {
					t.Fatalf("held %s, want %s", s, kp.step)
				}
				return true
			default:
			}
			for _, m := range b.Messages("ops") {
				if m.Field("Operation") == id {
					switch st := m.Field("State"); st {
					case "succeeded", "failed", "refused", "cancelled", "denied", "expired":
						ended = st
						return true
					}
				}
			}
			return false
		})
		if ended != "" {
			for _, m := range b.Messages("ops") {
				if m.Field("Operation") == id {
					t.Logf("%s", m.Text)
				}
			}
			t.Fatalf("the recovery ended %s before its %s step was killed\n%s", ended, kp.step, b.Stderr.String())
		}
	}

	for i, kp := range points {
		h.arm(kp)
		if i == 0 {
			b.Command("alice", "ops", "/talos recover production --accept-loss")
			approval := f.opOf("recover", func(m servetest.Message) bool {
				return m.Field("State") == "awaiting approval" && m.Button("Approve") != ""
			})
			id = approval.Field("Operation")
			f.approveByBoth(approval)
		} else {
			f.resumeFromChat(id, h)
		}
		hitOrEnd(kp)
		if kp.step == "confirm" {
			if n := c.Calls("cp-2", "/machine.MachineService/EtcdRecover"); n != 0 {
				t.Fatalf("killed in confirm, but %d uploads reached cp-2", n)
			}
		}
		t.Logf("%s: SIGKILL in step %s", time.Since(t0).Round(time.Second), kp.step)
		must(t, b.Cmd.Process.Signal(syscall.SIGKILL))
		_ = b.Cmd.Wait()
		h.letGo()
		b.Start()
	}
	f.resumeFromChat(id, h)
	report := f.awaitSucceeded(id)
	// cp-1's newer data went with its reset in an earlier attempt: the last
	// one says where the lost objects were named instead of guessing.
	for _, w := range []string{"restored production/", "wiped by an earlier attempt"} {
		if !strings.Contains(report, w) {
			t.Fatalf("the report lacks %q:\n%s", w, report)
		}
	}
	f.assertRecovered("cp-2")
	if got := c.RecoveryCounts("cp-2"); got.Bootstraps != 1 {
		t.Fatalf("cp-2: %+v", got)
	}
	t.Logf("%d kills, recovered in %s", len(points), time.Since(t0).Round(time.Second))
}

// resumeFromChat waits for the restarted bot's interrupted notice of id,
// presses its Resume button as alice and approves the new plan when asked.
func (f *recoverFixture) resumeFromChat(id string, h *holder) {
	f.t.Helper()
	var notice servetest.Message
	f.b.WaitForWithin("the interrupted notice of "+id+" with Resume", 2*time.Minute, func() bool {
		for _, m := range f.b.Messages("ops") {
			if strings.Contains(m.Text, "interrupted · `"+id+"`") && m.Button("Resume") != "" {
				notice = m
				return true
			}
		}
		return false
	})
	if code := f.b.Post("/api/console/actions", map[string]string{"user": "alice", "message_id": notice.ID, "action_id": notice.Button("Resume")}); code != 202 {
		f.t.Fatalf("alice resume: HTTP %d", code)
	}
	// A held call means the run got to the next kill point without asking.
	f.approveResumed(id, func() bool { return len(h.hit) > 0 })
}
