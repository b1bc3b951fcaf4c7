// Package enginetest holds the test doubles the engine's own tests
// (bot/engine) and the bot's command tests (bot) both drive an engine
// with: a sink that records what the engine says and waits on it, a clock
// tests move, a sink that tees to two, a plugin host wrapper that counts
// plans, a credential source that counts reads, and the build of the test
// plugin. It lives under bot/engine (as httptest under net/http) so that
// no package below the bot imports the engine.
package enginetest

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/talosbot/talosbot/bot/credentials"
	"github.com/talosbot/talosbot/bot/engine"
	"github.com/talosbot/talosbot/config"
	lifecyclev1 "github.com/talosbot/talosbot/plugins/sdk/proto/lifecycle/v1"
	"github.com/talosbot/talosbot/state"
)

// Plugin is the engine tests' plugin, built once per test binary by Main.
var Plugin struct {
	// Bin is the executable, launched as a built-in; SHA256 its sum (the
	// host starts no built-in without one).
	Bin, SHA256 string
}

// Main builds the plugin package pkg (a path relative to the test's
// package, e.g. "./testdata/engineplugin"), runs the tests and exits.
func Main(m *testing.M, pkg string) {
	dir, err := os.MkdirTemp("", "engineplugin")
	if err != nil {
		panic(err)
	}
	Plugin.Bin = filepath.Join(dir, "engineplugin")
	out, err := exec.Command("go", "build", "-o", Plugin.Bin, pkg).CombinedOutput()
	if err != nil {
		fmt.Fprintf(os.Stderr, "build engineplugin: %v\n%s", err, out)
		os.Exit(1)
	}
	raw, err := os.ReadFile(Plugin.Bin)
	if err != nil {
		panic(err)
	}
	sum := sha256.Sum256(raw)
	Plugin.SHA256 = hex.EncodeToString(sum[:])
	code := m.Run()
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

// RecSink records everything the engine says.
type RecSink struct {
	Mu      sync.Mutex
	Replies []string
	Threads []string
	Buttons map[string][]engine.Button // op id → latest buttons
	changed chan struct{}
}

// NewRecSink returns an empty RecSink.
func NewRecSink() *RecSink {
	return &RecSink{Buttons: map[string][]engine.Button{}, changed: make(chan struct{})}
}

func (s *RecSink) bump() { close(s.changed); s.changed = make(chan struct{}) }

// Reply implements engine.Sink.
func (s *RecSink) Reply(_ context.Context, _ engine.Origin, text string) {
	s.Mu.Lock()
	defer s.Mu.Unlock()
	s.Replies = append(s.Replies, text)
	s.bump()
}

// ReplyButtons implements engine.Sink; the buttons are kept under "reply".
func (s *RecSink) ReplyButtons(ctx context.Context, to engine.Origin, text string, buttons []engine.Button) {
	s.Mu.Lock()
	s.Buttons["reply"] = buttons
	s.Mu.Unlock()
	s.Reply(ctx, to, text)
}

// Operation implements engine.Sink.
func (s *RecSink) Operation(_ context.Context, u engine.Update) {
	s.Mu.Lock()
	defer s.Mu.Unlock()
	if u.Buttons != nil {
		s.Buttons[u.Op.ID] = u.Buttons
	}
	s.bump()
}

// Thread implements engine.Sink.
func (s *RecSink) Thread(_ context.Context, _ *state.Operation, text string) {
	s.Mu.Lock()
	defer s.Mu.Unlock()
	s.Threads = append(s.Threads, text)
	s.bump()
}

// Button waits for the operation's message to carry the button (other than
// the ids in not) and returns its id: the engine stores a state before the
// renderer's update reaches the sink.
func (s *RecSink) Button(t *testing.T, op, label string, not ...string) string {
	t.Helper()
	deadline := time.After(60 * time.Second)
	for {
		s.Mu.Lock()
		ch := s.changed
		have := s.Buttons[op]
		s.Mu.Unlock()
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

// WaitReply waits for a reply containing want.
func (s *RecSink) WaitReply(t *testing.T, want string) string {
	t.Helper()
	deadline := time.After(60 * time.Second)
	for {
		s.Mu.Lock()
		ch := s.changed
		for _, r := range s.Replies {
			if strings.Contains(r, want) {
				s.Mu.Unlock()
				return r
			}
		}
		got := append([]string(nil), s.Replies...)
		s.Mu.Unlock()
		select {
		case <-ch:
		case <-deadline:
			t.Fatalf("no reply containing %q; replies: %q", want, got)
		}
	}
}

// ReplyCount is how many replies were made.
func (s *RecSink) ReplyCount() int {
	s.Mu.Lock()
	defer s.Mu.Unlock()
	return len(s.Replies)
}

// LastReply is the newest reply.
func (s *RecSink) LastReply() string {
	s.Mu.Lock()
	defer s.Mu.Unlock()
	return s.Replies[len(s.Replies)-1]
}

// Clock is a clock tests move.
type Clock struct {
	mu sync.Mutex
	t  time.Time
}

// NewClock returns a Clock at t.
func NewClock(t time.Time) *Clock { return &Clock{t: t} }

// Now is the clock's time.
func (c *Clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }

// Add moves the clock by d.
func (c *Clock) Add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// TeeSink says everything to both sinks.
type TeeSink struct{ A, B engine.Sink }

// Reply implements engine.Sink.
func (s TeeSink) Reply(ctx context.Context, to engine.Origin, text string) {
	s.A.Reply(ctx, to, text)
	s.B.Reply(ctx, to, text)
}

// ReplyButtons implements engine.Sink.
func (s TeeSink) ReplyButtons(ctx context.Context, to engine.Origin, text string, buttons []engine.Button) {
	s.A.ReplyButtons(ctx, to, text, buttons)
	s.B.ReplyButtons(ctx, to, text, buttons)
}

// Operation implements engine.Sink.
func (s TeeSink) Operation(ctx context.Context, u engine.Update) {
	s.A.Operation(ctx, u)
	s.B.Operation(ctx, u)
}

// Thread implements engine.Sink.
func (s TeeSink) Thread(ctx context.Context, op *state.Operation, text string) {
	s.A.Thread(ctx, op, text)
	s.B.Thread(ctx, op, text)
}

// CountingPlans passes every call to the plugin host and counts the Plans
// per cluster, so a test can tell that a cluster was never asked.
type CountingPlans struct {
	engine.Plugins
	mu sync.Mutex
	n  map[string]int
	// Declared sets Command.min_approvals of the named commands in the
	// manifests the engine reads, as a plugin's manifest would declare it.
	Declared map[string]int32
	// BeforePlan, when set, runs before each plan is passed on (a test
	// holds a plan there to act while it is under way).
	BeforePlan func(req *lifecyclev1.OperationRequest)
}

// Manifests implements engine.Plugins.
func (p *CountingPlans) Manifests(ctx context.Context) ([]*lifecyclev1.Manifest, error) {
	mans, err := p.Plugins.Manifests(ctx)
	if err != nil || len(p.Declared) == 0 {
		return mans, err
	}
	out := make([]*lifecyclev1.Manifest, 0, len(mans))
	for _, m := range mans {
		m = proto.Clone(m).(*lifecyclev1.Manifest)
		for _, c := range m.GetCommands() {
			if n, ok := p.Declared[c.GetName()]; ok {
				c.MinApprovals = n
			}
		}
		out = append(out, m)
	}
	return out, nil
}

// Plan implements engine.Plugins, counting the call.
func (p *CountingPlans) Plan(ctx context.Context, name string, req *lifecyclev1.OperationRequest) (*lifecyclev1.OperationPlan, error) {
	p.mu.Lock()
	if p.n == nil {
		p.n = map[string]int{}
	}
	p.n[req.GetCluster().GetName()]++
	before := p.BeforePlan
	p.mu.Unlock()
	if before != nil {
		before(req)
	}
	return p.Plugins.Plan(ctx, name, req)
}

// Count is how many plans cluster was asked for.
func (p *CountingPlans) Count(cluster string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.n[cluster]
}

// CountingCreds reads credentials from files and counts the reads.
type CountingCreds struct {
	mu sync.Mutex
	n  int
}

// Resolve implements engine.CredentialSource.
func (c *CountingCreds) Resolve(ctx context.Context, cl *config.Cluster) (*credentials.Credentials, error) {
	c.mu.Lock()
	c.n++
	c.mu.Unlock()
	return credentials.FileCredentials{}.Resolve(ctx, cl)
}

// Count is how many reads were made.
func (c *CountingCreds) Count() int { c.mu.Lock(); defer c.mu.Unlock(); return c.n }
