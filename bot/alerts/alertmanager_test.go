package alerts_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	lifecyclev1 "github.com/talosbot/talosbot/plugins/sdk/proto/lifecycle/v1"

	"github.com/talosbot/talosbot/approvals"
	"github.com/talosbot/talosbot/bot"
	"github.com/talosbot/talosbot/bot/alerts"
	"github.com/talosbot/talosbot/bot/chat/web"
	"github.com/talosbot/talosbot/bot/credentials"
	"github.com/talosbot/talosbot/bot/engine"
	"github.com/talosbot/talosbot/bot/render"
	"github.com/talosbot/talosbot/config"
	"github.com/talosbot/talosbot/internal/amtest"
	"github.com/talosbot/talosbot/state"
)

// noPlugins is a plugin host with no plugins: this test needs the engine's
// bot commands and buttons only.
type noPlugins struct{}

func (noPlugins) Manifests(context.Context) ([]*lifecyclev1.Manifest, error) { return nil, nil }
func (noPlugins) Plan(context.Context, string, *lifecyclev1.OperationRequest) (*lifecyclev1.OperationPlan, error) {
	return nil, errors.New("no plugins in this test")
}
func (noPlugins) Run(context.Context, string, *lifecyclev1.OperationRequest, func(*lifecyclev1.Progress) error) (*lifecyclev1.Result, error) {
	return nil, errors.New("no plugins in this test")
}

// statusRecorder remembers the status of every webhook delivery.
type statusRecorder struct {
	mu    sync.Mutex
	codes []int
}

func (s *statusRecorder) wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rw := &codeWriter{ResponseWriter: w, code: 200}
		h.ServeHTTP(rw, r)
		s.mu.Lock()
		s.codes = append(s.codes, rw.code)
		s.mu.Unlock()
	})
}

func (s *statusRecorder) count(code int) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, c := range s.codes {
		if c == code {
			n++
		}
	}
	return n
}

type codeWriter struct {
	http.ResponseWriter
	code int
}

func (w *codeWriter) WriteHeader(c int) { w.code = c; w.ResponseWriter.WriteHeader(c) }

func waitUntil(t *testing.T, what string, d time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	tick := time.NewTicker(25 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", d, what)
		}
		<-tick.C
	}
}

const amConfig = `
global:
  resolve_timeout: 5m
route:
  receiver: bot
  group_by: [alertname, cluster]
  group_wait: 1s
  group_interval: 1s
  repeat_interval: 1h
  routes:
    - receiver: bot-basic
      matchers: ['via="basic"']
    - receiver: bot-wrong
      matchers: ['via="wrong"']
receivers:
  - name: bot
    webhook_configs:
      - url: %[1]s
        send_resolved: true
        http_config:
          authorization: {type: Bearer, credentials: %[2]s}
  - name: bot-basic
    webhook_configs:
      - url: %[1]s
        send_resolved: true
        http_config:
          basic_auth: {username: alertmanager, password: %[2]s}
  - name: bot-wrong
    webhook_configs:
      - url: %[1]s
        send_resolved: true
        http_config:
          authorization: {type: Bearer, credentials: not-the-token}
`

// startAlertmanager runs the Debian Alertmanager on a loopback port with
// amConfig and returns its base URL.
func startAlertmanager(t *testing.T, webhookURL string) string {
	t.Helper()
	return amtest.StartConfig(t, fmt.Sprintf(amConfig, webhookURL, token))
}

// postAlert feeds one alert to Alertmanager through its own API.
func postAlert(t *testing.T, base string, labels map[string]string, startsAt, endsAt time.Time) {
	t.Helper()
	a := map[string]any{"labels": labels, "annotations": map[string]string{"summary": "test alert " + labels["alertname"]},
		"startsAt": startsAt.UTC().Format(time.RFC3339Nano)}
	if !endsAt.IsZero() {
		a["endsAt"] = endsAt.UTC().Format(time.RFC3339Nano)
	}
	raw, _ := json.Marshal([]any{a})
	resp, err := http.Post(base+"/api/v2/alerts", "application/json", bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("POST /api/v2/alerts: %d %s", resp.StatusCode, b)
	}
}

func findMsg(c *web.Console, channel string, pred func(web.Message) bool) (web.Message, int) {
	msgs, _ := c.Messages(channel, 0)
	var found web.Message
	n := 0
	for _, m := range msgs {
		if pred(m) {
			found = m
			n++
		}
	}
	return found, n
}

func click(t *testing.T, srv, user, msgID, actionID string) {
	t.Helper()
	raw, _ := json.Marshal(map[string]string{"user": user, "message_id": msgID, "action_id": actionID})
	resp, err := http.Post(srv+"/api/console/actions", "application/json", bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("click: status %d", resp.StatusCode)
	}
}

// TestRealAlertmanagerSuggestionResolveAndWrongToken drives the receiver
// with the Debian Alertmanager: an alert posted to Alertmanager's API shows up
// as a suggestion in the console after group_wait, its resolve edits the same
// message, buttons run commands through the engine's policy, and a receiver
// configured with a wrong token gets 401 and changes nothing.
func TestRealAlertmanagerSuggestionResolveAndWrongToken(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	cfg, err := config.Parse([]byte(fmt.Sprintf(`
data_dir: %[1]s
clusters:
  - name: production
    environment: production
    channels: [prd]
    endpoints: [127.0.0.1]
    nodes: [{name: cp-1, address: 127.0.0.1, role: controlplane, host: pve1}]
    credentials: {source: files, talosconfig: "file:%[1]s/tc"}
  - name: staging
    environment: staging
    endpoints: [127.0.0.2]
    nodes: [{name: cp-1, address: 127.0.0.2, role: controlplane, host: pve1}]
    credentials: {source: files, talosconfig: "file:%[1]s/tc"}
policy:
  production: {operators: [alice], viewers: [carol], approvers: [bob]}
  staging: {operators: [alice]}
alerts:
  rules:
    - name: etcd-no-leader
      match_re: {alertname: "etcdNoLeader|EtcdNoLeader"}
      text: etcd has no leader on {{cluster}}
      runbook: https://www.talos.dev/v1.12/advanced/etcd-maintenance/
      commands: ["/talos status {{cluster}}", "/talos audit --cluster {{cluster}}"]
    - name: node-not-ready
      match: {alertname: KubeNodeNotReady}
      text: a node is not ready
      runbook: https://www.talos.dev/v1.12/talos-guides/howto/scaling-down/
      commands: ["/talos status {{cluster}}"]
`, dir)))
	if err != nil {
		t.Fatal(err)
	}
	st, err := state.Open(filepath.Join(dir, "talosbot.db"), state.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	console, err := web.New(web.Options{Channels: []string{"prd", "ops"}, Open: true, Users: []string{"alice", "carol", "mallory"}})
	if err != nil {
		t.Fatal(err)
	}
	eng, err := bot.New(ctx, engine.Options{Config: cfg, Store: st, Plugins: noPlugins{}, Credentials: credentials.FileCredentials{},
		Policy: approvals.New(cfg), Sink: render.NewRenderer(console, nil, nil)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(eng.Close)
	console.SetHandler(eng)
	rcv, err := alerts.New(alerts.Options{Config: cfg, Store: st, Chat: console, Buttons: eng, Token: token, FallbackChannel: "ops"})
	if err != nil {
		t.Fatal(err)
	}
	rec := &statusRecorder{}
	mux := http.NewServeMux()
	mux.Handle("/", console.Handler())
	mux.Handle("POST "+alerts.Path, rec.wrap(rcv.Handler()))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)

	am := startAlertmanager(t, srv.URL+alerts.Path)
	// startsAt now: Alertmanager flushes a group at once when its alert is
	// older than group_wait, and this test wants the group_wait path.
	start := time.Now()
	labels := map[string]string{"alertname": "etcdNoLeader", "cluster": "production", "severity": "critical", "instance": "cp-1"}
	postAlert(t, am, labels, start, time.Time{})

	isEtcd := func(m web.Message) bool { return strings.Contains(m.Title, "etcdNoLeader") }
	waitUntil(t, "the etcdNoLeader suggestion in channel prd", 30*time.Second, func() bool { _, n := findMsg(console, "prd", isEtcd); return n > 0 })
	msg, _ := findMsg(console, "prd", isEtcd)
	t.Logf("suggestion posted %s after the alert (group_wait 1s)", time.Since(start).Round(time.Millisecond))
	if !strings.Contains(msg.Title, "FIRING:1") || !strings.Contains(msg.Text, "etcd has no leader on production") ||
		!strings.Contains(msg.Text, "https://www.talos.dev/v1.12/advanced/etcd-maintenance/") {
		t.Fatalf("suggestion message: %+v", msg)
	}
	if len(msg.Buttons) != 2 || msg.Buttons[0].Label != "status production" || msg.Buttons[1].Label != "audit --cluster production" {
		t.Fatalf("buttons: %+v", msg.Buttons)
	}

	// Buttons run as the clicking user through the engine: alice may read the
	// status; mallory has no role and is refused (and audited).
	click(t, srv.URL, "alice", msg.ID, msg.Buttons[0].ActionID)
	waitUntil(t, "alice's status reply", 10*time.Second, func() bool {
		_, n := findMsg(console, "prd", func(m web.Message) bool { return strings.Contains(m.Text, "*production* (production)\n  lock: free") })
		return n > 0
	})
	click(t, srv.URL, "mallory", msg.ID, msg.Buttons[1].ActionID)
	waitUntil(t, "mallory's refusal", 10*time.Second, func() bool {
		_, n := findMsg(console, "prd", func(m web.Message) bool {
			return strings.Contains(m.Text, "refused: mallory has no role in production")
		})
		return n > 0
	})

	// Resolve through Alertmanager: endsAt in the past.
	postAlert(t, am, labels, start, time.Now().Add(-10*time.Millisecond))
	waitUntil(t, "the suggestion marked resolved", 30*time.Second, func() bool {
		m, _ := findMsg(console, "prd", func(m web.Message) bool { return m.ID == msg.ID })
		return strings.Contains(m.Title, "RESOLVED")
	})
	if _, n := findMsg(console, "prd", isEtcd); n != 1 {
		t.Fatalf("%d etcdNoLeader messages, want the one message edited", n)
	}

	// Basic auth (Alertmanager's basic_auth) works too; staging has no
	// channel, so its alert goes to the fallback channel.
	groupsBeforeBasic := kvCount(t, st)
	postAlert(t, am, map[string]string{"alertname": "KubeNodeNotReady", "cluster": "staging", "node": "w-1", "via": "basic"}, start, time.Time{})
	waitUntil(t, "the basic-auth alert in ops", 30*time.Second, func() bool {
		_, n := findMsg(console, "ops", func(m web.Message) bool { return strings.Contains(m.Title, "KubeNodeNotReady") })
		return n > 0
	})
	// The receiver posts, then records the group: wait for the record too,
	// or it lands in the count below.
	waitUntil(t, "the basic-auth alert's group record", 30*time.Second, func() bool { return kvCount(t, st) > groupsBeforeBasic })

	// A receiver with the wrong token: 401, and nothing changes.
	groups := kvCount(t, st)
	audit := auditCount(t, st)
	before401 := rec.count(http.StatusUnauthorized)
	postAlert(t, am, map[string]string{"alertname": "KubeNodeNotReady", "cluster": "production", "node": "w-2", "via": "wrong"}, start, time.Time{})
	waitUntil(t, "Alertmanager's delivery with the wrong token", 30*time.Second, func() bool { return rec.count(http.StatusUnauthorized) > before401 })
	for _, ch := range []string{"prd", "ops"} {
		if m, n := findMsg(console, ch, func(m web.Message) bool { return strings.Contains(m.Text, "node=w-2") }); n > 0 {
			t.Fatalf("the wrong-token alert reached %s: %+v", ch, m)
		}
	}
	if g := kvCount(t, st); g != groups {
		t.Fatalf("alert groups %d → %d after a refused delivery", groups, g)
	}
	if a := auditCount(t, st); a != audit {
		t.Fatalf("audit records %d → %d after a refused delivery", audit, a)
	}
}
