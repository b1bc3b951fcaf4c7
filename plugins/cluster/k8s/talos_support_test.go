package k8s

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/api/common"
	machineapi "github.com/siderolabs/talos/pkg/machinery/api/machine"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/talosbot/talosbot/plugins/cluster"
)

// talosByAddress answers the Version call with the Talos tag of the node
// the call targets (by address, as the "node" metadata says).
type talosByAddress struct {
	cluster.MachineAPI
	tags map[string]string
}

func (f talosByAddress) Version(ctx context.Context, _ *emptypb.Empty, _ ...grpc.CallOption) (*machineapi.VersionResponse, error) {
	md, _ := metadata.FromOutgoingContext(ctx)
	tag := f.tags[strings.Join(md.Get("node"), ",")]
	return &machineapi.VersionResponse{Messages: []*machineapi.Version{{Metadata: &common.Metadata{},
		Version: &machineapi.VersionInfo{Tag: tag}}}}, nil
}

// TestTalosSupportRefusesATargetTheOldestTalosCannotRun is R20's
// compatibility check in its own package (it was caught only end to end):
// every node's running Talos must support the target Kubernetes, by
// machinery's compatibility tables (Talos 1.12 runs Kubernetes 1.30 to
// 1.35, 1.13 up to 1.36). One node on an older Talos fails the whole check,
// naming that node; a target inside every node's range passes.
func TestTalosSupportRefusesATargetTheOldestTalosCannotRun(t *testing.T) {
	inv := cluster.Inventory{Name: "t", Nodes: []cluster.Node{
		{Name: "cp-1", Address: "10.0.0.1", Role: cluster.RoleControlPlane},
		{Name: "worker-1", Address: "10.0.0.2", Role: cluster.RoleWorker},
	}}
	c := &cluster.Clients{Machine: talosByAddress{tags: map[string]string{"10.0.0.1": "v1.12.6", "10.0.0.2": "v1.13.9"}}}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	all, bad, err := CheckTalosSupport(ctx, c, inv, "1.36.0")
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 2 || all[0].Talos != "v1.12.6" || all[1].Talos != "v1.13.9" {
		t.Fatalf("every node's Talos should be read: %+v", all)
	}
	if len(bad) != 1 || bad[0].Node != "cp-1" || bad[0].Err == nil || !strings.Contains(bad[0].Err.Error(), "too new") {
		t.Fatalf("Kubernetes 1.36 on Talos 1.12: bad = %+v, want cp-1 refused as too new", bad)
	}
	if d := DescribeTalosSupport(bad); !strings.Contains(d, "Talos v1.12.6 on cp-1") {
		t.Errorf("refusal text %q does not name the node and its Talos", d)
	}

	if _, bad, err := CheckTalosSupport(ctx, c, inv, "1.35.2"); err != nil || len(bad) != 0 {
		t.Fatalf("Kubernetes 1.35 is supported by Talos 1.12 and 1.13: bad = %+v, err %v", bad, err)
	}
	if _, bad, err := CheckTalosSupport(ctx, c, inv, "1.29.0"); err != nil || len(bad) != 2 {
		t.Fatalf("Kubernetes 1.29 is too old for both: bad = %+v, err %v", bad, err)
	}
}
