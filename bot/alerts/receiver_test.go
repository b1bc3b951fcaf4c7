package alerts_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/talosbot/talosbot/bot/alerts"
	"github.com/talosbot/talosbot/bot/chat"
	"github.com/talosbot/talosbot/bot/engine"
	"github.com/talosbot/talosbot/config"
	"github.com/talosbot/talosbot/state"
)

// recAdapter records posts and edits (a unit-test chat adapter).
type recAdapter struct {
	mu    sync.Mutex
	n     int
	msgs  map[string]chat.Message
	chans map[string]string
	edits int
}

func newRecAdapter() *recAdapter {
	return &recAdapter{msgs: map[string]chat.Message{}, chans: map[string]string{}}
}

func (a *recAdapter) Post(_ context.Context, channel, _ string, m chat.Message) (string, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.n++
	ref := fmt.Sprintf("r%d", a.n)
	a.msgs[ref], a.chans[ref] = m, channel
	return ref, nil
}

func (a *recAdapter) Edit(_ context.Context, _ string, ref string, m chat.Message) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if _, ok := a.msgs[ref]; !ok {
		return fmt.Errorf("no message %s", ref)
	}
	a.msgs[ref] = m
	a.edits++
	return nil
}

func (a *recAdapter) snapshot() (posts, edits int, msgs map[string]chat.Message) {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := map[string]chat.Message{}
	for k, v := range a.msgs {
		out[k] = v
	}
	return a.n, a.edits, out
}

// recMinter records the suggestions it minted buttons for.
type recMinter struct {
	mu   sync.Mutex
	sugg []engine.Suggestion
}

func (m *recMinter) CommandButtons(_ context.Context, s []engine.Suggestion) ([]engine.Button, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []engine.Button
	for _, x := range s {
		m.sugg = append(m.sugg, x)
		out = append(out, engine.Button{ID: fmt.Sprintf("tok%d", len(m.sugg)), Label: x.Label})
	}
	return out, nil
}

const token = "s3cret-token"

func testConfig(t *testing.T) *config.Config {
	t.Helper()
	cfg := &config.Config{DataDir: t.TempDir(), Clusters: []config.Cluster{
		{Name: "production", Environment: "production", Channels: []string{"prd", "prd-2"}},
		{Name: "staging", Environment: "staging"},
	}}
	cfg.Alerts.Rules = []config.AlertRule{
		{Name: "etcd-no-leader", MatchRE: map[string]string{"alertname": "etcdNoLeader|EtcdNoLeader"}, Match: map[string]string{"severity": "critical"},
			Text: "etcd has no leader", Runbook: "https://example.test/etcd", Commands: []string{"/talos health {{cluster}}", "/talos status {{cluster}}"}},
		{Name: "node-not-ready", Match: map[string]string{"alertname": "KubeNodeNotReady"}, Text: "replace the node",
			Runbook: "https://example.test/node", Commands: []string{"/talos health {{cluster}}", "/talos drain {{labels.node}}"}},
	}
	cfg.ApplyDefaults()
	return cfg
}

type fixture struct {
	t      *testing.T
	store  *state.Store
	chat   *recAdapter
	minter *recMinter
	rcv    *alerts.Receiver
	srv    *httptest.Server
}

func newFixture(t *testing.T, mutate func(*alerts.Options)) *fixture {
	t.Helper()
	cfg := testConfig(t)
	st, err := state.Open(filepath.Join(t.TempDir(), "t.db"), state.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	f := &fixture{t: t, store: st, chat: newRecAdapter(), minter: &recMinter{}}
	o := alerts.Options{Config: cfg, Store: st, Chat: f.chat, Buttons: f.minter, Token: token, FallbackChannel: "ops",
		Clock: func() time.Time { return time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC) }}
	if mutate != nil {
		mutate(&o)
	}
	f.rcv, err = alerts.New(o)
	if err != nil {
		t.Fatal(err)
	}
	f.srv = httptest.NewServer(f.rcv.Handler())
	t.Cleanup(f.srv.Close)
	return f
}

func payload(groupKey, status string, alerts ...alerts.Alert) []byte {
	p := map[string]any{"version": "4", "groupKey": groupKey, "status": status, "receiver": "talosbot",
		"groupLabels": map[string]string{"alertname": alerts[0].Labels["alertname"]}, "commonLabels": common(alerts), "alerts": alerts}
	raw, _ := json.Marshal(p)
	return raw
}

func common(as []alerts.Alert) map[string]string {
	out := map[string]string{}
	for k, v := range as[0].Labels {
		out[k] = v
	}
	for _, a := range as[1:] {
		for k, v := range out {
			if a.Labels[k] != v {
				delete(out, k)
			}
		}
	}
	return out
}

func alert(status string, labels ...string) alerts.Alert {
	l := map[string]string{}
	for i := 0; i+1 < len(labels); i += 2 {
		l[labels[i]] = labels[i+1]
	}
	a := alerts.Alert{Status: status, Labels: l, Annotations: map[string]string{"summary": "summary of " + l["alertname"]},
		StartsAt: time.Date(2026, 5, 1, 11, 58, 0, 0, time.UTC)}
	if status == alerts.StatusResolved {
		a.EndsAt = time.Date(2026, 5, 1, 12, 5, 0, 0, time.UTC)
	}
	return a
}

func (f *fixture) send(body []byte, auth func(*http.Request)) (int, string) {
	f.t.Helper()
	req, _ := http.NewRequest("POST", f.srv.URL+alerts.Path, bytes.NewReader(body))
	if auth != nil {
		auth(req)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		f.t.Fatal(err)
	}
	defer resp.Body.Close()
	var out map[string]string
	_ = json.NewDecoder(resp.Body).Decode(&out)
	return resp.StatusCode, out["outcome"] + out["error"]
}

func bearer(tok string) func(*http.Request) {
	return func(r *http.Request) { r.Header.Set("Authorization", "Bearer "+tok) }
}

func kvCount(t *testing.T, st *state.Store) int {
	n := 0
	if err := st.View(context.Background(), func(tx *state.Tx) error {
		return tx.ForEachKV(alerts.Bucket, func(string, []byte) error { n++; return nil })
	}); err != nil {
		t.Fatal(err)
	}
	return n
}

func auditCount(t *testing.T, st *state.Store) int {
	rep, err := st.VerifyAudit(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return rep.Records
}

func TestGroupLifecycleOneMessageEditedAndResolved(t *testing.T) {
	f := newFixture(t, nil)
	fire := alert(alerts.StatusFiring, "alertname", "etcdNoLeader", "cluster", "production", "severity", "critical", "instance", "cp-1")
	code, out := f.send(payload("{}:{alertname=\"etcdNoLeader\"}", "firing", fire), bearer(token))
	if code != 200 || out != alerts.OutcomePosted {
		t.Fatalf("first notification: %d %q", code, out)
	}
	posts, edits, msgs := f.chat.snapshot()
	if posts != 1 || edits != 0 {
		t.Fatalf("posts=%d edits=%d, want 1/0", posts, edits)
	}
	m := msgs["r1"]
	if f.chat.chans["r1"] != "prd" {
		t.Fatalf("posted to %q, want the cluster's first channel prd", f.chat.chans["r1"])
	}
	for _, want := range []string{"etcd has no leader", "https://example.test/etcd", "instance=cp-1", "summary of etcdNoLeader"} {
		if !strings.Contains(m.Text, want) {
			t.Errorf("message text lacks %q:\n%s", want, m.Text)
		}
	}
	if !strings.Contains(m.Title, "FIRING:1") || !strings.Contains(m.Title, "production") {
		t.Errorf("title %q", m.Title)
	}
	if len(m.Buttons) != 2 || m.Buttons[0].Label != "health production" || m.Buttons[1].Label != "status production" {
		t.Fatalf("buttons %+v", m.Buttons)
	}
	if f.minter.sugg[0].Command != "/talos health production" {
		t.Fatalf("minted %+v", f.minter.sugg)
	}

	// The same notification again (repeat_interval): nothing is re-sent.
	if code, out := f.send(payload("{}:{alertname=\"etcdNoLeader\"}", "firing", fire), bearer(token)); code != 200 || out != alerts.OutcomeUnchanged {
		t.Fatalf("repeat: %d %q", code, out)
	}
	// A second alert joins the group: the same message is edited.
	fire2 := alert(alerts.StatusFiring, "alertname", "etcdNoLeader", "cluster", "production", "severity", "critical", "instance", "cp-2")
	if code, out := f.send(payload("{}:{alertname=\"etcdNoLeader\"}", "firing", fire, fire2), bearer(token)); code != 200 || out != alerts.OutcomeUpdated {
		t.Fatalf("second alert: %d %q", code, out)
	}
	posts, edits, msgs = f.chat.snapshot()
	if posts != 1 || edits != 1 || !strings.Contains(msgs["r1"].Title, "FIRING:2") || !strings.Contains(msgs["r1"].Text, "instance=cp-2") {
		t.Fatalf("after second alert: posts=%d edits=%d msg=%+v", posts, edits, msgs["r1"])
	}
	if len(f.minter.sugg) != 2 {
		t.Fatalf("buttons were minted again for an unchanged suggestion: %+v", f.minter.sugg)
	}
	// Resolved: the same message says so.
	res := []alerts.Alert{alert(alerts.StatusResolved, "alertname", "etcdNoLeader", "cluster", "production", "severity", "critical", "instance", "cp-1"),
		alert(alerts.StatusResolved, "alertname", "etcdNoLeader", "cluster", "production", "severity", "critical", "instance", "cp-2")}
	if code, out := f.send(payload("{}:{alertname=\"etcdNoLeader\"}", "resolved", res...), bearer(token)); code != 200 || out != alerts.OutcomeResolved {
		t.Fatalf("resolve: %d %q", code, out)
	}
	posts, _, msgs = f.chat.snapshot()
	if posts != 1 || !strings.Contains(msgs["r1"].Title, "RESOLVED") {
		t.Fatalf("after resolve: posts=%d title=%q", posts, msgs["r1"].Title)
	}
	ch, ref, status, ok, err := f.rcv.Group(context.Background(), "{}:{alertname=\"etcdNoLeader\"}")
	if err != nil || !ok || ch != "prd" || ref != "r1" || status != alerts.StatusResolved {
		t.Fatalf("stored group: %q %q %q %v %v", ch, ref, status, ok, err)
	}
	// Firing again after the resolve is a new incident: a new message.
	if code, out := f.send(payload("{}:{alertname=\"etcdNoLeader\"}", "firing", fire), bearer(token)); code != 200 || out != alerts.OutcomePosted {
		t.Fatalf("re-fire: %d %q", code, out)
	}
	if posts, _, _ := f.chat.snapshot(); posts != 2 {
		t.Fatalf("re-fire posts=%d, want 2", posts)
	}
	recs, err := f.store.QueryAudit(context.Background(), state.AuditQuery{Actor: "alertmanager"})
	if err != nil || len(recs) != 3 {
		t.Fatalf("audit records of alerts: %d %v (want posted, resolved, posted)", len(recs), err)
	}
	if recs[1].Action != "alert resolved" || recs[1].Cluster != "production" || recs[1].Detail["rule"] != "etcd-no-leader" {
		t.Fatalf("resolve audit record %+v", recs[1])
	}
}

func TestWrongCredentialsGet401AndChangeNothing(t *testing.T) {
	f := newFixture(t, nil)
	body := payload("g1", "firing", alert(alerts.StatusFiring, "alertname", "etcdNoLeader", "cluster", "production", "severity", "critical"))
	for name, auth := range map[string]func(*http.Request){
		"none":          nil,
		"wrong bearer":  bearer("nope"),
		"prefix bearer": bearer(token[:4]),
		"wrong basic":   func(r *http.Request) { r.SetBasicAuth("alertmanager", "nope") },
		"token as user": func(r *http.Request) { r.SetBasicAuth(token, "") },
		"no scheme":     func(r *http.Request) { r.Header.Set("Authorization", token) },
	} {
		if code, _ := f.send(body, auth); code != http.StatusUnauthorized {
			t.Errorf("%s: status %d, want 401", name, code)
		}
	}
	if posts, _, _ := f.chat.snapshot(); posts != 0 {
		t.Fatalf("a refused request posted %d messages", posts)
	}
	if n := kvCount(t, f.store); n != 0 {
		t.Fatalf("a refused request stored %d groups", n)
	}
	if n := auditCount(t, f.store); n != 0 {
		t.Fatalf("a refused request wrote %d audit records", n)
	}
	if len(f.minter.sugg) != 0 {
		t.Fatal("a refused request minted buttons")
	}
	// Basic auth with the token as password works (Alertmanager basic_auth).
	if code, out := f.send(body, func(r *http.Request) { r.SetBasicAuth("am", token) }); code != 200 || out != alerts.OutcomePosted {
		t.Fatalf("basic auth: %d %q", code, out)
	}
}

func TestEmptyTokenRefusesEverything(t *testing.T) {
	f := newFixture(t, func(o *alerts.Options) { o.Token = "" })
	body := payload("g1", "firing", alert(alerts.StatusFiring, "alertname", "etcdNoLeader", "cluster", "production", "severity", "critical"))
	for _, auth := range []func(*http.Request){nil, bearer(""), func(r *http.Request) { r.SetBasicAuth("", "") }} {
		if code, _ := f.send(body, auth); code != http.StatusUnauthorized {
			t.Fatalf("status %d with an empty configured token, want 401", code)
		}
	}
}

func TestRoutingAndCommandSubstitution(t *testing.T) {
	f := newFixture(t, nil)
	ctx := context.Background()
	// Unknown cluster: fallback channel, no {{cluster}} commands, a warning.
	p := &alerts.Payload{Version: "4", GroupKey: "g-unknown", Status: "firing", CommonLabels: map[string]string{"cluster": "lab"},
		Alerts: []alerts.Alert{alert(alerts.StatusFiring, "alertname", "KubeNodeNotReady", "cluster", "lab", "node", "w-1")}}
	if out, err := f.rcv.Handle(ctx, p); err != nil || out != alerts.OutcomePosted {
		t.Fatalf("%q %v", out, err)
	}
	_, _, msgs := f.chat.snapshot()
	m := msgs["r1"]
	if f.chat.chans["r1"] != "ops" || !strings.Contains(m.Text, `cluster "lab" is not configured`) {
		t.Fatalf("unknown cluster: channel %q text %q", f.chat.chans["r1"], m.Text)
	}
	if len(m.Buttons) != 1 || m.Buttons[0].Label != "drain w-1" {
		t.Fatalf("buttons %+v: want only the label-substituted command", m.Buttons)
	}
	// Known cluster without channels (staging): fallback channel.
	p = &alerts.Payload{Version: "4", GroupKey: "g-stg", Status: "firing",
		Alerts: []alerts.Alert{alert(alerts.StatusFiring, "alertname", "KubeNodeNotReady", "cluster", "staging", "node", "w-1")}}
	if out, err := f.rcv.Handle(ctx, p); err != nil || out != alerts.OutcomePosted {
		t.Fatalf("%q %v", out, err)
	}
	if f.chat.chans["r2"] != "ops" {
		t.Fatalf("staging alert went to %q", f.chat.chans["r2"])
	}
	// An unsafe label value never reaches a command.
	p = &alerts.Payload{Version: "4", GroupKey: "g-evil", Status: "firing",
		Alerts: []alerts.Alert{alert(alerts.StatusFiring, "alertname", "KubeNodeNotReady", "cluster", "production", "node", "w-1 --outside-window")}}
	if _, err := f.rcv.Handle(ctx, p); err != nil {
		t.Fatal(err)
	}
	_, _, msgs = f.chat.snapshot()
	for _, b := range msgs["r3"].Buttons {
		if strings.Contains(b.Label, "drain") {
			t.Fatalf("unsafe label value made a button: %+v", b)
		}
	}
	// No rule matches: nothing is posted.
	p = &alerts.Payload{Version: "4", GroupKey: "g-other", Status: "firing",
		Alerts: []alerts.Alert{alert(alerts.StatusFiring, "alertname", "Watchdog", "cluster", "production")}}
	if out, err := f.rcv.Handle(ctx, p); err != nil || out != alerts.OutcomeUnmatched {
		t.Fatalf("%q %v", out, err)
	}
	// severity must match exactly: warning does not match the critical rule.
	p = &alerts.Payload{Version: "4", GroupKey: "g-warn", Status: "firing",
		Alerts: []alerts.Alert{alert(alerts.StatusFiring, "alertname", "etcdNoLeader", "cluster", "production", "severity", "warning")}}
	if out, _ := f.rcv.Handle(ctx, p); out != alerts.OutcomeUnmatched {
		t.Fatalf("severity warning matched the critical rule: %q", out)
	}
	// A group first seen resolved is not posted.
	p = &alerts.Payload{Version: "4", GroupKey: "g-late", Status: "resolved",
		Alerts: []alerts.Alert{alert(alerts.StatusResolved, "alertname", "KubeNodeNotReady", "cluster", "production")}}
	if out, _ := f.rcv.Handle(ctx, p); out != alerts.OutcomeIgnored {
		t.Fatalf("late resolve: %q", out)
	}
	if posts, _, _ := f.chat.snapshot(); posts != 3 {
		t.Fatalf("posts=%d, want 3", posts)
	}
}

func TestNoChannelIsReportedNotPosted(t *testing.T) {
	f := newFixture(t, func(o *alerts.Options) { o.FallbackChannel = "" })
	p := &alerts.Payload{Version: "4", GroupKey: "g", Status: "firing",
		Alerts: []alerts.Alert{alert(alerts.StatusFiring, "alertname", "KubeNodeNotReady", "cluster", "staging")}}
	if out, err := f.rcv.Handle(context.Background(), p); err != nil || out != alerts.OutcomeNoChannel {
		t.Fatalf("%q %v", out, err)
	}
	if n := kvCount(t, f.store); n != 0 {
		t.Fatalf("stored %d groups", n)
	}
}

func TestRulesAreAnchoredAndValidated(t *testing.T) {
	rules, err := alerts.CompileRules([]config.AlertRule{{Name: "r", MatchRE: map[string]string{"alertname": "etcd.*Leader"}}})
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]bool{"etcdNoLeader": true, "xetcdNoLeader": false, "etcdNoLeaderX": false, "": false} {
		if got := rules[0].Matches(map[string]string{"alertname": name}); got != want {
			t.Errorf("alertname %q: match %v, want %v", name, got, want)
		}
	}
	if _, err := alerts.CompileRules([]config.AlertRule{{Name: "bad", MatchRE: map[string]string{"a": "("}}}); err == nil || !strings.Contains(err.Error(), "match_re.a") {
		t.Fatalf("bad regex: %v", err)
	}
	if _, err := alerts.CompileRules([]config.AlertRule{{Name: "empty"}}); err == nil {
		t.Fatal("a rule without matchers compiled")
	}
	if _, err := alerts.CompileRules(alerts.DefaultRules()); err != nil {
		t.Fatalf("default rules: %v", err)
	}
	cfg := &config.Config{Alerts: config.Alerts{Rules: alerts.DefaultRules()}}
	cfg.ApplyDefaults()
	for _, e := range cfg.Validate() {
		if strings.HasPrefix(e.Path, "alerts") {
			t.Errorf("default rules fail config validation: %v", e)
		}
	}
}

func TestDefaultRulesCoverCommonAlerts(t *testing.T) {
	rules, _ := alerts.CompileRules(alerts.DefaultRules())
	for alertname, rule := range map[string]string{
		"etcdNoLeader": "etcd-no-leader", "etcdMembersDown": "etcd-members-down", "etcdDatabaseQuotaLowSpace": "etcd-space",
		"KubeNodeNotReady": "node-not-ready", "NodeFilesystemAlmostOutOfSpace": "node-resources", "KubeAPIDown": "control-plane-down",
		"TalosServiceDown": "talos", "FluxReconciliationFailure": "flux",
	} {
		got := ""
		for i := range rules {
			if rules[i].Matches(map[string]string{"alertname": alertname}) {
				got = rules[i].Name
				break
			}
		}
		if got != rule {
			t.Errorf("%s matched rule %q, want %q", alertname, got, rule)
		}
	}
}

func TestDecodeRejectsBadPayloads(t *testing.T) {
	good := `{"version":"4","groupKey":"k","status":"firing","alerts":[{"status":"firing","labels":{"alertname":"x"}}]}`
	if _, err := alerts.Decode(strings.NewReader(good)); err != nil {
		t.Fatalf("good payload: %v", err)
	}
	for name, body := range map[string]string{
		"version 3":    strings.Replace(good, `"4"`, `"3"`, 1),
		"no group key": strings.Replace(good, `"k"`, `""`, 1),
		"bad status":   strings.Replace(good, `"status":"firing","alerts"`, `"status":"on","alerts"`, 1),
		"no alerts":    `{"version":"4","groupKey":"k","status":"firing","alerts":[]}`,
		"no labels":    `{"version":"4","groupKey":"k","status":"firing","alerts":[{"status":"firing"}]}`,
		"trailing":     good + `{}`,
		"not json":     `version: 4`,
	} {
		if _, err := alerts.Decode(strings.NewReader(body)); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	f := newFixture(t, nil)
	if code, _ := f.send([]byte(`{"version":"3"}`), bearer(token)); code != http.StatusBadRequest {
		t.Fatalf("bad payload status %d, want 400", code)
	}
}

func TestLostMessageIsPostedAgain(t *testing.T) {
	f := newFixture(t, nil)
	ctx := context.Background()
	fire := alert(alerts.StatusFiring, "alertname", "KubeNodeNotReady", "cluster", "production", "node", "w-1")
	p := &alerts.Payload{Version: "4", GroupKey: "g", Status: "firing", Alerts: []alerts.Alert{fire}}
	if _, err := f.rcv.Handle(ctx, p); err != nil {
		t.Fatal(err)
	}
	f.chat.mu.Lock()
	delete(f.chat.msgs, "r1") // someone deleted the message
	f.chat.mu.Unlock()
	p.Status, p.Alerts[0].Status = "resolved", "resolved"
	if out, err := f.rcv.Handle(ctx, p); err != nil || out != alerts.OutcomeResolved {
		t.Fatalf("%q %v", out, err)
	}
	_, ref, status, _, _ := f.rcv.Group(ctx, "g")
	_, _, msgs := f.chat.snapshot()
	if ref != "r2" || status != "resolved" || !strings.Contains(msgs["r2"].Title, "RESOLVED") {
		t.Fatalf("ref %q status %q msgs %v", ref, status, msgs)
	}
}

// TestOversizedBodyGets413AndChangesNothing: a body over MaxPayload is
// answered 413 (not 400), whether its Content-Length says so up front or it
// arrives chunked, and nothing is posted, stored or audited.
func TestOversizedBodyGets413AndChangesNothing(t *testing.T) {
	f := newFixture(t, nil)
	big := alert(alerts.StatusFiring, "alertname", "etcdNoLeader", "cluster", "production", "severity", "critical")
	big.Annotations["description"] = strings.Repeat("x", alerts.MaxPayload)
	body := payload("g-big", "firing", big)
	for name, r := range map[string]io.Reader{
		"with Content-Length": bytes.NewReader(body),
		"chunked":             io.MultiReader(bytes.NewReader(body)), // hides the length
	} {
		req, _ := http.NewRequest("POST", f.srv.URL+alerts.Path, r)
		bearer(token)(req)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		msg, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusRequestEntityTooLarge || !strings.Contains(string(msg), "larger than") && !strings.Contains(string(msg), "too large") {
			t.Errorf("%s: %d %s, want 413", name, resp.StatusCode, msg)
		}
	}
	if posts, _, _ := f.chat.snapshot(); posts != 0 {
		t.Fatalf("an oversized request posted %d messages", posts)
	}
	if n := kvCount(t, f.store); n != 0 {
		t.Fatalf("an oversized request stored %d groups", n)
	}
	if n := auditCount(t, f.store); n != 0 {
		t.Fatalf("an oversized request wrote %d audit records", n)
	}
}
