package etcd

import (
	"context"
	"regexp"
	"time"

	machineapi "github.com/siderolabs/talos/pkg/machinery/api/machine"

	"github.com/talosbot/talosbot/plugins/cluster"
	"github.com/talosbot/talosbot/plugins/cluster/identity"
)

// etcd lists every active alarm among a member's status errors, as the
// alarm's text ("memberID:… alarm:NOSPACE", etcd v3.7.3
// server/etcdserver/api/v3rpc/maintenance.go Status).
var noSpaceAlarm = regexp.MustCompile(`alarm:\s*NOSPACE\b`)

// RemediedByDefrag reports whether a member's status error is one a
// defragmentation remedies: the NOSPACE alarm (etcd's quota counts the
// database file, and defragmenting gives its free pages back). This is the
// one place that decides it, for the quorum reading of a defragmentation and
// for the defrag plugin's member list; every other reading (upgrades, R16
// around a reboot) still counts NOSPACE as unhealthy, since a member that
// refuses writes is not one to take another down beside.
func RemediedByDefrag(statusErr string) bool { return noSpaceAlarm.MatchString(statusErr) }

// statusErrors are the errors of st that make its member unhealthy for this
// reading.
func (q Quorum) statusErrors(st *machineapi.EtcdMemberStatus) []string {
	if !q.forDefrag {
		return st.GetErrors()
	}
	var out []string
	for _, e := range st.GetErrors() {
		if !RemediedByDefrag(e) {
			out = append(out, e)
		}
	}
	return out
}

// ReadQuorumForDefrag is ReadQuorum for a defragmentation: a member whose
// only errors are NOSPACE alarms counts as healthy (RemediedByDefrag).
func ReadQuorumForDefrag(ctx context.Context, c *cluster.Clients, ids *identity.Map) Quorum {
	return readQuorum(ctx, c, ids, Quorum{forDefrag: true})
}

// WaitQuorumForDefrag is WaitQuorum reading with ReadQuorumForDefrag.
func WaitQuorumForDefrag(ctx context.Context, c *cluster.Clients, ids *identity.Map, within time.Duration, check func(Quorum) error) (Quorum, error) {
	return waitQuorum(ctx, within, func(ctx context.Context) Quorum { return ReadQuorumForDefrag(ctx, c, ids) }, check)
}
