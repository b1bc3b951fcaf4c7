package soak

import (
	"context"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/talosbot/talosbot/internal/storagetest"
	"github.com/talosbot/talosbot/internal/testenv"
)

// InvStorage breaks when a primary's node goes down without a switchover
// (an uncontrolled failover) and when a volume loses every healthy replica.
func TestStorageInvariantCatchesFaultsAndFailovers(t *testing.T) {
	t.Parallel()
	if _, err := storagetest.FixturesDir(); err != nil {
		t.Skip(err)
	}
	kube := testenv.StartKube(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	nodes := []string{"n1", "n2", "n3"}
	if err := storagetest.CreateNodes(ctx, kube.Client, nodes...); err != nil {
		t.Fatal(err)
	}
	f := newStorageFixtures(t, kube, nodes)
	if b := f.ctrl.Faulted(); len(b) != 0 {
		t.Fatalf("faulted before anything: %v", b)
	}
	for _, n := range nodes { // every node down at once, the primary's first
		if err := storagetest.SetNodeReady(ctx, kube.Client, n, false); err != nil {
			t.Fatal(err)
		}
	}
	if err := wait.PollUntilContextCancel(ctx, 50*time.Millisecond, true, func(context.Context) (bool, error) {
		return len(f.ctrl.Faulted()) > 0 && len(f.ctrl.FailedOver()) > 0, nil
	}); err != nil {
		t.Fatalf("the controller saw no fault: %v", err)
	}
	var got []string
	for _, b := range f.Breaks() {
		if b.Invariant != InvStorage {
			t.Fatalf("break %s under another invariant", b)
		}
		got = append(got, b.Detail)
	}
	all := strings.Join(got, "\n")
	for _, want := range []string{"Longhorn volume pvc-soak was faulted", "CloudNativePG db/pg: pg-1 failed over without a switchover"} {
		if !strings.Contains(all, want) {
			t.Fatalf("breaks lack %q:\n%s", want, all)
		}
	}
	if (*storageFixtures)(nil).Breaks() != nil {
		t.Fatal("no fixtures, yet breaks")
	}
	if n := f.Notes(); n != nil {
		t.Fatalf("checked, yet noted as not: %v", n)
	}
	if n := (*storageFixtures)(nil).Notes(); len(n) != 1 || !strings.Contains(n[0], "not checked") {
		t.Fatalf("no fixtures, and the log would not say the invariant went unchecked: %v", n)
	}
}
