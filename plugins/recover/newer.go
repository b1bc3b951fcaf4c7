package recover

import (
	"context"
	"fmt"
	"os"

	machineapi "github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/client"
	"go.etcd.io/etcd/etcdutl/v3/snapshot"
	"go.uber.org/zap"

	"github.com/talosbot/talosbot/plugins/cluster"
	"github.com/talosbot/talosbot/plugins/cluster/etcd"
)

// Survivor is a stale member's own etcd data: a control plane that answers
// and still runs etcd on its old data dir (no leader). The recovery wipes
// that data (the rejoin step), so its revision decides what is lost.
type Survivor struct {
	Node     string
	Address  string
	Revision int64 // 0 when Err is set
	Err      error // the revision could not be read
	// Lost names the objects its data holds beyond the snapshot's
	// revision (set when Err is nil).
	Lost Lost
}

// readSurvivors reads the revision of every stale member's data, the one
// way Talos's API exposes it: MachineService.EtcdSnapshot on that node (a
// local etcd client, served without a leader; v1alpha1_server.go
// EtcdSnapshot at v1.13.9), verified by its sha256 trailer and measured by
// etcdutl's snapshot status. EtcdStatus has no revision (EtcdMemberStatus
// carries raft indexes only). The copy lives in the recovery's private work
// dir (0600) and is removed at once.
func readSurvivors(ctx context.Context, s *cluster.Session, v View, work string, snapRev int64) []Survivor {
	var out []Survivor
	for _, m := range v.Members {
		if m.State != Stale {
			continue
		}
		sv := Survivor{Node: m.Node, Address: m.Address}
		sv.Revision, sv.Lost, sv.Err = memberData(ctx, s, m, work, snapRev)
		out = append(out, sv)
	}
	return out
}

// memberData reads a stale member's revision and, from the same copy, the
// objects it holds beyond snapRev (lostSince).
func memberData(ctx context.Context, s *cluster.Session, m Member, work string, snapRev int64) (int64, Lost, error) {
	rd, err := s.Talos.EtcdSnapshot(client.WithNode(ctx, m.Address), &machineapi.EtcdSnapshotRequest{})
	if err != nil {
		return 0, Lost{}, fmt.Errorf("etcd snapshot of %s: %w", m.Node, err)
	}
	defer rd.Close() //nolint:errcheck
	snap, err := etcd.WriteVerified(ctx, rd, work, "member-"+m.Node)
	if err != nil {
		return 0, Lost{}, fmt.Errorf("etcd snapshot of %s: %w", m.Node, err)
	}
	defer os.Remove(snap.Path) //nolint:errcheck
	st, err := snapshot.NewV3(zap.NewNop()).Status(snap.Path)
	if err != nil {
		return 0, Lost{}, fmt.Errorf("etcdutl snapshot status of %s's data: %w", m.Node, err)
	}
	var lost Lost
	if int64(st.Revision) > snapRev {
		if lost, err = lostSince(snap.Path, snapRev); err != nil {
			return 0, Lost{}, fmt.Errorf("the objects in %s's data newer than revision %d: %w", m.Node, snapRev, err)
		}
	}
	return st.Revision, lost, nil
}
