package engine_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"github.com/talosbot/talosbot/approvals"
	"github.com/talosbot/talosbot/bot"
	"github.com/talosbot/talosbot/bot/credentials"
	"github.com/talosbot/talosbot/bot/engine"
	"github.com/talosbot/talosbot/config"
	"github.com/talosbot/talosbot/plugins/host"
	lifecyclev1 "github.com/talosbot/talosbot/plugins/sdk/proto/lifecycle/v1"
	"github.com/talosbot/talosbot/state"
	"google.golang.org/protobuf/proto"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// pluginBin is the engine tests' plugin, launched as a built-in, and
// pluginSHA256 its sum (the host starts no built-in without one).
var pluginBin, pluginSHA256 string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "engineplugin")
	if err != nil {
		panic(err)
	}
	pluginBin = filepath.Join(dir, "engineplugin")
	out, err := exec.Command("go", "build", "-o", pluginBin, "./testdata/engineplugin").CombinedOutput()
	if err != nil {
		fmt.Fprintf(os.Stderr, "build engineplugin: %v\n%s", err, out)
		os.Exit(1)
	}
	raw, err := os.ReadFile(pluginBin)
	if err != nil {
		panic(err)
	}
	sum := sha256.Sum256(raw)
	pluginSHA256 = hex.EncodeToString(sum[:])
	code := m.Run()
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

// recSink records everything the engine says.
type recSink struct {
	mu      sync.Mutex
	replies []string
	threads []string
	buttons map[string][]engine.Button // op id → latest buttons
	changed chan struct{}
}

func newRecSink() *recSink {
	return &recSink{buttons: map[string][]engine.Button{}, changed: make(chan struct{})}
}

func (s *recSink) bump() { close(s.changed); s.changed = make(chan struct{}) }

func (s *recSink) Reply(_ context.Context, _ engine.Origin, text string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.replies = append(s.replies, text)
	s.bump()
}

func (s *recSink) ReplyButtons(ctx context.Context, to engine.Origin, text string, buttons []engine.Button) {
	s.mu.Lock()
	s.buttons["reply"] = buttons
	s.mu.Unlock()
	s.Reply(ctx, to, text)
}

func (s *recSink) Operation(_ context.Context, u engine.Update) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if u.Buttons != nil {
		s.buttons[u.Op.ID] = u.Buttons
	}
	s.bump()
}

func (s *recSink) Thread(_ context.Context, _ *state.Operation, text string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.threads = append(s.threads, text)
	s.bump()
}

// button waits for the operation's message to carry the button: the engine
// stores a state before the renderer's update reaches the sink.
func (s *recSink) button(t *testing.T, op, label string, not ...string) string {
	t.Helper()
	deadline := time.After(60 * time.Second)
	for {
		s.mu.Lock()
		ch := s.changed
		have := s.buttons[op]
		s.mu.Unlock()
		for _, b := range have {
			if b.Label == label && !slices.Contains(not, b.ID) {
				return b.ID
			}
		}
		select {
		case <-ch:
		case <-deadline:
			t.Fatalf("op %s has no %q button (have %v)", op, label, have)
		}
	}
}

// waitReply waits for a reply containing want.
func (s *recSink) waitReply(t *testing.T, want string) string {
	t.Helper()
	deadline := time.After(60 * time.Second)
	for {
		s.mu.Lock()
		ch := s.changed
		for _, r := range s.replies {
			if strings.Contains(r, want) {
				s.mu.Unlock()
				return r
			}
		}
		got := append([]string(nil), s.replies...)
		s.mu.Unlock()
		select {
		case <-ch:
		case <-deadline:
			t.Fatalf("no reply containing %q; replies: %q", want, got)
		}
	}
}

// waitFor polls cond until it holds or a deadline passes (for effects outside
// this process, such as a file a plugin writes).
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		<-tick.C
	}
}

type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }

func (c *fakeClock) Add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

type env struct {
	t      *testing.T
	cfg    *config.Config
	store  *state.Store
	mgr    *host.Manager
	eng    *engine.Engine
	sink   *recSink
	clock  *fakeClock
	dbPath string
	creds  *countingCreds
	plans  *countingPlans
	hooks  []engine.RunHook
	// also receives everything the engine says, beside sink (e.g. a
	// render.Renderer, to see what a chat platform would show).
	also engine.Sink
}

// teeSink says everything to both sinks.
type teeSink struct{ a, b engine.Sink }

func (s teeSink) Reply(ctx context.Context, to engine.Origin, text string) {
	s.a.Reply(ctx, to, text)
	s.b.Reply(ctx, to, text)
}

func (s teeSink) ReplyButtons(ctx context.Context, to engine.Origin, text string, buttons []engine.Button) {
	s.a.ReplyButtons(ctx, to, text, buttons)
	s.b.ReplyButtons(ctx, to, text, buttons)
}

func (s teeSink) Operation(ctx context.Context, u engine.Update) {
	s.a.Operation(ctx, u)
	s.b.Operation(ctx, u)
}

func (s teeSink) Thread(ctx context.Context, op *state.Operation, text string) {
	s.a.Thread(ctx, op, text)
	s.b.Thread(ctx, op, text)
}

// countingPlans passes every call to the plugin host and counts the Plans
// per cluster, so a test can tell that a cluster was never asked.
type countingPlans struct {
	engine.Plugins
	mu sync.Mutex
	n  map[string]int
	// declared sets Command.min_approvals of the named commands in the
	// manifests the engine reads, as a plugin's manifest would declare it.
	declared map[string]int32
}

func (p *countingPlans) Manifests(ctx context.Context) ([]*lifecyclev1.Manifest, error) {
	mans, err := p.Plugins.Manifests(ctx)
	if err != nil || len(p.declared) == 0 {
		return mans, err
	}
	out := make([]*lifecyclev1.Manifest, 0, len(mans))
	for _, m := range mans {
		m = proto.Clone(m).(*lifecyclev1.Manifest)
		for _, c := range m.GetCommands() {
			if n, ok := p.declared[c.GetName()]; ok {
				c.MinApprovals = n
			}
		}
		out = append(out, m)
	}
	return out, nil
}

func (p *countingPlans) Plan(ctx context.Context, name string, req *lifecyclev1.OperationRequest) (*lifecyclev1.OperationPlan, error) {
	p.mu.Lock()
	p.n[req.GetCluster().GetName()]++
	p.mu.Unlock()
	return p.Plugins.Plan(ctx, name, req)
}

// countingCreds counts how often credentials are read.
type countingCreds struct {
	mu sync.Mutex
	n  int
}

func (c *countingCreds) Resolve(ctx context.Context, cl *config.Cluster) (*credentials.Credentials, error) {
	c.mu.Lock()
	c.n++
	c.mu.Unlock()
	return credentials.FileCredentials{}.Resolve(ctx, cl)
}

func (c *countingCreds) count() int { c.mu.Lock(); defer c.mu.Unlock(); return c.n }

const testConfig = `
data_dir: %s
clusters:
  - name: staging
    environment: staging
    channels: [stg]
    endpoints: [127.0.0.1]
    nodes: [{name: cp-1, address: 127.0.0.1, role: controlplane, host: pve1}]
    credentials: {source: files, talosconfig: "file:%s"}
  - name: production
    environment: production
    channels: [prd]
    endpoints: [127.0.0.2]
    nodes: [{name: cp-1, address: 127.0.0.2, role: controlplane, host: pve1}]
    credentials: {source: files, talosconfig: "file:%s"}
policy:
  staging:
    operators: [alice, bob, carol]
  production:
    approvers: [bob, dave]
    operators: [alice, bob]
    viewers: [carol]
    expiry: 30m
`

func newEnv(t *testing.T) *env { return newEnvConfig(t, testConfig) }

// newEnvConfig starts an engine on cfgText, whose three %s are the data dir
// and the talosconfig path twice.
func newEnvConfig(t *testing.T, cfgText string, opts ...func(*env)) *env {
	t.Helper()
	dir := t.TempDir()
	tc := filepath.Join(dir, "talosconfig")
	if err := os.WriteFile(tc, []byte("context: test\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Parse([]byte(fmt.Sprintf(cfgText, dir, tc, tc)))
	if err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, cfg: cfg, sink: newRecSink(), clock: &fakeClock{t: time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)}, dbPath: filepath.Join(dir, "talosbot.db"), creds: &countingCreds{},
		plans: &countingPlans{n: map[string]int{}}}
	for _, o := range opts {
		o(e)
	}
	e.open()
	return e
}

func (e *env) open() {
	t := e.t
	var err error
	e.store, err = state.Open(e.dbPath, state.Options{Clock: e.clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	e.mgr, err = host.New(host.Options{Executable: pluginBin, ExecutableSHA256: pluginSHA256, BuiltIn: []string{"eng"}})
	if err != nil {
		t.Fatal(err)
	}
	e.plans.Plugins = e.mgr
	var sink engine.Sink = e.sink
	if e.also != nil {
		sink = teeSink{e.sink, e.also}
	}
	e.eng, err = bot.New(context.Background(), engine.Options{Config: e.cfg, Store: e.store, Plugins: e.plans,
		Credentials: e.creds, Policy: approvals.New(e.cfg), Sink: sink, Clock: e.clock.Now, Hooks: e.hooks})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.close)
}

func (e *env) close() {
	if e.eng != nil {
		e.eng.Close()
		e.mgr.Close()
		_ = e.store.Close()
		e.eng = nil
	}
}

func (e *env) submit(user, channel, text string) (string, error) {
	return e.eng.Submit(context.Background(), engine.Origin{User: user, Channel: channel}, text)
}

func (e *env) await(id string, want state.OpState) *state.Operation {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	op, err := e.eng.Await(ctx, id, func(o *state.Operation) bool { return o.State == want })
	if err != nil {
		e.t.Fatalf("waiting for %s to be %s: %v (op: %+v)", id, want, err, op)
	}
	return op
}

// promote runs the same roll on staging first (R6).
func (e *env) promote(target string) {
	e.t.Helper()
	id, err := e.submit("alice", "stg", "/talos roll "+target)
	if err != nil {
		e.t.Fatal(err)
	}
	e.await(id, state.StateSucceeded)
}

func (e *env) auditActions(id string) []string {
	recs, err := e.store.QueryAudit(context.Background(), state.AuditQuery{OpID: id, Limit: 1000})
	if err != nil {
		e.t.Fatal(err)
	}
	var out []string
	for i := len(recs) - 1; i >= 0; i-- {
		out = append(out, recs[i].Action+"/"+recs[i].Actor)
	}
	return out
}

func (e *env) counts() (ops, audit int) {
	e.t.Helper()
	_ = e.store.View(context.Background(), func(tx *state.Tx) error {
		all, err := tx.Operations(state.OpFilter{})
		ops = len(all)
		return err
	})
	rep, err := e.store.VerifyAudit(context.Background())
	if err != nil {
		e.t.Fatal(err)
	}
	return ops, rep.Records
}
