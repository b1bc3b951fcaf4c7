package silence_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/talosbot/talosbot/approvals"
	"github.com/talosbot/talosbot/bot"
	"github.com/talosbot/talosbot/bot/alerts"
	"github.com/talosbot/talosbot/bot/chat/web"
	"github.com/talosbot/talosbot/bot/credentials"
	"github.com/talosbot/talosbot/bot/engine"
	"github.com/talosbot/talosbot/bot/render"
	"github.com/talosbot/talosbot/bot/silence"
	"github.com/talosbot/talosbot/config"
	"github.com/talosbot/talosbot/internal/amtest"
	lifecyclev1 "github.com/talosbot/talosbot/plugins/sdk/proto/lifecycle/v1"
	"github.com/talosbot/talosbot/state"
)

const webhookToken = "am-webhook-token"

func waitUntil(t *testing.T, what string, d time.Duration, cond func() bool) {
	t.Helper()
	amtest.WaitUntil(t, what, d, cond)
}

func amClient(t *testing.T, base string) *silence.Client {
	t.Helper()
	c, err := silence.NewClient(&config.Silences{URL: base}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// amSilences lists every silence through Alertmanager's own API.
func amSilences(t *testing.T, base string) []silence.Stored {
	t.Helper()
	resp, err := http.Get(base + "/api/v2/silences")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out []silence.Stored
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		t.Fatal(err)
	}
	return out
}

func amSilence(t *testing.T, base, id string) silence.Stored {
	t.Helper()
	for _, s := range amSilences(t, base) {
		if s.ID == id {
			return s
		}
	}
	t.Fatalf("Alertmanager has no silence %s", id)
	return silence.Stored{}
}

// rollPlugins is a plugin host with one disruptive command, "roll", over
// two nodes. Each run reports its steps, then waits for release (or its
// context) so the test decides when it ends.
type rollPlugins struct {
	mu      sync.Mutex
	runs    int
	started chan string
	release chan bool // true: succeed, false: fail
}

func newRollPlugins() *rollPlugins {
	return &rollPlugins{started: make(chan string, 8), release: make(chan bool, 8)}
}

func (p *rollPlugins) Manifests(context.Context) ([]*lifecyclev1.Manifest, error) {
	return []*lifecyclev1.Manifest{{Name: "roll", Commands: []*lifecyclev1.Command{{Name: "roll", Summary: "roll the nodes",
		Effect: lifecyclev1.Effect_EFFECT_DISRUPTIVE, Args: []*lifecyclev1.Arg{{Name: "cluster"}}}}}}, nil
}

func (p *rollPlugins) Plan(_ context.Context, _ string, req *lifecyclev1.OperationRequest) (*lifecyclev1.OperationPlan, error) {
	return &lifecyclev1.OperationPlan{Summary: "roll", Target: "v2", CanonicalInputs: []byte("roll " + req.GetCluster().GetName()),
		Steps: []*lifecyclev1.Step{{Id: "node/worker-1", Title: "worker-1", Node: "worker-1"}, {Id: "node/cp-1", Title: "cp-1", Node: "cp-1"}}}, nil
}

func (p *rollPlugins) Run(ctx context.Context, _ string, req *lifecyclev1.OperationRequest, progress func(*lifecyclev1.Progress) error) (*lifecyclev1.Result, error) {
	p.mu.Lock()
	p.runs++
	p.mu.Unlock()
	_ = progress(&lifecyclev1.Progress{Event: &lifecyclev1.Progress_Step{Step: &lifecyclev1.StepEvent{StepId: "node/worker-1", Status: lifecyclev1.StepStatus_STEP_STATUS_RUNNING, Node: "worker-1"}}})
	p.started <- req.GetOperationId()
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case ok := <-p.release:
		if !ok {
			return &lifecyclev1.Result{Ok: false, Summary: "roll failed", Error: "worker-1 did not come back"}, nil
		}
		return &lifecyclev1.Result{Ok: true, Summary: "rolled", Declared: map[string]string{"talos_version": "v2"}}, nil
	}
}

func (p *rollPlugins) runCount() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.runs
}

type env struct {
	t       *testing.T
	cfg     *config.Config
	store   *state.Store
	plugins *rollPlugins
	console *web.Console
	am      string
	rcv     *alerts.Receiver

	eng *engine.Engine
	mgr *silence.Manager
}

// newEnv builds the bot around a real Alertmanager. amURL "" starts one;
// another value is used as is (e.g. an unreachable address).
func newEnv(t *testing.T, amURL string, extra string) *env {
	t.Helper()
	dir := t.TempDir()
	e := &env{t: t, plugins: newRollPlugins()}
	var err error
	if e.console, err = web.New(web.Options{Channels: []string{"stg", "prd"}, Users: []string{"alice", "bob"}, Open: true}); err != nil {
		t.Fatal(err)
	}
	var handler http.Handler = http.NotFoundHandler()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { handler.ServeHTTP(w, r) }))
	t.Cleanup(srv.Close)
	if amURL == "" {
		amURL = amtest.Start(t, srv.URL+alerts.Path, webhookToken)
	}
	e.am = amURL
	cfg, err := config.Parse([]byte(fmt.Sprintf(`
data_dir: %[1]s
clusters:
  - name: staging
    environment: staging
    channels: [stg]
    endpoints: [127.0.0.1]
    nodes: [{name: cp-1, address: 127.0.0.1, role: controlplane, host: pve1}, {name: worker-1, address: 127.0.0.2, role: worker, host: pve1}]
    credentials: {source: files, talosconfig: "file:%[1]s/tc"}
  - name: production
    environment: production
    channels: [prd]
    endpoints: [127.0.0.3]
    nodes: [{name: cp-1, address: 127.0.0.3, role: controlplane, host: pve1}]
    credentials: {source: files, talosconfig: "file:%[1]s/tc"}
policy:
  staging: {operators: [alice]}
  production: {operators: [alice], approvers: [bob], no_approval_commands: [roll]}
alerts:
  rules:
    - name: node-not-ready
      match: {alertname: KubeNodeNotReady}
      commands: ["/talos status {{cluster}}"]
silences:
  alertmanager_url: %[2]s
  node_label: node
  duration: 2m
%[3]s`, dir, amURL, extra)))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "tc"), []byte("context: test\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	e.cfg = cfg
	if e.store, err = state.Open(filepath.Join(dir, "talosbot.db"), state.Options{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.store.Close() })
	e.start()
	e.rcv, err = alerts.New(alerts.Options{Config: cfg, Store: e.store, Chat: e.console, Buttons: e.eng, Token: webhookToken, Silences: e})
	if err != nil {
		t.Fatal(err)
	}
	handler = e.rcv.Handler()
	return e
}

// Suppressing asks the current manager (it changes across a simulated crash).
func (e *env) Suppressing(ctx context.Context, labels map[string]string) (string, bool) {
	return e.mgr.Suppressing(ctx, labels)
}

// start builds the engine and the silence manager on the store, and runs
// both recoveries, as talosbot serve does at start-up.
func (e *env) start() {
	t := e.t
	client, err := silence.NewClient(e.cfg.Silences, nil)
	if err != nil {
		t.Fatal(err)
	}
	e.mgr, err = silence.New(silence.Options{Config: e.cfg.Silences, Store: e.store, Client: client, KeepaliveEvery: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	e.eng, err = bot.New(context.Background(), engine.Options{Config: e.cfg, Store: e.store, Plugins: e.plugins, Credentials: credentials.FileCredentials{},
		Policy: approvals.New(e.cfg), Sink: render.NewRenderer(e.console, nil, nil), Hooks: []engine.RunHook{e.mgr}})
	if err != nil {
		t.Fatal(err)
	}
	e.console.SetHandler(e.eng)
	if _, err := e.eng.Recover(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := e.mgr.Recover(context.Background()); err != nil {
		t.Fatal(err)
	}
	eng, mgr := e.eng, e.mgr
	t.Cleanup(func() { eng.Close(); mgr.Close() })
}

// crash stops the engine the way a SIGKILL leaves the store: the running
// operation stays running, and nothing gets to expire its silence.
func (e *env) crash() {
	e.eng.Close()
	e.mgr.Close()
}

func (e *env) submit(channel, text string) string {
	e.t.Helper()
	id, err := e.eng.Submit(context.Background(), engine.Origin{User: "alice", Channel: channel}, text)
	if err != nil {
		e.t.Fatalf("%s: %v", text, err)
	}
	return id
}

func (e *env) awaitStarted(id string) {
	e.t.Helper()
	select {
	case got := <-e.plugins.started:
		if got != id {
			e.t.Fatalf("run of %s started, want %s", got, id)
		}
	case <-time.After(30 * time.Second):
		e.t.Fatalf("the run of %s did not start", id)
	}
}

func (e *env) await(id string, s state.OpState) *state.Operation {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	op, err := e.eng.Await(ctx, id, func(o *state.Operation) bool { return o.State == s })
	if err != nil {
		e.t.Fatalf("await %s %s: %v", id, s, err)
	}
	return op
}

func (e *env) record(id string) *silence.Record {
	var rec *silence.Record
	_ = e.store.View(context.Background(), func(tx *state.Tx) error {
		raw, err := tx.GetKV(silence.Bucket, id)
		if err != nil {
			return nil
		}
		rec = &silence.Record{}
		return json.Unmarshal(raw, rec)
	})
	return rec
}

func (e *env) awaitExpired(silenceID string) {
	e.t.Helper()
	waitUntil(e.t, "silence "+silenceID+" expired in Alertmanager", 20*time.Second, func() bool {
		return amSilence(e.t, e.am, silenceID).Status.State == "expired"
	})
}

func (e *env) auditActions(opID string) []string {
	recs, err := e.store.QueryAudit(context.Background(), state.AuditQuery{OpID: opID})
	if err != nil {
		e.t.Fatal(err)
	}
	var out []string
	for i := len(recs) - 1; i >= 0; i-- {
		out = append(out, recs[i].Action)
	}
	return out
}

func (e *env) threadHas(channel, substr string) bool {
	msgs, _ := e.console.Messages(channel, 0)
	for _, m := range msgs {
		if strings.Contains(m.Text, substr) {
			return true
		}
	}
	return false
}

// TestSilenceHeldDuringRunAndAlertsStayQuiet: the run's silence exists in
// Alertmanager with the cluster and node matchers and the operation in its
// comment; an alert posted during the run is silenced there and no
// suggestion appears, while an alert of another cluster still does; the
// silence is extended while the run goes on and expired at its end, and the
// alert still firing is reported in the result.
func TestSilenceHeldDuringRunAndAlertsStayQuiet(t *testing.T) {
	e := newEnv(t, "", "")
	ctx := context.Background()
	id := e.submit("stg", "/talos roll staging")
	e.awaitStarted(id)
	rec := e.record(id)
	if rec == nil {
		t.Fatal("no silence record stored with the operation")
	}
	s := amSilence(t, e.am, rec.SilenceID)
	if s.Status.State != "active" {
		t.Fatalf("silence state %q", s.Status.State)
	}
	want := []silence.Matcher{{Name: "cluster", Value: "staging", IsEqual: true}, {Name: "node", Value: "cp-1|worker-1", IsRegex: true, IsEqual: true}}
	if fmt.Sprint(s.Matchers) != fmt.Sprint(want) {
		t.Fatalf("matchers %+v, want %+v", s.Matchers, want)
	}
	if !strings.Contains(s.Comment, id) || !strings.Contains(s.Comment, "alice") || !strings.Contains(s.CreatedBy, "alice") {
		t.Fatalf("comment %q createdBy %q", s.Comment, s.CreatedBy)
	}
	firstEnd := s.EndsAt

	// The alert the roll causes, and one from another cluster.
	amtest.PostAlert(t, e.am, map[string]string{"alertname": "KubeNodeNotReady", "cluster": "staging", "node": "worker-1"})
	amtest.PostAlert(t, e.am, map[string]string{"alertname": "KubeNodeNotReady", "cluster": "production", "node": "cp-1"})
	waitUntil(t, "the staging alert silenced by the operation's silence", 20*time.Second, func() bool {
		as, err := amClient(t, e.am).Alerts(ctx, []silence.Matcher{{Name: "cluster", Value: "staging", IsEqual: true}})
		return err == nil && len(as) == 1 && as[0].Status.State == "suppressed" && len(as[0].Status.SilencedBy) == 1 && as[0].Status.SilencedBy[0] == rec.SilenceID
	})
	waitUntil(t, "the production suggestion (the webhook delivers)", 30*time.Second, func() bool {
		msgs, _ := e.console.Messages("prd", 0)
		for _, m := range msgs {
			if strings.Contains(m.Title, "KubeNodeNotReady") {
				return true
			}
		}
		return false
	})
	if msgs, _ := e.console.Messages("stg", 0); strings.Contains(fmt.Sprint(msgs), "KubeNodeNotReady") {
		t.Fatalf("a suggestion for the silenced staging alert: %+v", msgs)
	}
	// A notification that reaches the bot anyway (sent before the silence
	// took effect, or by an Alertmanager that does not know it) is kept
	// quiet by the bot itself.
	out, err := e.rcv.Handle(ctx, &alerts.Payload{Status: "firing", GroupKey: "{}:{alertname=\"KubeNodeNotReady\", cluster=\"staging\"}",
		CommonLabels: map[string]string{"alertname": "KubeNodeNotReady", "cluster": "staging"},
		Alerts:       []alerts.Alert{{Status: "firing", Labels: map[string]string{"alertname": "KubeNodeNotReady", "cluster": "staging", "node": "cp-1"}, StartsAt: time.Now()}}})
	if err != nil || out != alerts.OutcomeSilenced {
		t.Fatalf("bot-side suppression: %q %v", out, err)
	}
	// A node outside the operation is not covered.
	out, err = e.rcv.Handle(ctx, &alerts.Payload{Status: "firing", GroupKey: "other-node",
		CommonLabels: map[string]string{"alertname": "KubeNodeNotReady", "cluster": "staging"},
		Alerts:       []alerts.Alert{{Status: "firing", Labels: map[string]string{"alertname": "KubeNodeNotReady", "cluster": "staging", "node": "worker-9"}, StartsAt: time.Now()}}})
	if err != nil || out != alerts.OutcomePosted {
		t.Fatalf("an alert of a node outside the operation: %q %v", out, err)
	}

	// Extended while it runs (the keepalive, every 300ms here).
	waitUntil(t, "the silence extended", 20*time.Second, func() bool { return amSilence(t, e.am, rec.SilenceID).EndsAt.After(firstEnd) })

	e.plugins.release <- true
	e.await(id, state.StateSucceeded)
	e.awaitExpired(rec.SilenceID)
	waitUntil(t, "the follow-up lines in the result", 10*time.Second, func() bool {
		o, _ := e.eng.Operation(ctx, id)
		return strings.Contains(o.Result, "expired")
	})
	op, _ := e.eng.Operation(ctx, id)
	if !strings.Contains(op.Result, "1 alert(s) still firing as the silence ends: KubeNodeNotReady node=worker-1") {
		t.Fatalf("result does not report the alert still firing:\n%s", op.Result)
	}
	waitUntil(t, "the silence record removed ("+"the silence record outlived the operation"+")", 10*time.Second, func() bool { return e.record(id) == nil })
	acts := strings.Join(e.auditActions(id), ",")
	for _, a := range []string{"silence created", "alert silenced", "silence expired"} {
		if !strings.Contains(acts, a) {
			t.Fatalf("audit of %s lacks %q: %s", id, a, acts)
		}
	}
	if _, ok := e.mgr.Suppressing(ctx, map[string]string{"cluster": "staging", "node": "cp-1"}); ok {
		t.Fatal("alerts are still suppressed after the operation ended")
	}
}

// TestSilenceExpiredOnFailureAndCancel: every ending expires the silence.
func TestSilenceExpiredOnFailureAndCancel(t *testing.T) {
	e := newEnv(t, "", "")
	id := e.submit("stg", "/talos roll staging")
	e.awaitStarted(id)
	rec := e.record(id)
	e.plugins.release <- false
	e.await(id, state.StateFailed)
	e.awaitExpired(rec.SilenceID)

	id = e.submit("stg", "/talos roll staging")
	e.awaitStarted(id)
	rec = e.record(id)
	if err := e.eng.Cancel(context.Background(), engine.Origin{User: "alice", Channel: "stg"}, id); err != nil {
		t.Fatal(err)
	}
	e.await(id, state.StateCancelled)
	e.awaitExpired(rec.SilenceID)
	waitUntil(t, "the silence record removed ("+"record kept after cancel"+")", 10*time.Second, func() bool { return e.record(id) == nil })
}

// TestSilenceAcrossCrashResumeAndAbandon: a crash leaves the silence held
// (it is the operation's, and the operation still holds the cluster); the
// next start finds it; resume extends it and the end expires it; abandon
// expires it.
func TestSilenceAcrossCrashResumeAndAbandon(t *testing.T) {
	e := newEnv(t, "", "")
	ctx := context.Background()
	id := e.submit("stg", "/talos roll staging")
	e.awaitStarted(id)
	rec := e.record(id)
	e.crash()
	e.start()
	e.await(id, state.StateInterrupted)
	if s := amSilence(t, e.am, rec.SilenceID); s.Status.State != "active" {
		t.Fatalf("after the crash the silence is %s", s.Status.State)
	}
	if err := e.eng.Resume(ctx, engine.Origin{User: "alice", Channel: "stg"}, id); err != nil {
		t.Fatal(err)
	}
	e.awaitStarted(id)
	after := e.record(id)
	if after == nil || !after.ExtendedAt.After(rec.ExtendedAt) {
		t.Fatalf("resume did not extend the silence: %+v → %+v", rec, after)
	}
	e.plugins.release <- true
	e.await(id, state.StateSucceeded)
	e.awaitExpired(after.SilenceID)

	// Crash, then abandon.
	id = e.submit("stg", "/talos roll staging")
	e.awaitStarted(id)
	rec = e.record(id)
	e.crash()
	e.start()
	e.await(id, state.StateInterrupted)
	if err := e.eng.Abandon(ctx, engine.Origin{User: "alice", Channel: "stg"}, id); err != nil {
		t.Fatal(err)
	}
	e.awaitExpired(rec.SilenceID)
	waitUntil(t, "the silence record removed ("+"record kept after abandon"+")", 10*time.Second, func() bool { return e.record(id) == nil })
}

// TestSilenceFoundAtStartAfterOperationEnded: a crash between the end of an
// operation and the expiry leaves a record of an ended operation; the next
// start expires its silence.
func TestSilenceFoundAtStartAfterOperationEnded(t *testing.T) {
	e := newEnv(t, "", "")
	client := amClient(t, e.am)
	ctx := context.Background()
	sid, err := client.Post(ctx, silence.Silence{Matchers: []silence.Matcher{{Name: "cluster", Value: "staging", IsEqual: true}},
		StartsAt: time.Now(), EndsAt: time.Now().Add(time.Hour), CreatedBy: "test", Comment: "left behind"})
	if err != nil {
		t.Fatal(err)
	}
	// An operation that ended while its record stayed behind.
	op := &state.Operation{ID: "ended1", Cluster: "staging", Command: "roll", Requester: "alice"}
	if err := e.store.Update(ctx, func(tx *state.Tx) error {
		if err := tx.PutOperation(op); err != nil {
			return err
		}
		if _, err := tx.Transition(op.ID, state.StateCancelled, nil); err != nil {
			return err
		}
		raw, _ := json.Marshal(silence.Record{OpID: op.ID, Cluster: "staging", SilenceID: sid, EndsAt: time.Now().Add(time.Hour)})
		return tx.PutKV(silence.Bucket, op.ID, raw)
	}); err != nil {
		t.Fatal(err)
	}
	e.crash()
	e.start()
	e.awaitExpired(sid)
	waitUntil(t, "the silence record removed ("+"record of an ended operation kept"+")", 10*time.Second, func() bool { return e.record(op.ID) == nil })
}

// TestAlertmanagerUnreachable: staging runs with a warning; production,
// which requires a silence, refuses to start and says why.
func TestAlertmanagerUnreachable(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := "http://" + l.Addr().String()
	l.Close()
	e := newEnv(t, dead, "  require_in: [production]\n")
	id := e.submit("stg", "/talos roll staging")
	e.awaitStarted(id)
	waitUntil(t, "the warning in the thread", 10*time.Second, func() bool { return e.threadHas("stg", "no Alertmanager silence for this run") })
	e.plugins.release <- true
	e.await(id, state.StateSucceeded)

	runs := e.plugins.runCount()
	id = e.submit("prd", "/talos roll production")
	op := e.await(id, state.StateRefused)
	if !strings.Contains(op.Error, "production requires an Alertmanager silence") || !strings.Contains(op.Error, "silences.require_in") {
		t.Fatalf("refusal: %q", op.Error)
	}
	if e.plugins.runCount() != runs {
		t.Fatal("the production run started without its required silence")
	}
	if !strings.Contains(strings.Join(e.auditActions(id), ","), "silence failed") {
		t.Fatalf("audit: %v", e.auditActions(id))
	}
}

// TestResumeAfterSilenceLapsed: while the operation was interrupted its
// silence ended (here: expired by hand); resume makes a new one.
func TestResumeAfterSilenceLapsed(t *testing.T) {
	e := newEnv(t, "", "")
	ctx := context.Background()
	id := e.submit("stg", "/talos roll staging")
	e.awaitStarted(id)
	rec := e.record(id)
	e.crash()
	if err := amClient(t, e.am).Expire(ctx, rec.SilenceID); err != nil {
		t.Fatal(err)
	}
	e.start()
	e.await(id, state.StateInterrupted)
	if err := e.eng.Resume(ctx, engine.Origin{User: "alice", Channel: "stg"}, id); err != nil {
		t.Fatal(err)
	}
	e.awaitStarted(id)
	after := e.record(id)
	if after == nil || after.SilenceID == rec.SilenceID {
		t.Fatalf("resume kept the lapsed silence: %+v", after)
	}
	if s := amSilence(t, e.am, after.SilenceID); s.Status.State != "active" || fmt.Sprint(s.Matchers) != fmt.Sprint(rec.Matchers) {
		t.Fatalf("new silence %+v", s)
	}
	e.plugins.release <- true
	e.await(id, state.StateSucceeded)
	e.awaitExpired(after.SilenceID)
}

// TestExpiryStopsSuppressingBeforeAlertmanagerUnmutes: the moment
// Alertmanager has expired the silence it may flush the group to the bot;
// by then the bot must no longer keep that alert quiet, or Alertmanager's
// notification log counts it as sent and the alert still firing stays out
// of the channel until repeat_interval. A proxy in front of the real
// Alertmanager asks the manager right after the expiry went through. When
// Alertmanager refuses the expiry, the silence still holds there, and so
// does the bot's suppression.
func TestExpiryStopsSuppressingBeforeAlertmanagerUnmutes(t *testing.T) {
	real := amtest.Start(t, "http://127.0.0.1:9/nowhere", webhookToken)
	target, err := url.Parse(real)
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu         sync.Mutex
		refuse     bool
		e          *env
		afterAM    = make(chan bool, 4)
		labels     = map[string]string{"alertname": "KubeNodeNotReady", "cluster": "staging", "node": "worker-1"}
		proxyToAM  = httputil.NewSingleHostReverseProxy(target)
		expirePath = "/api/v2/silence/"
	)
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodDelete || !strings.HasPrefix(r.URL.Path, expirePath) {
			proxyToAM.ServeHTTP(w, r)
			return
		}
		mu.Lock()
		no, mgr := refuse, e.mgr
		mu.Unlock()
		if no {
			http.Error(w, "refused by the test", http.StatusInternalServerError)
			return
		}
		proxyToAM.ServeHTTP(w, r)
		_, quiet := mgr.Suppressing(r.Context(), labels)
		afterAM <- quiet
	}))
	t.Cleanup(proxy.Close)
	mu.Lock()
	e = newEnv(t, proxy.URL, "")
	mu.Unlock()
	ctx := context.Background()

	// Accepted: once Alertmanager has it expired, nothing is suppressed.
	id := e.submit("stg", "/talos roll staging")
	e.awaitStarted(id)
	rec := e.record(id)
	e.plugins.release <- true
	e.await(id, state.StateSucceeded)
	select {
	case quiet := <-afterAM:
		if quiet {
			t.Fatal("the bot still suppressed the alert after Alertmanager had expired the silence")
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the silence was never expired")
	}
	e.awaitExpired(rec.SilenceID)

	mu.Lock()
	refuse = true
	mu.Unlock()
	// Refused: the record stays as it was and keeps suppressing.
	id = e.submit("stg", "/talos roll staging")
	e.awaitStarted(id)
	rec = e.record(id)
	e.plugins.release <- true
	e.await(id, state.StateSucceeded)
	waitUntil(t, "the refused expiry reported", 10*time.Second, func() bool {
		o, _ := e.eng.Operation(ctx, id)
		return strings.Contains(o.Result, "could not expire Alertmanager silence")
	})
	if got := e.record(id); got == nil || !got.EndsAt.After(time.Now()) {
		t.Fatalf("after a refused expiry the record is %+v, want it back with the silence's end", got)
	}
	if _, quiet := e.mgr.Suppressing(ctx, labels); !quiet {
		t.Fatal("the silence still holds in Alertmanager, but the bot stopped suppressing")
	}
	if s := amSilence(t, real, rec.SilenceID); s.Status.State != "active" {
		t.Fatalf("silence %s is %s after a refused expiry", rec.SilenceID, s.Status.State)
	}
}
