package k8supgrade

import (
	"context"
	"testing"
	"time"

	"github.com/talosbot/talosbot/plugins/cluster"
	"github.com/talosbot/talosbot/plugins/cluster/k8s"
)

// BenchmarkManifestPreview is what the bootstrap manifest sync adds to every plan: reading the
// first control plane's Manifest resources through the Talos API and the server-side dry run of
// all 21 objects against a real kube-apiserver (a sim at Talos v1.13.9 with CoreDNS and flannel
// at an older Talos's images, so two objects differ). It reports ms per preview.
func BenchmarkManifestPreview(b *testing.B) {
	e := startSideEnv(b)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	req := e.request(target)
	inv, err := cluster.InventoryFrom(&req.Cluster)
	if err != nil {
		b.Fatal(err)
	}
	clients, err := cluster.Connect(ctx, inv, &req.Credentials)
	if err != nil {
		b.Fatal(err)
	}
	defer clients.Close()
	cp := inv.ControlPlanes()[0]
	start := time.Now()
	n := 0
	var read time.Duration
	for b.Loop() {
		t0 := time.Now()
		objs, err := k8s.BootstrapManifests(ctx, clients, cp)
		if err != nil {
			b.Fatal(err)
		}
		read += time.Since(t0)
		changes, err := k8s.SyncManifests(ctx, clients, objs, k8s.SyncOptions{DryRun: true})
		if err != nil || len(changes) != 21 {
			b.Fatalf("preview: %d changes, %v", len(changes), err)
		}
		n++
	}
	b.ReportMetric(float64(time.Since(start).Milliseconds())/float64(n), "ms/preview")
	b.ReportMetric(float64(read.Milliseconds())/float64(n), "ms/manifest-read")
}
