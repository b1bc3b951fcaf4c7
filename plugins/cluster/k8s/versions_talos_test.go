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
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/talosbot/talosbot/plugins/cluster"
)

// downFirst answers the Version call for every node but 10.0.0.1, which
// holds the call until its context ends, as a node that is down does.
type downFirst struct{ cluster.MachineAPI }

func (downFirst) Version(ctx context.Context, _ *emptypb.Empty, _ ...grpc.CallOption) (*machineapi.VersionResponse, error) {
	md, _ := metadata.FromOutgoingContext(ctx)
	if strings.Join(md.Get("node"), ",") == "10.0.0.1" {
		<-ctx.Done()
		return nil, status.FromContextError(ctx.Err()).Err()
	}
	if err := ctx.Err(); err != nil {
		return nil, status.FromContextError(err).Err()
	}
	return &machineapi.VersionResponse{Messages: []*machineapi.Version{{Metadata: &common.Metadata{},
		Version: &machineapi.VersionInfo{Tag: "v1.13.0"}}}}, nil
}

// TestCheckTalosSupportAsksEveryNodeAtOnce: a node that does not answer
// costs the caller's deadline once; the nodes after it are still asked and
// answer (asked one after the other, they would find the deadline passed).
func TestCheckTalosSupportAsksEveryNodeAtOnce(t *testing.T) {
	inv := cluster.Inventory{Name: "t", Nodes: []cluster.Node{
		{Name: "cp-1", Address: "10.0.0.1", Role: cluster.RoleControlPlane},
		{Name: "cp-2", Address: "10.0.0.2", Role: cluster.RoleControlPlane},
		{Name: "worker-1", Address: "10.0.0.3", Role: cluster.RoleWorker},
	}}
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	all, bad, err := CheckTalosSupport(ctx, &cluster.Clients{Machine: downFirst{}}, inv, "1.35.0")
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 3 || all[1].Talos != "v1.13.0" || all[2].Talos != "v1.13.0" {
		t.Fatalf("every answering node's Talos version should be read: %+v", all)
	}
	if len(bad) == 0 || bad[0].Node != "cp-1" || !strings.Contains(bad[0].Err.Error(), "no answer to the Talos Version call") {
		t.Fatalf("cp-1 should fail unanswered: %+v", bad)
	}
}
