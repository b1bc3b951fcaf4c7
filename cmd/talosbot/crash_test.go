package main

import (
	"context"
	"fmt"
	"github.com/talosbot/talosbot/internal/servetest"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/talosbot/talosbot/sim"
	"github.com/talosbot/talosbot/state"
)

// TestCrashRecoveryTwentyKills runs a 5-node Talos upgrade through a real
// `talosbot serve`, SIGKILLs the bot at 20 pseudo-random points (seeded, so a
// failure replays), restarts it and resumes each time. Every node must be
// upgraded exactly once, the audit chain must verify, and the history must
// show each interruption and resumption.
func TestCrashRecoveryTwentyKills(t *testing.T) {
	const kills, seed = 20, 20261130
	rng := rand.New(rand.NewPCG(seed, seed))
	ctx := context.Background()
	dir := t.TempDir()
	c, err := sim.Start(ctx, sim.Options{Dir: filepath.Join(dir, "sim"), Name: "staging", ControlPlanes: 3, Workers: 2, RebootDelay: 2 * time.Second})
	must(t, err)
	t.Cleanup(func() { _ = c.Close() })
	tc := filepath.Join(dir, "talosconfig")
	must(t, os.WriteFile(tc, c.Talosconfig(), 0o600))
	var nodes, endpoints []string
	for _, n := range c.Nodes() {
		nodes = append(nodes, fmt.Sprintf("{name: %s, address: %s, role: %s, host: %s, platform: nocloud, installer_class: default}", n.Name, n.IP, n.Role, n.Host))
		if n.Role == sim.RoleControlPlane {
			endpoints = append(endpoints, n.IP)
		}
	}
	addr := servetest.FreeAddr(t)
	cfg := filepath.Join(dir, "talosbot.yaml")
	must(t, os.WriteFile(cfg, []byte(fmt.Sprintf(`
data_dir: %s/data
listen: %s
clusters:
  - name: staging
    environment: staging
    channels: [ops]
    endpoints: [%s]
    nodes: [%s]
    credentials: {source: files, talosconfig: "file:%s"}
    declared: {schematic_id: %s}
releases: {talos: [v1.12.6, v1.13.9]}
timeouts: {gate: 20s, node: 60s}
policy: {staging: {operators: ["*"]}}
chat:
  web: {enabled: true, users: [{name: alice, token: env:TB_CONSOLE_TOKEN_ALICE}]}
`, dir, addr, strings.Join(endpoints, ", "), strings.Join(nodes, ", "), tc, sim.DefaultSchematic)), 0o600))

	b := &servetest.Bot{T: t, Bin: talosbotBinary(t), Config: cfg, Addr: addr, Tokens: servetest.NewTokens(t, "alice")}
	opState := func(id string) string {
		for _, m := range b.Messages("ops") {
			if id != "" && m.Field("Operation") == id {
				return m.Field("State")
			}
		}
		return ""
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
		b.WaitFor(fmt.Sprintf("the operation to run (after %d kills)", killed), func() bool {
			st := opState(opID)
			return st == "running" || st == "succeeded" || st == "failed"
		})
		if st := opState(opID); st != "running" {
			t.Fatalf("after %d kills the operation is %s, not running; bot log:\n%s", killed, st, b.Stderr)
		}
		// The kill point. Three of every four kills land at a seeded moment
		// early in the resumed run (starting, snapshot, gate, or the next
		// upgrade call); the fourth waits for the next upgrade call and kills
		// at a seeded moment of that node's reboot. So the 20 kills spread
		// over all five nodes and the roll finishes only after the last one.
		k, phase := killed/4, killed%4
		if phase < 3 {
			time.Sleep(time.Duration(rng.IntN(250)) * time.Millisecond) // the kill point, not synchronisation
		} else if before := upgradeCalls(c); before < len(c.Nodes()) {
			b.WaitFor("the next upgrade call", func() bool { return upgradeCalls(c) > before })
			time.Sleep(time.Duration(rng.IntN(600)) * time.Millisecond) // the kill point
		} else {
			// Every node has had its call: kill as the last one comes back,
			// during the closing quorum check and gates.
			b.WaitFor("the last node back", func() bool {
				if atTarget(c) != len(c.Nodes()) {
					return false
				}
				for _, n := range c.Nodes() {
					if !c.NodeBooted(n.Name) {
						return false
					}
				}
				return true
			})
		}
		if st := opState(opID); st != "running" {
			t.Fatalf("the operation ended (%s) before kill %d", st, killed+1)
		}
		must(t, b.Cmd.Process.Signal(syscall.SIGKILL))
		_ = b.Cmd.Wait()
		killed++
		t.Logf("kill %d (node %d, phase %d): %d upgrade calls, %d nodes at target", killed, k+1, phase, upgradeCalls(c), atTarget(c))
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
	t.Logf("%d kills; audit chain of %d records verifies; every node upgraded exactly once", kills, rep.Records)
}

func upgradeCalls(c *sim.Cluster) int {
	n := 0
	for _, node := range c.Nodes() {
		n += c.Calls(node.Name, "Upgrade")
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
