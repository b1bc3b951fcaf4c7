package engine_test

import (
	"context"
	"fmt"
	"github.com/talosbot/talosbot/approvals"
	"github.com/talosbot/talosbot/bot"
	"github.com/talosbot/talosbot/bot/engine"
	"github.com/talosbot/talosbot/bot/engine/enginetest"
	"github.com/talosbot/talosbot/config"
	"github.com/talosbot/talosbot/plugins/host"
	"github.com/talosbot/talosbot/state"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// The test doubles are package enginetest's, shared with the other
// package that drives an engine (bot and bot/engine).
type (
	recSink       = enginetest.RecSink
	fakeClock     = enginetest.Clock
	countingPlans = enginetest.CountingPlans
	countingCreds = enginetest.CountingCreds
)

func TestMain(m *testing.M) { enginetest.Main(m, "./testdata/engineplugin") }

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
	e := &env{t: t, cfg: cfg, sink: enginetest.NewRecSink(), clock: enginetest.NewClock(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)), dbPath: filepath.Join(dir, "talosbot.db"), creds: &countingCreds{},
		plans: &countingPlans{}}
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
	e.mgr, err = host.New(host.Options{Executable: enginetest.Plugin.Bin, ExecutableSHA256: enginetest.Plugin.SHA256, BuiltIn: []string{"eng"}})
	if err != nil {
		t.Fatal(err)
	}
	e.plans.Plugins = e.mgr
	var sink engine.Sink = e.sink
	if e.also != nil {
		sink = enginetest.TeeSink{A: e.sink, B: e.also}
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
