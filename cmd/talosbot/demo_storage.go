//go:build demo

package main

import (
	"context"
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/talosbot/talosbot/internal/storagetest"
)

// demoStorage gives the demo's production cluster one Longhorn volume and
// one CloudNativePG cluster (issue 32), when the cluster has a
// kube-apiserver (`make tools`) and the operators' real CRDs are at hand
// (storagetest.FixturesDir: ../shared/fixtures or TALOSBOT_FIXTURES).
// Nothing of Longhorn or CNPG runs: storagetest's controller plays their
// status transitions (docs/SIMULATOR.md, "Storage operators"), so a roll
// of production forecasts, switches the primary over and waits for the
// rebuilds as on a real cluster. Every volume fault or uncontrolled
// failover is printed when it happens, and summed up when the demo stops.
type demoStorage struct {
	ctrl *storagetest.Controller
	out  io.Writer
	stop context.CancelFunc
	done chan struct{}
}

// startDemoStorage returns nil, saying why, when it cannot run. A rebuild
// takes two reboot delays and a switchover a quarter of one (at least
// 200 ms), so that the waits show in the live message at the demo's pace.
func startDemoStorage(ctx context.Context, out io.Writer, c *simCluster, rebootDelay time.Duration) (*demoStorage, error) {
	if c.kube == nil {
		return nil, nil
	}
	dir, err := storagetest.FixturesDir()
	if err != nil {
		fmt.Fprintf(out, "  no Longhorn or CloudNativePG in production: %v\n", err)
		return nil, nil
	}
	kube, dyn := c.kube.Client, c.kube.Dynamic
	if err := storagetest.InstallCRDs(ctx, dyn, dir, storagetest.LonghornCRDs, storagetest.CNPGCRDs); err != nil {
		return nil, fmt.Errorf("demo storage: %w", err)
	}
	byName := map[string]string{}
	for _, n := range c.sim.Nodes() {
		byName[n.Name] = n.NodeName
	}
	var nodes []string
	for _, n := range demoStorageNodes {
		nodes = append(nodes, byName[n])
	}
	if slices.Contains(nodes, "") {
		return nil, fmt.Errorf("demo storage: production lacks one of %v", demoStorageNodes)
	}
	if err := storagetest.CreateVolume(ctx, kube, dyn, storagetest.Volume{Name: "pvc-data", Nodes: nodes, PVC: "data", PVCNamespace: "app"}); err != nil {
		return nil, fmt.Errorf("demo storage: %w", err)
	}
	if err := storagetest.CreatePostgres(ctx, kube, dyn, storagetest.Postgres{Namespace: "db", Name: "pg", Nodes: nodes, PDB: true}); err != nil {
		return nil, fmt.Errorf("demo storage: %w", err)
	}
	ctx, stop := context.WithCancel(ctx)
	d := &demoStorage{out: out, done: make(chan struct{}), stop: stop,
		ctrl: &storagetest.Controller{Dyn: dyn, Kube: kube, RebuildTime: 2 * rebootDelay, SwitchoverTime: max(rebootDelay/4, 200*time.Millisecond)}}
	fmt.Fprintf(out, "  production runs Longhorn volume app/data (a replica on each of %v) and CloudNativePG db/pg (an instance on each, the primary on %s), played by a test controller\n",
		demoStorageNodes, demoStorageNodes[0])
	go func() {
		defer close(d.done)
		d.run(ctx)
	}()
	return d, nil
}

// demoStorageNodes carry a replica and an instance each; the first runs
// the primary.
var demoStorageNodes = []string{"worker-1", "worker-2", "cp-1"}

// run plays the operators and prints each new fault or failover.
func (d *demoStorage) run(ctx context.Context) {
	seen := map[string]bool{}
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	for {
		_ = d.ctrl.Reconcile(ctx) // a pass that fails (the apiserver restarting) is retried on the next tick
		for _, line := range d.problems() {
			if !seen[line] {
				seen[line] = true
				fmt.Fprintf(d.out, "⚠️ demo storage: %s\n", line)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

func (d *demoStorage) problems() []string {
	var out []string
	for _, v := range d.ctrl.Faulted() {
		out = append(out, "Longhorn volume "+v+" was faulted")
	}
	for _, f := range d.ctrl.FailedOver() {
		out = append(out, "CloudNativePG "+f+" failed over without a switchover")
	}
	return out
}

// summary stops the controller and says whether anything went wrong
// while the demo ran.
func (d *demoStorage) summary() {
	if d == nil {
		return
	}
	d.stop()
	<-d.done
	if p := d.problems(); len(p) > 0 {
		fmt.Fprintf(d.out, "demo storage: %d problem(s) while the demo ran: %v\n", len(p), p)
		return
	}
	fmt.Fprintln(d.out, "demo storage: no volume ever faulted and no uncontrolled failover")
}
