package approvals

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/talosbot/talosbot/config"
	"github.com/talosbot/talosbot/state"
)

// R6 asks for staging evidence from the last promotion_max_age (here 3
// days), not a window reaching into the future, and its refusal names the
// staging cluster to run the command on, wherever it is in the list.
func TestPromotionLooksBackMaxAgeAndNamesTheStagingCluster(t *testing.T) {
	p, _ := mustPolicy(t, `
policy:
  staging: {operators: [alice]}
  production: {operators: [alice], approvers: [bob], promotion_max_age: 72h}
`)
	// The staging cluster listed after a production one.
	p.cfg.Clusters = []config.Cluster{{Name: "prod-eu", Environment: config.EnvProduction}, {Name: "stage-eu", Environment: config.EnvStaging}}
	now := time.Date(2026, 12, 3, 8, 0, 0, 0, time.UTC)
	var since time.Time
	op := &state.Operation{Environment: config.EnvProduction, Disruptive: true, Command: "upgrade talos", Target: "v1.13.9"}
	_, err := p.Promotion(op, func(_, _ string, s time.Time) (*state.Operation, error) { since = s; return nil, nil }, now)
	if want := now.Add(-72 * time.Hour); !since.Equal(want) {
		t.Errorf("looked for staging evidence since %s, want %s (now - promotion_max_age)", since, want)
	}
	if err == nil || !strings.Contains(err.Error(), "`/talos upgrade talos v1.13.9 stage-eu`") {
		t.Errorf("R6 refusal %v does not name the staging cluster stage-eu", err)
	}
}

// Without maintenance windows, production is not limited in time: only a
// configured window refuses outside it.
func TestNoMaintenanceWindowsMeansNoWindowRefusal(t *testing.T) {
	p, cfg := mustPolicy(t, `
policy:
  staging: {operators: [alice]}
  production: {operators: [alice], approvers: [bob]}
`)
	req := Request{User: "alice", Cluster: cfg.Cluster("production"), Command: "upgrade talos", Disruptive: true,
		Now: time.Date(2026, 11, 30, 3, 0, 0, 0, time.UTC)}
	if err := p.Authorize(context.Background(), req); err != nil {
		t.Fatalf("production without windows refused: %v", err)
	}
}
