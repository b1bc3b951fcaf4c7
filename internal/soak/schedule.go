package soak

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/talosbot/talosbot/sim"
)

// Scenario kinds: what the bot is asked to do.
const (
	// KindStagingRoll: /talos upgrade talos on a staging cluster (no approval).
	KindStagingRoll = "staging-roll"
	// KindProductionRoll: the same on a production cluster, with two approvals
	// (--skip-staging adds one to the one production needs).
	KindProductionRoll = "production-roll"
	// KindMultiHop: one command across two minors, one hop per minor
	// (v1.12.6 → v1.13.9 → v1.14.1).
	KindMultiHop = "multi-hop"
	// KindK8sUpgrade: /talos upgrade k8s, one minor.
	KindK8sUpgrade = "k8s-upgrade"
	// KindNodeRemove: /talos node remove of one node.
	KindNodeRemove = "node-remove"
	// KindRollback: a roll, then /talos rollback of one node.
	KindRollback = "rollback"
)

// Kinds lists every scenario kind, in the order a seed picks from.
func Kinds() []string {
	return []string{KindStagingRoll, KindProductionRoll, KindMultiHop, KindK8sUpgrade, KindNodeRemove, KindRollback}
}

// The versions scenarios run between, each a known release of the bot's config.
const (
	talosFrom   = "v1.12.6"
	talosTarget = "v1.13.9"
	// talosHopTarget: the multi-hop scenario goes v1.12.6 → v1.13.9 → v1.14.1, its second
	// hop on the v1.13+ path (ImageService.Pull, LifecycleService.Upgrade, Reboot).
	talosHopTarget = "v1.14.1"
	k8sFrom        = "v1.35.2"
	k8sTarget      = "1.36.3"
)

// releases is the bot's releases block: only a known release is a target.
const releases = "{talos: [v1.12.6, v1.13.9, v1.14.0, v1.14.1], kubernetes: [1.35.2, 1.36.3]}"

// Shape of every scenario's cluster.
const (
	controlPlanes = 3
	workers       = 1
)

// Event is one entry of a fault schedule.
type Event struct {
	// After is how many disruptive calls (Upgrade, Reboot, Rollback, Reset,
	// ApplyConfiguration) the scenario's cluster has served when the event
	// fires; it fires only while an operation runs.
	After int
	// Kind is a Registry name or KindSIGKILL.
	Kind string
	// Node carries the fault ("" for KindSIGKILL).
	Node  string
	Fault sim.Fault
	// Hold is how long the fault stays; 0 keeps it until the operation ends.
	Hold time.Duration
}

func (e Event) String() string {
	if e.Kind == KindSIGKILL {
		return fmt.Sprintf("after %d disruptive calls: SIGKILL the bot, restart, resume", e.After)
	}
	hold := "until the operation ends"
	if e.Hold > 0 {
		hold = "for " + e.Hold.String()
	}
	f, _ := json.Marshal(e.Fault)
	return fmt.Sprintf("after %d disruptive calls: %s on %s %s %s", e.After, e.Kind, e.Node, f, hold)
}

// Scenario is what one seed draws.
type Scenario struct {
	Seed uint64
	Kind string
	// RebootDelay is the sim's reboot time.
	RebootDelay time.Duration
	// Target is the node of a removal or a rollback.
	Target string
	Events []Event
}

func (s Scenario) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "seed %d: %s", s.Seed, s.Kind)
	if s.Target != "" {
		fmt.Fprintf(&b, " of %s", s.Target)
	}
	fmt.Fprintf(&b, ", reboot delay %s", s.RebootDelay)
	for _, e := range s.Events {
		fmt.Fprintf(&b, "\n  - %s", e)
	}
	return b.String()
}

// NodeNames are the inventory names of a scenario's cluster.
func NodeNames() []string {
	var out []string
	for i := range controlPlanes {
		out = append(out, fmt.Sprintf("cp-%d", i+1))
	}
	for i := range workers {
		out = append(out, fmt.Sprintf("worker-%d", i+1))
	}
	return out
}

func role(node string) string {
	if strings.HasPrefix(node, "cp-") {
		return sim.RoleControlPlane
	}
	return sim.RoleWorker
}

// disruptiveCalls is roughly how many disruptive calls a scenario's operations
// make when nothing goes wrong: the range an event's After is drawn from.
func disruptiveCalls(kind string) int {
	nodes := controlPlanes + workers
	switch kind {
	case KindMultiHop:
		return 2 * nodes
	case KindK8sUpgrade:
		return 3*controlPlanes + nodes // static pods, then kubelets
	case KindNodeRemove:
		return 1
	case KindRollback:
		return nodes + 1
	}
	return nodes
}

// Draw is the scenario of one seed: the same seed gives the same scenario on
// every run and machine (math/rand/v2's PCG is specified).
func Draw(seed uint64) Scenario {
	r := rand.New(rand.NewPCG(seed, 0x7a105b07))
	kinds := Kinds()
	// Consecutive seeds take the kinds in turn, so that any run of len(Kinds())
	// scenarios has each once; the rest is drawn.
	s := Scenario{Seed: seed, Kind: kinds[seed%uint64(len(kinds))], RebootDelay: time.Duration(200+r.IntN(1300)) * time.Millisecond}
	nodes := NodeNames()
	switch s.Kind {
	case KindNodeRemove, KindRollback:
		s.Target = nodes[r.IntN(len(nodes))]
	}
	var faults []FaultKind
	for _, k := range Registry() {
		if k.Scenarios == nil || slices.Contains(k.Scenarios, s.Kind) {
			faults = append(faults, k)
		}
	}
	span := disruptiveCalls(s.Kind)
	for range 1 + r.IntN(3) {
		k := faults[r.IntN(len(faults))]
		var eligible []string
		for _, n := range nodes {
			if k.Role == "" || role(n) == k.Role {
				eligible = append(eligible, n)
			}
		}
		e := Event{After: r.IntN(span + 1), Kind: k.Name, Node: eligible[r.IntN(len(eligible))], Fault: k.Draw(r)}
		if r.IntN(4) > 0 {
			e.Hold = time.Duration(1000+r.IntN(7000)) * time.Millisecond
		}
		s.Events = append(s.Events, e)
	}
	if r.IntN(2) == 0 {
		s.Events = append(s.Events, Event{After: r.IntN(span + 1), Kind: KindSIGKILL})
	}
	slices.SortStableFunc(s.Events, func(a, b Event) int { return a.After - b.After })
	return s
}
