package engine_test

import (
	"context"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/talosbot/talosbot/bot/credentials"
	"github.com/talosbot/talosbot/bot/engine"
	"github.com/talosbot/talosbot/bot/grammar"
	"github.com/talosbot/talosbot/config"
	lifecyclev1 "github.com/talosbot/talosbot/plugins/sdk/proto/lifecycle/v1"
	"github.com/talosbot/talosbot/state"
)

// The stand-ins below are this package's unit-test doubles: the engine's
// behaviour with real plugins, policy and store is tested in package bot.

type onePlugin struct{}

func (onePlugin) Manifests(context.Context) ([]*lifecyclev1.Manifest, error) {
	return []*lifecyclev1.Manifest{{Name: "p", Commands: []*lifecyclev1.Command{{Name: "hello", Effect: lifecyclev1.Effect_EFFECT_READ_ONLY}}}}, nil
}

func (onePlugin) Plan(context.Context, string, *lifecyclev1.OperationRequest) (*lifecyclev1.OperationPlan, error) {
	return &lifecyclev1.OperationPlan{Summary: "hello"}, nil
}

func (onePlugin) Run(context.Context, string, *lifecyclev1.OperationRequest, func(*lifecyclev1.Progress) error) (*lifecyclev1.Result, error) {
	return &lifecyclev1.Result{Ok: true}, nil
}

type noCreds struct{}

func (noCreds) Resolve(context.Context, *config.Cluster) (*credentials.Credentials, error) {
	return &credentials.Credentials{}, nil
}

type allowAll struct{}

func (allowAll) Authorize(context.Context, engine.PolicyRequest) error { return nil }
func (allowAll) RequiredApprovals(*state.Operation, int) int           { return 0 }
func (allowAll) CanApprove(*state.Operation, string) error             { return nil }
func (allowAll) Expiry(*state.Operation) time.Duration                 { return 0 }
func (allowAll) Promotion(*state.Operation, engine.StagingLookup, time.Time) ([]string, error) {
	return nil, nil
}

type replies struct {
	mu  sync.Mutex
	got []string
}

func (r *replies) Reply(_ context.Context, _ engine.Origin, text string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.got = append(r.got, text)
}
func (r *replies) ReplyButtons(ctx context.Context, to engine.Origin, text string, _ []engine.Button) {
	r.Reply(ctx, to, text)
}
func (r *replies) Operation(context.Context, engine.Update)         {}
func (r *replies) Thread(context.Context, *state.Operation, string) {}

// ownCommands is an engine.Commands that records what it was asked to serve.
type ownCommands struct {
	served []string
}

func (c *ownCommands) Specs() []grammar.CommandSpec {
	return []grammar.CommandSpec{{Command: &lifecyclev1.Command{Name: "ping", Effect: lifecyclev1.Effect_EFFECT_READ_ONLY,
		Args: []*lifecyclev1.Arg{{Name: "what"}}}}}
}

func (c *ownCommands) Serve(_ context.Context, from engine.Origin, inv *grammar.Invocation) error {
	c.served = append(c.served, from.User+" "+inv.Spec.Name+" "+inv.Args["what"])
	return nil
}

func newEngine(t *testing.T, own engine.Commands) (*engine.Engine, *replies, *state.Store) {
	t.Helper()
	return newEngineWith(t, own, allowAll{})
}

func newEngineWith(t *testing.T, own engine.Commands, policy engine.Policy) (*engine.Engine, *replies, *state.Store) {
	t.Helper()
	cfg, err := config.Parse([]byte(`
clusters:
  - name: staging
    environment: staging
    channels: [stg]
    endpoints: [127.0.0.1]
    nodes: [{name: cp-1, address: 127.0.0.1, role: controlplane, host: pve1}]
    credentials: {source: files, talosconfig: file:/nonexistent}
policy:
  staging: {operators: ["*"]}
`))
	if err != nil {
		t.Fatal(err)
	}
	st, err := state.Open(filepath.Join(t.TempDir(), "db"), state.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	sink := &replies{}
	e, err := engine.New(context.Background(), engine.Options{Config: cfg, Store: st, Plugins: onePlugin{}, Credentials: noCreds{},
		Policy: policy, Sink: sink, Commands: own})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	return e, sink, st
}

// The engine parses the bot's own commands with the plugin commands, in one
// grammar, and hands them to Commands (the invocation only); they never become
// operations.
func TestOwnCommandsAreServedThroughCommands(t *testing.T) {
	own := &ownCommands{}
	e, _, st := newEngine(t, own)
	id, err := e.Submit(context.Background(), engine.Origin{User: "alice", Channel: "stg"}, "/talos ping pong")
	if err != nil || id != "" {
		t.Fatalf("Submit = %q, %v; want a bot command (no operation)", id, err)
	}
	if strings.Join(own.served, ";") != "alice ping pong" {
		t.Fatalf("served %v; want alice's ping pong", own.served)
	}
	if _, ok := e.Grammar().Lookup("hello"); !ok {
		t.Fatal("the plugin command is missing from the grammar")
	}
	ops := 0
	_ = st.View(context.Background(), func(tx *state.Tx) error {
		all, err := tx.Operations(state.OpFilter{})
		ops = len(all)
		return err
	})
	if ops != 0 {
		t.Fatalf("%d operations stored for a bot command", ops)
	}
	// The catalogue lists both, the bot's own commands first.
	cat, err := engine.Catalogue(context.Background(), onePlugin{}, own)
	if err != nil || len(cat) != 2 || cat[0].Name != "ping" || cat[0].Operation || cat[1].Name != "hello" || !cat[1].Operation {
		t.Fatalf("catalogue %+v, %v", cat, err)
	}
}

// Without Commands the engine knows only the plugins' commands.
func TestEngineWithoutCommandsKnowsOnlyPlugins(t *testing.T) {
	e, sink, _ := newEngine(t, nil)
	if _, err := e.Submit(context.Background(), engine.Origin{User: "alice", Channel: "stg"}, "/talos ping"); err == nil {
		t.Fatal("an unknown command was accepted")
	}
	if len(sink.got) != 1 || !strings.Contains(sink.got[0], `unknown command "ping"`) {
		t.Fatalf("replies %q", sink.got)
	}
}
