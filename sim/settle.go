package sim

import (
	"context"
	"fmt"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/client"
	clientconfig "github.com/siderolabs/talos/pkg/machinery/client/config"
	"k8s.io/apimachinery/pkg/util/wait"
)

// WaitEndpointsAnswer waits until every node that is not reset answers a Version call through
// the cluster's endpoints, as an operator would before the next command. Right after a node
// rebooted, an endpoint's apid reaches it again only after gRPC's reconnect backoff (up to 15 s,
// proxy.go), so a second operation started at once can find it unreachable, as on Talos. Tests
// that run operations back to back wait here rather than sleep.
func (c *Cluster) WaitEndpointsAnswer(ctx context.Context) error {
	cfg, err := clientconfig.FromBytes(c.Talosconfig())
	if err != nil {
		return fmt.Errorf("sim: talosconfig: %w", err)
	}

	cli, err := client.New(ctx, client.WithConfig(cfg))
	if err != nil {
		return fmt.Errorf("sim: client: %w", err)
	}
	defer cli.Close() //nolint:errcheck

	var ips []string

	for _, n := range c.nodes {
		if !n.isReset() {
			ips = append(ips, n.info.IP)
		}
	}

	var last error

	err = wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		vctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()

		_, last = cli.Version(client.WithNodes(vctx, ips...))

		return last == nil, nil
	})
	if err != nil {
		return fmt.Errorf("sim: nodes do not answer through the endpoints: %w (last: %w)", err, last)
	}

	return nil
}
