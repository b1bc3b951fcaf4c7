package metrics_test

import (
	"io"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/talosbot/talosbot/bot/engine"
	"github.com/talosbot/talosbot/bot/metrics"
	"github.com/talosbot/talosbot/state"
)

var _ engine.Observer = (*metrics.Metrics)(nil)

func scrape(t *testing.T, m *metrics.Metrics) string {
	t.Helper()
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	if rec.Code != 200 {
		t.Fatalf("status %d", rec.Code)
	}
	b, _ := io.ReadAll(rec.Body)
	return string(b)
}

func TestMetricsExposeEngineEvents(t *testing.T) {
	m := metrics.New()
	t0 := time.Date(2026, 5, 1, 10, 0, 0, 0, time.UTC)
	m.OperationEnded(&state.Operation{Command: "upgrade talos", State: state.StateSucceeded, CreatedAt: t0, StartedAt: t0.Add(time.Minute), EndedAt: t0.Add(31 * time.Minute)})
	m.OperationEnded(&state.Operation{Command: "upgrade talos", State: state.StateFailed, CreatedAt: t0, EndedAt: t0.Add(2 * time.Second)})
	m.Approved(&state.Operation{Environment: "production"}, 90*time.Second)
	m.PluginRestarted("talosupgrade")
	m.PluginRestarted("talosupgrade")
	m.Input("slack:C123", "command")
	m.Input("ops", "action")
	m.AlertSuggestion("etcd-no-leader", "posted")
	m.AlertSuggestion("", "unmatched")
	m.AuditFailed("refused")
	out := scrape(t, m)
	for _, want := range []string{
		`talosbot_operations_total{command="upgrade talos",result="succeeded"} 1`,
		`talosbot_operations_total{command="upgrade talos",result="failed"} 1`,
		`talosbot_operation_duration_seconds_sum{command="upgrade talos",result="succeeded"} 1800`,
		`talosbot_operation_duration_seconds_sum{command="upgrade talos",result="failed"} 2`,
		`talosbot_approval_latency_seconds_sum{environment="production"} 90`,
		`talosbot_plugin_restarts_total{plugin="talosupgrade"} 2`,
		`talosbot_chat_events_total{kind="command",platform="slack"} 1`,
		`talosbot_chat_events_total{kind="action",platform="console"} 1`,
		`talosbot_alert_suggestions_total{outcome="posted",rule="etcd-no-leader"} 1`,
		`talosbot_alert_suggestions_total{outcome="unmatched",rule="none"} 1`,
		`talosbot_audit_append_failures_total{action="refused"} 1`,
		"go_goroutines",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
	// Two instances do not share state (no global registry).
	if strings.Contains(scrape(t, metrics.New()), "talosbot_plugin_restarts_total{") {
		t.Fatal("a new Metrics sees another instance's counts")
	}
}
