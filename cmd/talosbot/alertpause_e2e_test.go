package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/talosbot/talosbot/internal/amtest"
	"github.com/talosbot/talosbot/sim"
)

// TestServeCriticalAlertPausesRollBeforeNextNode: the real Alertmanager and
// the simulated cluster. A critical alert of the cluster fires while the
// first node (worker-1) reboots: the roll finishes that node and pauses
// before cp-1, untouched; the ending names the alert, its summary and start,
// and lists the alert inside the operation's own silence apart. Resume asks
// again and pauses again (the alert still fires); `--ignore-alert NAME`
// goes on to the end.
func TestServeCriticalAlertPausesRollBeforeNextNode(t *testing.T) {
	slow(t)
	e := newFollowupEnv(t, "alert_pause: {every: 1s}\n")
	must(t, e.c.Inject(context.Background(), "worker-1", sim.Fault{SlowReboot: 6 * time.Second}))
	e.b.Start()
	id := e.startUpgrade()
	e.b.WaitForWithin("worker-1's upgrade call", time.Minute, func() bool { return e.c.Calls("worker-1", "Upgrade") > 0 })
	// One the roll is expected to cause (inside its silence), one it is not.
	amtest.PostAlert(t, e.am, map[string]string{"alertname": "KubeNodeNotReady", "cluster": "staging", "node": "worker-1", "severity": "critical"})
	amtest.PostAlert(t, e.am, map[string]string{"alertname": "EtcdNoSpace", "cluster": "staging", "severity": "critical"})

	// ending waits for a paused ending other than prev: each attempt takes
	// its own etcd snapshot and names it there, so a new ending is a new
	// pause (the console may still show the previous one for a moment).
	ending := func(prev string) string {
		var text string
		e.b.WaitForWithin("the roll to pause", 2*time.Minute, func() bool {
			for _, m := range e.b.Messages("ops") {
				if m.Field("Operation") != id {
					continue
				}
				if m.Field("State") == "succeeded" {
					t.Fatalf("the roll did not pause on the critical alert:\n%s", m.Text)
				}
				if m.Field("State") == "interrupted" && strings.Contains(m.Text, "paused by alertmanager") && m.Text != prev {
					text = m.Text
					return true
				}
			}
			return false
		})
		return text
	}
	text := ending("")
	for _, want := range []string{"paused by alertmanager between nodes", "alert EtcdNoSpace (severity=critical) firing since",
		": test EtcdNoSpace", "inside this operation's own silence (not counted): KubeNodeNotReady", "paused before cp-1",
		"--ignore-alert EtcdNoSpace"} {
		if !strings.Contains(text, want) {
			t.Fatalf("the paused ending lacks %q:\n%s", want, text)
		}
	}
	if n := e.c.Calls("cp-1", "Upgrade"); n != 0 {
		t.Fatalf("cp-1 got %d upgrade calls after the alert paused the roll", n)
	}

	// Resume asks again: the alert still fires, so it pauses before cp-1 again.
	e.b.Command("alice", "ops", "/talos resume "+id)
	if again := ending(text); !strings.Contains(again, "EtcdNoSpace") {
		t.Fatalf("the second pause does not name the alert:\n%s", text)
	}
	if n := e.c.Calls("cp-1", "Upgrade"); n != 0 {
		t.Fatalf("cp-1 got %d upgrade calls after a resume with the alert still firing", n)
	}

	e.b.Command("alice", "ops", "/talos resume "+id+" --ignore-alert EtcdNoSpace")
	if st := e.b.AwaitEnd("ops", id, 3*time.Minute); st != "succeeded" {
		t.Fatalf("the roll resumed past the ignored alert %s; bot log:\n%s", st, e.b.Stderr)
	}
	if n := e.c.Calls("cp-1", "Upgrade"); n == 0 {
		t.Fatal("cp-1 was never upgraded")
	}
}
