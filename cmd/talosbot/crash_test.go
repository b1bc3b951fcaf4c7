package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/talosbot/talosbot/internal/servetest"

	"github.com/talosbot/talosbot/sim"
	"github.com/talosbot/talosbot/state"
)

// TestCrashRecoveryTwentyKills runs a 5-node Talos upgrade through a real
// `talosbot serve`, SIGKILLs the bot at 20 pseudo-random points (seeded, so a
// failure replays), restarts it and resumes each time. Every node must be
// upgraded exactly once, the audit chain must verify, and the history must
// show each interruption and resumption.
func TestCrashRecoveryTwentyKills(t *testing.T) {
	// Waits on processes and the sim's reboots, not the CPU: runs beside the package's other slow tests.
	t.Parallel()
	slow(t)
	const kills, seed = 20, 20261130
	rng := rand.New(rand.NewPCG(seed, seed))
	ctx := context.Background()
	dir := t.TempDir()
	c, err := sim.Start(ctx, sim.Options{Dir: filepath.Join(dir, "sim"), Name: "staging", ControlPlanes: 3, Workers: 2, RebootDelay: 2 * time.Second})
	must(t, err)
	t.Cleanup(func() { _ = c.Close() })
	const auditTok = "crash-audit-token-5e6f-0123456789abcdef"
	b := servetest.Config{Dir: dir, Clusters: []servetest.Cluster{{Sim: c}}, Timeouts: "{gate: 20s, node: 60s}",
		Extra: "audit: {token: env:TB_AUDIT}\n"}.Bot(t, talosbotBinary(t))
	b.Env = []string{"TB_AUDIT=" + auditTok}
	// resumed is how many times the operation has resumed, from the audit
	// API: the store's record, written as the resumed run starts (the
	// console's state lags by up to a second of coalesced edits).
	resumed := func(id string) int {
		req, _ := http.NewRequest("GET", "http://"+b.Addr+"/api/audit?limit=1000&action=resumed&op_id="+id, nil)
		req.Header.Set("Authorization", "Bearer "+auditTok)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return -1
		}
		defer resp.Body.Close()
		var recs []state.AuditRecord
		if resp.StatusCode != 200 || json.NewDecoder(resp.Body).Decode(&recs) != nil {
			return -1
		}
		return len(recs)
	}
	opState := func(id string) string {
		for _, m := range b.Messages("ops") {
			if id != "" && m.Field("Operation") == id {
				return m.Field("State")
			}
		}
		return ""
	}
	// The kill schedule follows the roll, not the clock. Each kill waits
	// until its run is on (the first run's state, or the resumed run's
	// audit record), then until plan[j] nodes' upgrade steps have started
	// (the sim's Upgrade calls), then for a seeded number (0–3) of further
	// calls to the sim, and kills. Three kills land before the first node
	// (snapshot, gates), four in each node's step after its Upgrade call
	// (reboot, gates, the next node's checks), and the last as the last
	// node reboots. No kill lands inside an Upgrade request before Talos
	// acknowledges it: there the request is lost with the bot, and the
	// resumed run rightly asks again (so "exactly once" would not hold).
	// Once every node's step has started, the roll is in its
	// closing checks: a kill there lands as the resumed run starts, so a
	// roll that is ahead of the schedule still gets every kill.
	nodes := len(c.Nodes())
	plan := []int{0, 0, 0}
	for k := 1; k < nodes; k++ {
		plan = append(plan, k, k, k, k)
	}
	plan = append(plan, nodes)
	if len(plan) != kills {
		t.Fatalf("the schedule has %d kills, want %d", len(plan), kills)
	}
	var opID string
	killed := 0
	for killed < kills {
		b.Start()
		if opID == "" {
			if code := b.Post("/api/console/commands", map[string]string{"user": "alice", "channel": "ops", "text": "/talos upgrade talos v1.13.9 staging"}); code != 202 {
				t.Fatalf("upgrade: HTTP %d", code)
			}
			b.WaitFor("the upgrade to start", func() bool {
				for _, m := range b.Messages("ops") {
					if strings.Contains(m.Title, "/talos upgrade talos") && m.Field("Operation") != "" {
						opID = m.Field("Operation")
						return true
					}
				}
				return false
			})
		} else {
			if code := b.Post("/api/console/commands", map[string]string{"user": "alice", "channel": "ops", "text": "/talos resume " + opID}); code != 202 {
				t.Fatalf("resume: HTTP %d", code)
			}
		}
		if killed == 0 {
			b.WaitFor("the operation to run", func() bool { return opState(opID) == "running" })
		} else {
			b.WaitFor(fmt.Sprintf("the operation to resume (after %d kills)", killed), func() bool { return resumed(opID) >= killed })
		}
		want, depth := plan[killed], rng.IntN(4)
		if upgradeCalls(c) >= nodes {
			depth = 0 // the closing checks: kill as the resumed run starts
		}
		b.WaitForWithin(fmt.Sprintf("kill point %d: %d nodes' upgrade steps started", killed+1, want), 2*time.Minute, func() bool {
			return upgradeCalls(c) >= want
		})
		base := simCalls(c)
		b.WaitForWithin(fmt.Sprintf("kill point %d: %d more calls to the sim, no Upgrade request unanswered", killed+1, depth), 2*time.Minute, func() bool {
			return simCalls(c) >= base+depth && !upgradeUnanswered(c)
		})
		must(t, b.Cmd.Process.Signal(syscall.SIGKILL))
		_ = b.Cmd.Wait()
		killed++
		t.Logf("kill %d (after %d upgrade steps started, %d calls in): %d upgrade calls, %d nodes at target", killed, want, depth, upgradeCalls(c), atTarget(c))
	}
	// Let it finish.
	b.Start()
	if code := b.Post("/api/console/commands", map[string]string{"user": "alice", "channel": "ops", "text": "/talos resume " + opID}); code != 202 {
		t.Fatalf("final resume: HTTP %d", code)
	}
	if st := b.AwaitEnd("ops", opID, 3*time.Minute); st != "succeeded" {
		var texts []string
		for _, m := range b.Messages("ops") {
			if m.Field("Operation") == opID {
				texts = append(texts, m.Text)
			}
		}
		t.Fatalf("final run: %s:\n%s\nbot log:\n%s", st, strings.Join(texts, "\n"), b.Stderr)
	}
	must(t, b.Cmd.Process.Signal(syscall.SIGTERM))
	_ = b.Cmd.Wait()

	for _, n := range c.Nodes() {
		if got := c.Calls(n.Name, "Upgrade"); got != 1 {
			t.Errorf("%s was upgraded %d times, want exactly once", n.Name, got)
		}
		if v := c.NodeVersion(n.Name); v != "v1.13.9" {
			t.Errorf("%s runs %s", n.Name, v)
		}
	}
	st, err := state.Open(filepath.Join(dir, "data", "talosbot.db"), state.Options{ReadOnly: true})
	must(t, err)
	defer st.Close()
	rep, err := st.VerifyAudit(ctx)
	must(t, err)
	recs, err := st.QueryAudit(ctx, state.AuditQuery{OpID: opID, Limit: 10000})
	must(t, err)
	count := map[string]int{}
	for _, r := range recs {
		count[r.Action]++
	}
	if count["interrupted"] != kills || count["resumed"] != kills || count["succeeded"] != 1 {
		t.Fatalf("history: %d interrupted, %d resumed, %d succeeded; want %d, %d, 1", count["interrupted"], count["resumed"], count["succeeded"], kills, kills)
	}
	t.Logf("%d kills; audit chain of %d records verifies; every node upgraded exactly once", killed, rep.Records)
}

func upgradeCalls(c *sim.Cluster) int {
	n := 0
	for _, node := range c.Nodes() {
		n += c.Calls(node.Name, "Upgrade")
	}
	return n
}

// upgradeUnanswered reports whether a node has received an Upgrade request
// but is not on its way yet: it still runs its old version and is in no
// sequence, so the request is still being answered.
func upgradeUnanswered(c *sim.Cluster) bool {
	for _, n := range c.Nodes() {
		if c.Calls(n.Name, "Upgrade") > 0 && c.NodeBooted(n.Name) && c.NodeVersion(n.Name) != "v1.13.9" {
			return true
		}
	}
	return false
}

// simCalls is how many calls every node of c has served.
func simCalls(c *sim.Cluster) int {
	n := 0
	for _, methods := range c.CallCounts() {
		for _, k := range methods {
			n += k
		}
	}
	return n
}

func atTarget(c *sim.Cluster) int {
	n := 0
	for _, node := range c.Nodes() {
		if c.NodeVersion(node.Name) == "v1.13.9" {
			n++
		}
	}
	return n
}
