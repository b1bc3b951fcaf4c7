package soak

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/talosbot/talosbot/sim"
)

// Break is one invariant that did not hold.
type Break struct {
	Invariant string
	Detail    string
}

func (b Break) String() string { return b.Invariant + ": " + b.Detail }

// Invariants, as the report names them.
const (
	InvTwoDown    = "never two nodes down at once"
	InvQuorum     = "never lost quorum"
	InvCordon     = "no node left cordoned without the ending saying so"
	InvEnding     = "the ending's words match each node's real version and state"
	InvAudit      = "the audit chain verifies"
	InvEnded      = "every operation has ended or is resumable"
	InvOneUpgrade = "no node got two Upgrade calls in one operation"
)

// disruptiveSuffixes end the methods that change a node (an event's After counts them).
func disruptiveSuffixes() []string {
	return []string{"/Upgrade", "/Reboot", "/Rollback", "/Reset", "/ApplyConfiguration"}
}

// faultSpan is when the schedule held an etcd-stopping fault on a node.
type faultSpan struct {
	node     string
	from, to time.Time // to is zero while it holds
}

// Observer watches one scenario's sim (its OnCall and OnTransition hooks) and
// records the breaks of the invariants that only show while it runs: two
// nodes down at once, a control plane taken down without a quorum left.
type Observer struct {
	mu sync.Mutex
	c  *sim.Cluster
	// down are the nodes in sim.NodeDown.
	down map[string]bool
	// disruptive counts disruptive calls; changed is signalled on each.
	disruptive int
	changed    chan struct{}
	// lastEtcdRead is when a node last served an etcd read (the bot's quorum
	// and health checks); checkedAt[node] is lastEtcdRead when that node got
	// its last disruptive request: the bot's last look at etcd before it.
	lastEtcdRead time.Time
	checkedAt    map[string]time.Time
	// upgradeAt[node] is when its last Upgrade call came and it has not gone
	// down since (an Upgrade request maybe still unanswered).
	upgradeAt map[string]time.Time
	etcdFault []faultSpan
	breaks    []Break
	now       func() time.Time
}

// NewObserver returns an observer; Attach gives it the cluster once started.
func NewObserver() *Observer {
	return &Observer{down: map[string]bool{}, changed: make(chan struct{}), checkedAt: map[string]time.Time{},
		upgradeAt: map[string]time.Time{}, now: time.Now}
}

// Attach sets the cluster the hooks read (call it right after sim.Start).
func (o *Observer) Attach(c *sim.Cluster) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.c = c
}

// OnCall is the sim's Options.OnCall.
func (o *Observer) OnCall(_ context.Context, node, method string) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	now := o.now()
	if strings.Contains(method, "/Etcd") {
		o.lastEtcdRead = now
	}
	for _, s := range disruptiveSuffixes() {
		if strings.HasSuffix(method, s) {
			o.disruptive++
			o.checkedAt[node] = o.lastEtcdRead
			if s == "/Upgrade" {
				o.upgradeAt[node] = now
			}
			close(o.changed)
			o.changed = make(chan struct{})
			break
		}
	}
	return nil
}

// Disruptive returns the count of disruptive calls and a channel closed at the next one.
func (o *Observer) Disruptive() (int, <-chan struct{}) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.disruptive, o.changed
}

// UpgradeInFlight reports a node whose Upgrade request came less than within
// ago and that has not gone down since: its answer may still be on the way.
// A SIGKILL waits for none: a request lost with the bot is rightly asked again
// by the resumed run, which would read as a second Upgrade call.
func (o *Observer) UpgradeInFlight(within time.Duration) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, at := range o.upgradeAt {
		if o.now().Sub(at) < within {
			return true
		}
	}
	return false
}

// FaultSet and FaultCleared tell the observer of the schedule's faults, so
// that a quorum lost to a fault the bot could not have seen is not its break.
func (o *Observer) FaultSet(node string, f sim.Fault) {
	// A changed address cuts a control plane's member off too (sim/addressfault.go: the
	// others dial the peer URL they recorded, the old address): soak seeds 1031, 1068, 1097,
	// 1123 and 1126 counted that quorum against the bot.
	addressCut := f.AddressChanged != "" && role(node) == sim.RoleControlPlane
	if !(f.EtcdStopped || f.NoEtcdLeader || f.EtcdDataLost || addressCut) {
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	o.etcdFault = append(o.etcdFault, faultSpan{node: node, from: o.now()})
}

// FaultCleared ends the node's open fault span.
func (o *Observer) FaultCleared(node string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for i := range o.etcdFault {
		if o.etcdFault[i].node == node && o.etcdFault[i].to.IsZero() {
			o.etcdFault[i].to = o.now()
		}
	}
}

// OnTransition is the sim's Options.OnTransition.
func (o *Observer) OnTransition(tr sim.Transition) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if tr.To != sim.NodeDown {
		delete(o.down, tr.Node)
		return
	}
	delete(o.upgradeAt, tr.Node)
	for n := range o.down {
		if n != tr.Node {
			o.breaks = append(o.breaks, Break{InvTwoDown, fmt.Sprintf("%s went down while %s was down", tr.Node, n)})
		}
	}
	o.down[tr.Node] = true
	if tr.Role != sim.RoleControlPlane || o.c == nil {
		return
	}
	total, running := 0, 0
	for _, m := range o.c.Etcd().Members() {
		if m.Removed() {
			continue
		}
		total++
		if m.Running() {
			running++
		}
	}
	if total == 0 || running >= total/2+1 {
		return
	}
	// A fault set after the bot last read etcd before its request to this
	// node is one it could not see: not the bot's break, also once it is
	// cleared (the members it stopped may still be restarting, or fail to:
	// soak seed 34).
	checked := o.checkedAt[tr.Node]
	for _, f := range o.etcdFault {
		if f.from.After(checked) {
			return
		}
	}
	o.breaks = append(o.breaks, Break{InvQuorum, fmt.Sprintf("%s went down with %d of %d etcd members running (quorum %d)", tr.Node, running, total, total/2+1)})
}

// Breaks returns the breaks seen so far.
func (o *Observer) Breaks() []Break {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]Break(nil), o.breaks...)
}
