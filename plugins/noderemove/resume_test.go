package noderemove

import (
	"context"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/client"
	clientconfig "github.com/siderolabs/talos/pkg/machinery/client/config"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/talosbot/talosbot/internal/testenv"
	"github.com/talosbot/talosbot/plugins/sdk/sdktest"
)

// TestResumeAfterResetDeletesTheNode: talosbot killed right after its
// graceful reset of cp-3 (the soak's seed 22) leaves the node reset and out
// of etcd, and its Kubernetes Node, cordoned by the reset's drain, behind. The
// resumed run finds cp-3 "already reset" and must still delete that Node:
// skipping it left the Node cordoned and failed the gate after ("unexpected
// nodes").
func TestResumeAfterResetDeletesTheNode(t *testing.T) {
	slow(t)
	kube := testenv.StartKube(t)
	c := startSim(t, kube)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cfg, err := clientconfig.FromBytes(c.Talosconfig())
	if err != nil {
		t.Fatal(err)
	}
	cli, err := client.New(ctx, client.WithConfig(cfg))
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	var ip string
	for _, n := range c.Nodes() {
		if n.Name == "cp-3" {
			ip = n.IP
		}
	}
	// The killed run's reset: what the plugin sends.
	if err := cli.Reset(client.WithNode(ctx, ip), true, false); err != nil {
		t.Fatal(err)
	}
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		got := members(t, c)
		return len(got) == 2 && !c.NodeBooted("cp-3"), nil
	}); err != nil {
		t.Fatalf("cp-3 never left: members %v", members(t, c))
	}
	kn := nodeName(t, c, "cp-3")
	if _, err := kube.Client.CoreV1().Nodes().Get(ctx, kn, metav1.GetOptions{}); err != nil {
		t.Fatalf("the reset should leave cp-3's Node (%s) for the bot to delete: %v", kn, err)
	}

	req := request(c, kube, "cp-3")
	rec, _ := sdktest.Run(ctx, New(), req, nil)
	res := rec.FinalResult()
	if !res.OK {
		t.Fatalf("resumed removal: %v", res)
	}
	if c.Calls("cp-3", "Reset") != 1 {
		t.Fatalf("the resumed run reset cp-3 again (%d resets)", c.Calls("cp-3", "Reset"))
	}
	if _, err := kube.Client.CoreV1().Nodes().Get(ctx, kn, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("cp-3's Node %s is still there after the resumed removal: %v", kn, err)
	}
}
