// Package metrics exposes talosbot's Prometheus metrics: operations by command
// and result with durations, approval latency, plugin restarts, chat events
// and alert suggestions. A Metrics value implements engine.Observer and is handed
// to the plugin host (OnRestart) and the alert receiver.
package metrics

import (
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/talosbot/talosbot/bot/chat"
	"github.com/talosbot/talosbot/state"
)

// Metrics holds talosbot's collectors on its own registry (no global state,
// so tests and several bots in one process do not collide).
type Metrics struct {
	reg              *prometheus.Registry
	operations       *prometheus.CounterVec
	opDuration       *prometheus.HistogramVec
	approvalLatency  *prometheus.HistogramVec
	pluginRestarts   *prometheus.CounterVec
	chatEvents       *prometheus.CounterVec
	alertSuggestions *prometheus.CounterVec
	auditFailures    *prometheus.CounterVec
}

// New registers every collector, plus the Go runtime and process collectors.
func New() *Metrics {
	m := &Metrics{
		reg: prometheus.NewRegistry(),
		operations: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "talosbot_operations_total",
			Help: "Operations that reached a terminal state, by command and result (the terminal state).",
		}, []string{"command", "result"}),
		opDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "talosbot_operation_duration_seconds",
			Help: "Run time of finished operations (start of the run to the end; creation to the end when never started).",
			// 1s … ~4.5h: a health gate takes seconds, a production roll hours.
			Buckets: prometheus.ExponentialBuckets(1, 2, 15),
		}, []string{"command", "result"}),
		approvalLatency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "talosbot_approval_latency_seconds",
			Help:    "Time from an approval request to the last approval it needed.",
			Buckets: prometheus.ExponentialBuckets(5, 2, 12), // 5s … ~2.8h
		}, []string{"environment"}),
		pluginRestarts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "talosbot_plugin_restarts_total",
			Help: "Plugin processes started again because the previous one died.",
		}, []string{"plugin"}),
		chatEvents: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "talosbot_chat_events_total",
			Help: "Commands and button clicks received (each acknowledged before it is worked on), by platform and kind.",
		}, []string{"platform", "kind"}),
		alertSuggestions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "talosbot_alert_suggestions_total",
			Help: "Alertmanager notifications handled, by rule and outcome (posted, updated, resolved, unchanged, unmatched).",
		}, []string{"rule", "outcome"}),
		auditFailures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "talosbot_audit_append_failures_total",
			Help: "Audit records that could not be appended, by action (e.g. refused): each is a gap in the audit trail, also logged as an error.",
		}, []string{"action"}),
	}
	m.reg.MustRegister(m.operations, m.opDuration, m.approvalLatency, m.pluginRestarts, m.chatEvents, m.alertSuggestions, m.auditFailures,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// Registry returns the registry (for tests and extra collectors).
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// Handler serves the metrics in the Prometheus exposition format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{Registry: m.reg})
}

// Input counts a command or button click. The label is the platform, not the
// channel, to keep the number of series bounded.
func (m *Metrics) Input(channel, kind string) {
	platform, _ := chat.SplitChannel(channel)
	if platform == "" {
		platform = "console"
	}
	m.chatEvents.WithLabelValues(platform, kind).Inc()
}

// OperationEnded counts a finished operation and observes its duration.
func (m *Metrics) OperationEnded(op *state.Operation) {
	result := string(op.State)
	m.operations.WithLabelValues(op.Command, result).Inc()
	start := op.StartedAt
	if start.IsZero() {
		start = op.CreatedAt
	}
	end := op.EndedAt
	if end.IsZero() {
		end = op.UpdatedAt
	}
	if d := end.Sub(start); !start.IsZero() && d >= 0 {
		m.opDuration.WithLabelValues(op.Command, result).Observe(d.Seconds())
	}
}

// Approved observes how long an operation waited for its approvals.
func (m *Metrics) Approved(op *state.Operation, latency time.Duration) {
	if latency < 0 {
		latency = 0
	}
	m.approvalLatency.WithLabelValues(op.Environment).Observe(latency.Seconds())
}

// PluginRestarted counts a plugin restart (plugins/host Options.OnRestart).
func (m *Metrics) PluginRestarted(plugin string) { m.pluginRestarts.WithLabelValues(plugin).Inc() }

// AuditFailed counts an audit record that could not be appended. The action
// label is one of the engine's fixed action names, so series stay bounded.
func (m *Metrics) AuditFailed(action string) { m.auditFailures.WithLabelValues(action).Inc() }

// AlertSuggestion counts an alert notification handled by the receiver.
func (m *Metrics) AlertSuggestion(rule, outcome string) {
	if rule == "" {
		rule = "none"
	}
	m.alertSuggestions.WithLabelValues(rule, outcome).Inc()
}
