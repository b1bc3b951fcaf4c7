package cluster

import (
	"strings"
	"testing"

	"github.com/talosbot/talosbot/internal/talosrbac/rbactest"
	"github.com/talosbot/talosbot/plugins/sdk"
)

// TestCheckRole: the talosconfig's role is read from its client certificate and an operation
// that needs a call the role may not make is refused (R23) naming the role held, the calls and
// the role to use; a role that allows every call passes.
func TestCheckRole(t *testing.T) {
	cases := []struct {
		name    string
		roles   []string
		methods [][]string
		refuse  []string // words the refusal must hold; nil: allowed
	}{
		{"admin upgrades", []string{"os:admin"}, [][]string{GateMethods, SnapshotMethods, TalosUpgradeMethods}, nil},
		{"operator cannot upgrade", []string{"os:operator"}, [][]string{GateMethods, SnapshotMethods, TalosUpgradeMethods},
			[]string{"role os:operator", "MachineService.Upgrade", "LifecycleService.Upgrade", "MachineService.Read", "MachineService.Kubeconfig", "MachineService.Rollback", "the upgrade", "os:admin"}},
		{"reader cannot snapshot", []string{"os:reader"}, [][]string{SnapshotMethods},
			[]string{"role os:reader", "MachineService.EtcdSnapshot", "os:admin or os:etcd:backup or os:operator"}},
		{"etcd backup snapshots", []string{"os:etcd:backup"}, [][]string{SnapshotMethods}, nil},
		{"etcd backup cannot run the gate", []string{"os:etcd:backup"}, [][]string{GateMethods}, []string{"MachineService.Version", "ClusterService.HealthCheck"}},
		{"reader cannot read the machine config", []string{"os:reader"}, [][]string{K8sUpgradeMethods}, []string{"sensitive resource", "MachineService.ApplyConfiguration"}},
		{"no role", []string{"talos"}, [][]string{GateMethods}, []string{"no Talos role"}},
		{"operator cannot recover", []string{"os:operator"}, [][]string{RecoverMethods}, []string{"MachineService.Reset", "MachineService.EtcdRecover", "MachineService.Bootstrap"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := CheckRole(rbactest.Talosconfig(t, tc.roles...), "the upgrade", tc.methods...)
			if tc.refuse == nil {
				if err != nil {
					t.Fatalf("want allowed, got %v", err)
				}
				return
			}
			r, ok := sdk.AsRefusal(err)
			if !ok || r.Rule != "R23" || r.Fix == "" {
				t.Fatalf("want an R23 refusal with a fix, got %v", err)
			}
			for _, w := range tc.refuse {
				if !strings.Contains(r.Error(), w) {
					t.Errorf("refusal %q does not name %q", r.Error(), w)
				}
			}
		})
	}
}
