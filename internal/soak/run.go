package soak

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/client"
	clientconfig "github.com/siderolabs/talos/pkg/machinery/client/config"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/talosbot/talosbot/bot/render"
	"github.com/talosbot/talosbot/internal/servetest"
	"github.com/talosbot/talosbot/internal/testenv"
	"github.com/talosbot/talosbot/sim"
	"github.com/talosbot/talosbot/state"
)

// Env is what every scenario of a soak shares: the talosbot binary. Each
// scenario starts its own kube-apiserver (about 3 s): Talos's health check
// counts every kube-apiserver pod the API has, so scenarios cannot share one.
type Env struct {
	Bin string
}

// Result is one scenario's outcome.
type Result struct {
	Scenario Scenario
	// Applied counts the faults set (and SIGKILLs done) by kind; an event
	// whose point the operations never reached is not applied.
	Applied map[string]int
	Breaks  []Break
	// Ops is each operation's command and how it ended; Endings its
	// message's text then (for the log of a failing seed).
	Ops     []string
	Endings []string
	// Notes are what the log should show that is no break (an operation
	// that needed the faults cleared to end).
	Notes []string
	Wall  time.Duration
}

// Timing of a scenario's operations.
const (
	opDeadline = 4 * time.Minute
	// opQuiet is how long an operation gets to end once the faults are
	// cleared at opDeadline (resumed if interrupted).
	opQuiet = 3 * time.Minute
	// upgradeAnswer bounds how long a SIGKILL waits for an Upgrade request to
	// be answered (UpgradeInFlight).
	upgradeAnswer = 20 * time.Second
	// lostMessage is how long after a restart an operation without a
	// message is taken to have ended before it (storeMessage).
	lostMessage = 20 * time.Second
	nodesBack   = 90 * time.Second
)

// users are the console's users: alice requests, bob and carol approve production.
func users() []string { return []string{"alice", "bob", "carol"} }

// op is one command of a scenario.
type op struct {
	text string
	// hops is how many Upgrade calls one node may get in it.
	hops int
	// talos: the ending's versions are Talos versions; else Kubernetes (kubelet).
	talos bool
	// target is where a node is when the operation succeeded ("" for no check).
	target string
	// again: an operation that did not succeed is run once more after the
	// faults are cleared, as an operator would (a rollback needs the roll).
	again bool
}

func (s Scenario) cluster() (name, env string) {
	if s.Kind == KindProductionRoll {
		return "production", "production"
	}
	return "staging", "staging"
}

func (s Scenario) ops() []op {
	name, _ := s.cluster()
	roll := op{text: "/talos upgrade talos " + talosTarget + " " + name, hops: 1, talos: true, target: talosTarget}
	switch s.Kind {
	case KindProductionRoll:
		roll.text += " --skip-staging"
		return []op{roll}
	case KindMultiHop:
		roll.text, roll.hops, roll.target = "/talos upgrade talos "+talosHopTarget+" "+name, 2, talosHopTarget
		return []op{roll}
	case KindK8sUpgrade:
		return []op{{text: "/talos upgrade k8s " + k8sTarget + " " + name, hops: 0, target: "v" + k8sTarget}}
	case KindNodeRemove:
		return []op{{text: "/talos node remove " + s.Target + " " + name}}
	case KindRollback:
		roll.again = true
		return []op{roll, {text: "/talos rollback " + s.Target + " " + name, hops: 0, talos: true}}
	}
	return []op{roll}
}

// nodeName is a node's Kubernetes Node name: the seed keeps scenarios apart
// on the shared kube-apiserver.
func (s Scenario) nodeName(node string) string { return fmt.Sprintf("s%d-%s", s.Seed, node) }

// Run runs one scenario: a fresh sim and bot, the operations with the fault
// schedule, the invariants after each operation and at the end.
func Run(t testing.TB, env Env, s Scenario) Result {
	t.Helper()
	start := time.Now()
	res := Result{Scenario: s, Applied: map[string]int{}}
	ctx := context.Background()
	dir := t.TempDir()
	obs := NewObserver()
	kube := testenv.StartKube(t)
	opts := sim.Options{Dir: filepath.Join(dir, "sim"), ControlPlanes: controlPlanes, Workers: workers,
		TalosVersion: talosFrom, KubernetesVersion: k8sFrom, RebootDelay: s.RebootDelay,
		Kube: kube.Client, Kubeconfig: kube.Kubeconfig, StaticPods: true,
		// PodGC deletes a removed control plane's mirror pods 4 s after its Node is deleted
		// (Kubernetes: 40 s, sim/podgc.go), so a removal's gate after does not spend its
		// 60 s waiting for them.
		PodGCQuarantine: 4 * time.Second,
		Naming: func(i sim.NodeInfo) sim.NodeNames {
			return sim.NodeNames{Hostname: i.Name, NodeName: s.nodeName(i.Name), EtcdMember: i.Name}
		},
		OnCall: obs.OnCall, OnTransition: obs.OnTransition}
	opts.Name, _ = s.cluster()
	switch s.Kind {
	case KindK8sUpgrade:
		opts.TalosVersion = talosTarget
	}
	c, err := sim.Start(ctx, opts)
	if err != nil {
		t.Fatalf("%s: start sim: %v", s, err)
	}
	obs.Attach(c)
	defer func() { _ = c.Close() }()
	storage := startStorage(t, kube, c) // InvStorage (storage.go)
	name, environment := s.cluster()
	b := servetest.Config{Dir: dir, SnapshotDir: true, Users: users(),
		Clusters: []servetest.Cluster{{Name: name, Environment: environment, Sim: c, Kubeconfig: kube.Kubeconfig,
			Declared: "talos_version: " + opts.TalosVersion}},
		Releases: releases,
		// gate_after bounds the gate after each node and at the end (default 10 minutes),
		// so that an operation a fault keeps failing ends within the scenario.
		Timeouts: "{gate: 15s, gate_after: 60s, health: 30s, node: 45s}"}.Bot(t, env.Bin)
	b.Start()
	defer func() {
		if b.Cmd.ProcessState == nil {
			_ = b.Cmd.Process.Kill()
			_ = b.Cmd.Wait()
		}
	}()

	sch := newScheduler(c, obs, s.Events, res.Applied)
	defer sch.stop()

	for _, o := range s.ops() {
		for try := 0; ; try++ {
			end := runOp(t, ctx, kube, c, b, obs, sch, s, o, &res)
			res.Ops = append(res.Ops, o.text+": "+end)
			sch.clear(ctx)
			settle(ctx, c, s)
			if end == "succeeded" || !o.again || try > 0 {
				break
			}
		}
	}
	sch.stop()
	sch.clear(ctx)

	// The end: stop the bot, then read its store.
	_ = b.Cmd.Process.Signal(syscall.SIGTERM)
	_ = b.Cmd.Wait()
	res.Breaks = append(res.Breaks, obs.Breaks()...)
	res.Breaks = append(res.Breaks, storage.Breaks()...)
	res.Notes = append(res.Notes, storage.Notes()...)
	res.Breaks = append(res.Breaks, checkStore(ctx, filepath.Join(dir, "data", "talosbot.db"))...)
	res.Wall = time.Since(start)
	return res
}

// runOp submits one operation and drives it to its end through approvals,
// the schedule's SIGKILLs and resumes; it checks the invariants of its end
// and returns the state it ended in ("hung" when it did not end).
func runOp(t testing.TB, ctx context.Context, kube *testenv.Kube, c *sim.Cluster, b *servetest.Bot, obs *Observer, sch *scheduler, s Scenario, o op, res *Result) string {
	t.Helper()
	before := map[string]int{}
	for _, n := range NodeNames() {
		before[n] = c.Calls(n, "Upgrade")
	}
	known := map[string]bool{}
	for _, m := range b.Messages("ops") {
		if id := m.Field("Operation"); id != "" {
			known[id] = true
		}
	}
	b.Command("alice", "ops", o.text)
	var id string
	b.WaitFor("the operation of "+o.text, func() bool {
		for _, m := range b.Messages("ops") {
			if oid := m.Field("Operation"); oid != "" && !known[oid] {
				id = oid
				return true
			}
		}
		return false
	})
	// The schedule fires once the run starts (a kill while planning only
	// fails the request: "talosbot stopped before the plan was ready").
	runs := false
	defer func() {
		if runs {
			sch.running(false)
		}
	}()

	// kill SIGKILLs the bot and starts it again, keeping the tail of the
	// killed process's log for a break's report: an operation that does not
	// end is diagnosed from every process it ran in, not only the last.
	var lives []string
	var restarted time.Time // the last restart of the bot during this operation
	db := filepath.Join(filepath.Dir(b.Config), "data", "talosbot.db")
	kill := func(why string) {
		_ = b.Cmd.Process.Signal(syscall.SIGKILL)
		_ = b.Cmd.Wait()
		lines := strings.Split(strings.TrimSpace(b.Stderr.String()), "\n") // complete once Wait returned
		lives = append(lives, fmt.Sprintf("--- the bot killed %s (its log's tail):\n%s", why, strings.Join(lines[max(0, len(lines)-25):], "\n")))
		b.Start()
	}
	clicked := map[string]bool{}
	deadline := time.Now().Add(opDeadline)
	lastResume := time.Time{}
	// quiet: the deadline passed with the faults on; they are cleared, the
	// schedule fires no more, and the operation gets opQuiet to end.
	quiet := false
	var final string
	for final == "" {
		if time.Now().After(deadline) {
			if quiet {
				break
			}
			// A fault held until the operation ends can keep it from
			// ending (an unreachable node refuses every resume's plan):
			// ended or resumable is the invariant, so clear the faults,
			// make sure the bot is not stuck (kill it if it still runs
			// the operation: it comes back interrupted), and resume.
			quiet = true
			if m, _ := opMessage(b, id); m.Field("State") != "interrupted" {
				kill("at " + opDeadline.String() + " with the faults on")
				res.Notes = append(res.Notes, fmt.Sprintf("%s (%s) still %q after %s with the faults on: SIGKILLed; its message then:\n%s", o.text, id, m.Field("State"), opDeadline, m.Text))
			} else {
				res.Notes = append(res.Notes, fmt.Sprintf("%s (%s) still interrupted after %s with the faults on (its resumes were refused)", o.text, id, opDeadline))
			}
			if runs {
				sch.running(false)
				runs = false
			}
			sch.clear(ctx)
			settle(ctx, c, s)
			deadline, lastResume = time.Now().Add(opQuiet), time.Time{}
		}
		select {
		case <-sch.kills:
			// Wait out an Upgrade request still being answered (see UpgradeInFlight).
			_ = wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, upgradeAnswer, true, func(context.Context) (bool, error) {
				return !obs.UpgradeInFlight(5 * time.Second), nil
			})
			// The operation may have ended meanwhile (the answer awaited was
			// its last call's): a kill now tests nothing of it, and the web
			// console keeps no message across a restart, so its ending would
			// be known only from the store (seeds 1037, 1062).
			if m, ok := opMessage(b, id); ok && finalState(m.Field("State")) {
				break
			}
			sch.count(KindSIGKILL)
			kill("by the schedule")
			restarted, lastResume = time.Now(), time.Time{}
		case <-time.After(200 * time.Millisecond):
		}
		m, ok := opMessage(b, id)
		if !ok && !restarted.IsZero() && time.Since(restarted) > lostMessage {
			// A restarted bot posts the operations it must resume or have
			// approved; one that ended right before the kill has no message
			// in the new console: its end is read from the store.
			m, ok = storeMessage(db, id)
		}
		if !ok {
			continue
		}
		if st := m.Field("State"); !runs && !quiet && st == "running" {
			runs = true
			sch.running(true)
		}
		switch st := m.Field("State"); {
		case finalState(st):
			final = st
			res.Endings = append(res.Endings, o.text+" → "+st+":\n"+m.Text)
			res.Breaks = append(res.Breaks, checkEnd(ctx, kube, c, s, o, id, st, m.Text, before)...)
		case st == "awaiting approval":
			for _, u := range users()[1:] {
				if a := m.Button("Approve"); a != "" && !clicked[m.ID+a+u] {
					clicked[m.ID+a+u] = true
					b.Post("/api/console/actions", map[string]string{"user": u, "message_id": m.ID, "action_id": a})
				}
			}
		case st == "interrupted":
			if time.Since(lastResume) > 10*time.Second {
				lastResume = time.Now()
				b.Command("alice", "ops", "/talos resume "+id)
			}
		}
	}
	if final == "" {
		// Still running: what the bot shows now, then kill and restart: it
		// must come back resumable.
		m, _ := opMessage(b, id)
		var last []string
		msgs := b.Messages("ops")
		for _, x := range msgs[max(0, len(msgs)-4):] {
			last = append(last, x.Title+" | "+x.Text)
		}
		kill("as the operation did not end")
		res.Breaks = append(res.Breaks, Break{InvEnded, fmt.Sprintf("%s (%s) did not end within %s, the last %s without faults (state %q):\n%s\nlast messages:\n%s\n%s",
			o.text, id, opDeadline+opQuiet, opQuiet, m.Field("State"), m.Text, strings.Join(last, "\n---\n"), strings.Join(lives, "\n"))})
		b.Command("alice", "ops", "/talos abandon "+id)
		final = "hung"
	}
	return final
}

// finalState reports whether an operation's State field names an end.
func finalState(st string) bool {
	switch st {
	case "succeeded", "failed", "refused", "cancelled", "denied", "expired":
		return true
	}
	return false
}

// storeMessage reads operation id's end from a copy of the bot's store (the
// running bot holds the store's lock; it is idle for an operation that has
// ended). The message is the state and the result with its ending lines, as
// the operation's message shows them; false unless the operation has ended.
func storeMessage(db, id string) (servetest.Message, bool) {
	raw, err := os.ReadFile(db)
	if err != nil {
		return servetest.Message{}, false
	}
	cp := db + ".soak-copy"
	defer os.Remove(cp)
	if err := os.WriteFile(cp, raw, 0o600); err != nil {
		return servetest.Message{}, false
	}
	st, err := state.Open(cp, state.Options{ReadOnly: true})
	if err != nil {
		return servetest.Message{}, false
	}
	defer st.Close()
	var op *state.Operation
	_ = st.View(context.Background(), func(tx *state.Tx) error {
		op, err = tx.Operation(id)
		return err
	})
	if op == nil || !finalState(render.StateLabel(op)) {
		return servetest.Message{}, false
	}
	// The message the bot would show: the renderer's, without its facts.
	m := render.Render(op, nil, nil, time.Now())
	out := servetest.Message{Title: m.Title, Text: m.Text}
	for _, f := range m.Fields {
		out.Fields = append(out.Fields, struct{ Label, Value string }{f.Label, f.Value})
	}
	return out, true
}

func opMessage(b *servetest.Bot, id string) (servetest.Message, bool) {
	for _, m := range b.Messages("ops") {
		if m.Field("Operation") == id {
			return m, true
		}
	}
	return servetest.Message{}, false
}

// endingLine is one node's line of an ending: "• cp-1: done, at v1.13.9 — …".
var endingLine = regexp.MustCompile(`(?m)^• ([a-z0-9-]+): ([a-z ]+?)(?:, at (v[0-9][^\s,]*))?(?:,| —|$)`)

// checkEnd checks the invariants of an operation's end: the ending's words
// against each node's real version, no cordoned node it does not name, no
// node upgraded twice.
func checkEnd(ctx context.Context, kube *testenv.Kube, c *sim.Cluster, s Scenario, o op, id, st, text string, before map[string]int) []Break {
	var out []Break
	actual := func(node string) string {
		if o.talos {
			return c.NodeVersion(node)
		}
		n, err := kube.Client.CoreV1().Nodes().Get(ctx, s.nodeName(node), metav1.GetOptions{})
		if err != nil {
			return ""
		}
		return n.Status.NodeInfo.KubeletVersion
	}
	if st == "succeeded" && o.target != "" {
		for _, n := range NodeNames() {
			if v := actual(n); v != o.target {
				out = append(out, Break{InvEnding, fmt.Sprintf("%s (%s) succeeded but %s runs %s, not %s", o.text, id, n, v, o.target)})
			}
		}
	}
	if st == "succeeded" && strings.Contains(o.text, "node remove") && c.NodeBooted(s.Target) {
		out = append(out, Break{InvEnding, fmt.Sprintf("%s (%s) succeeded but %s still runs", o.text, id, s.Target)})
	}
	for _, m := range endingLine.FindAllStringSubmatch(text, -1) {
		node, state, v := m[1], m[2], m[3]
		if v == "" || !slices.Contains(NodeNames(), node) {
			continue
		}
		if !o.talos && state != "done" && state != "not started" && state != "already there" {
			continue // a Kubernetes node partly done has no one version
		}
		if got := actual(node); got != v {
			out = append(out, Break{InvEnding, fmt.Sprintf("%s (%s) ended %q for %s, which runs %s", o.text, id, m[0], node, got)})
		}
	}
	nodes, err := kube.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err == nil {
		for _, n := range nodes.Items {
			for _, inv := range NodeNames() {
				if n.Name == s.nodeName(inv) && n.Spec.Unschedulable && !(strings.Contains(text, "cordon") && (strings.Contains(text, n.Name) || strings.Contains(text, inv))) {
					out = append(out, Break{InvCordon, fmt.Sprintf("%s (%s) ended %s with %s cordoned, and its ending does not say so:\n%s", o.text, id, st, n.Name, text)})
				}
			}
		}
	}
	for _, n := range NodeNames() {
		if got := c.Calls(n, "Upgrade") - before[n]; got > max(o.hops, 1) {
			out = append(out, Break{InvOneUpgrade, fmt.Sprintf("%s (%s): %s got %d Upgrade calls (%d hops)", o.text, id, n, got, max(o.hops, 1))})
		}
	}
	return out
}

// checkStore checks the stopped bot's store: the audit chain verifies, and
// every operation has ended or is resumable (interrupted).
func checkStore(ctx context.Context, path string) []Break {
	st, err := state.Open(path, state.Options{ReadOnly: true})
	if err != nil {
		return []Break{{InvAudit, fmt.Sprintf("open the store: %v", err)}}
	}
	defer st.Close()
	var out []Break
	if _, err := st.VerifyAudit(ctx); err != nil {
		out = append(out, Break{InvAudit, err.Error()})
	}
	var ops []*state.Operation
	err = st.View(ctx, func(tx *state.Tx) error {
		var err error
		ops, err = tx.Operations(state.OpFilter{})
		return err
	})
	if err != nil {
		return append(out, Break{InvEnded, fmt.Sprintf("read operations: %v", err)})
	}
	for _, op := range ops {
		switch op.State {
		case state.StateSucceeded, state.StateFailed, state.StateCancelled, state.StateDenied, state.StateExpired,
			state.StateRefused, state.StateInterrupted:
		default:
			out = append(out, Break{InvEnded, fmt.Sprintf("%s (/talos %s) is %s after the bot stopped", op.ID, op.Command, op.State)})
		}
	}
	return out
}

// settle waits until every node that was not removed answers through the
// cluster's endpoints (apid's backoff towards a rebooted node included), as
// an operator would before the next command, so that the next operation is
// planned on a settled cluster rather than refused for a node still coming back.
func settle(ctx context.Context, c *sim.Cluster, s Scenario) {
	cfg, err := clientconfig.FromBytes(c.Talosconfig())
	if err != nil {
		return
	}
	cli, err := client.New(ctx, client.WithConfig(cfg))
	if err != nil {
		return
	}
	defer cli.Close()
	var ips []string
	for _, n := range c.Nodes() {
		if s.Kind == KindNodeRemove && n.Name == s.Target {
			continue
		}
		ips = append(ips, n.IP)
	}
	_ = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, nodesBack, true, func(ctx context.Context) (bool, error) {
		vctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		_, err := cli.Version(client.WithNodes(vctx, ips...))
		return err == nil, nil
	})
}

// scheduler fires a scenario's events as the disruptive calls reach them.
type scheduler struct {
	c       *sim.Cluster
	obs     *Observer
	kills   chan struct{}
	mu      sync.Mutex
	on      bool
	onCh    chan struct{}
	applied map[string]int
	// set is what the schedule set on each node (a hold clears only its own).
	set  map[string]sim.Fault
	done chan struct{}
	once sync.Once
	wg   sync.WaitGroup
}

func newScheduler(c *sim.Cluster, obs *Observer, events []Event, applied map[string]int) *scheduler {
	s := &scheduler{c: c, obs: obs, kills: make(chan struct{}, len(events)), onCh: make(chan struct{}),
		applied: applied, set: map[string]sim.Fault{}, done: make(chan struct{})}
	s.wg.Go(func() { s.loop(events) })
	return s
}

func (s *scheduler) count(kind string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.applied[kind]++
}

// running says whether an operation is in flight: events fire only then.
func (s *scheduler) running(on bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.on = on
	if on {
		close(s.onCh)
	} else {
		s.onCh = make(chan struct{})
	}
}

func (s *scheduler) loop(events []Event) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { <-s.done; cancel() }()
	for _, e := range events {
		for {
			n, next := s.obs.Disruptive()
			s.mu.Lock()
			on, onCh := s.on, s.onCh
			s.mu.Unlock()
			if on && n >= e.After {
				break
			}
			wake := next
			if !on {
				wake = onCh
			}
			select {
			case <-s.done:
				return
			case <-wake:
			}
		}
		if e.Kind == KindSIGKILL {
			s.kills <- struct{}{}
			continue
		}
		if err := s.c.Inject(ctx, e.Node, e.Fault); err != nil && !errors.Is(err, context.Canceled) {
			// The fault is counted only when it is in place.
			continue
		}
		s.obs.FaultSet(e.Node, e.Fault)
		s.mu.Lock()
		s.set[e.Node] = e.Fault
		s.applied[e.Kind]++
		s.mu.Unlock()
		if e.Hold > 0 {
			node, f := e.Node, e.Fault
			s.wg.Go(func() {
				select {
				case <-s.done:
				case <-time.After(e.Hold):
					s.clearIf(ctx, node, f)
				}
			})
		}
	}
}

// clearIf clears node's faults if the schedule's last set there is f.
func (s *scheduler) clearIf(ctx context.Context, node string, f sim.Fault) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if cur, ok := s.set[node]; !ok || cur != f {
		return
	}
	delete(s.set, node)
	_ = s.c.Clear(ctx, node)
	s.obs.FaultCleared(node)
}

// clear clears every fault (an operation ended).
func (s *scheduler) clear(ctx context.Context) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for node := range s.set {
		s.obs.FaultCleared(node)
	}
	s.set = map[string]sim.Fault{}
	_ = s.c.ClearAll(ctx)
}

func (s *scheduler) stop() {
	s.once.Do(func() { close(s.done) })
	s.wg.Wait()
}
