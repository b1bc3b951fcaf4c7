package builtin

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/talosbot/talosbot/internal/talosrbac/rbactest"
	"github.com/talosbot/talosbot/plugins/k8supgrade"
	"github.com/talosbot/talosbot/plugins/noderemove"
	"github.com/talosbot/talosbot/plugins/recover"
	"github.com/talosbot/talosbot/plugins/rollback"
	"github.com/talosbot/talosbot/plugins/sdk"
	"github.com/talosbot/talosbot/plugins/snapshot"
	"github.com/talosbot/talosbot/plugins/talosupgrade"
)

// TestDisruptivePluginsRefuseATalosconfigWithoutTheRole: every disruptive plugin's Plan reads
// the talosconfig's role and refuses (R23) an operation Talos would stop part way with
// PermissionDenied, naming the role held, before it reaches the cluster: the inventory's
// address (TEST-NET-1) answers nothing, so a plugin that connected first would fail with a
// connection error instead of the refusal.
func TestDisruptivePluginsRefuseATalosconfigWithoutTheRole(t *testing.T) {
	cluster := &sdk.Cluster{Name: "staging", Environment: "staging", Nodes: []*sdk.Node{
		{Name: "cp-1", Address: "192.0.2.1", Role: "controlplane", Platform: "nocloud"},
		{Name: "worker-1", Address: "192.0.2.2", Role: "worker", Platform: "nocloud"},
	}}
	cases := []struct {
		plugin, command, role string
		args                  map[string]string
	}{
		{talosupgrade.Name, talosupgrade.Command, "os:operator", map[string]string{"version": "v1.13.9"}},
		{k8supgrade.Name, k8supgrade.Command, "os:reader", map[string]string{"version": "v1.36.3"}},
		{noderemove.Name, noderemove.Command, "os:operator", map[string]string{"node": "worker-1"}},
		{rollback.Name, rollback.Command, "os:operator", map[string]string{"node": "worker-1"}},
		{recover.Name, recover.Command, "os:operator", nil},
		{snapshot.Name, snapshot.Command, "os:reader", nil},
	}
	for _, tc := range cases {
		t.Run(tc.plugin, func(t *testing.T) {
			p, ok := New(tc.plugin)
			if !ok {
				t.Fatalf("no plugin %s", tc.plugin)
			}
			ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
			defer cancel()
			req := &sdk.OperationRequest{OperationID: "op-role", Command: tc.command, Args: tc.args, Cluster: *cluster,
				Credentials: sdk.Credentials{Talosconfig: rbactest.Talosconfig(t, tc.role), Kubeconfig: []byte("apiVersion: v1\nkind: Config\n")},
				Evidence:    sdk.Evidence{Backups: &sdk.Backups{Dir: t.TempDir()}}}
			plan, err := p.Plan(ctx, req)
			if err != nil {
				t.Fatalf("Plan: want an R23 refusal, got error %v", err)
			}
			r := plan.Refusal
			if r.Rule != "R23" || !strings.Contains(r.Reason, "role "+tc.role) || !strings.Contains(r.Fix, "os:admin") {
				t.Fatalf("Plan: want an R23 refusal naming %s and the fix os:admin, got %v", tc.role, plan)
			}
		})
	}
}
