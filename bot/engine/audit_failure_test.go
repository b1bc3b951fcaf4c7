package engine_test

import (
	"bytes"
	"context"
	"errors"
	"github.com/talosbot/talosbot/approvals"
	"github.com/talosbot/talosbot/bot"
	"github.com/talosbot/talosbot/bot/engine"
	"github.com/talosbot/talosbot/bot/engine/enginetest"
	"github.com/talosbot/talosbot/plugins/host"
	"github.com/talosbot/talosbot/state"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"
)

// failObserver records AuditFailed calls.
type failObserver struct {
	mu     sync.Mutex
	failed []string
}

func (o *failObserver) Input(string, string) {}

func (o *failObserver) OperationEnded(*state.Operation) {}

func (o *failObserver) Approved(*state.Operation, time.Duration) {}

func (o *failObserver) AuditFailed(action string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.failed = append(o.failed, action)
}

func (o *failObserver) get() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]string(nil), o.failed...)
}

// syncBuffer is a bytes.Buffer safe for the logger's concurrent writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestAuditAppendFailureIsLoggedAndCounted runs the engine on a read-only
// store, where every audit append fails: a refused command and a refused
// button click are still refused, and each lost record is logged as an error
// and counted, instead of being dropped silently.
func TestAuditAppendFailureIsLoggedAndCounted(t *testing.T) {
	e := newEnv(t)
	e.close() // release the file so it can be opened read-only
	ro, err := state.Open(e.dbPath, state.Options{ReadOnly: true, Clock: e.clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	mgr, err := host.New(host.Options{Executable: enginetest.Plugin.Bin, ExecutableSHA256: enginetest.Plugin.SHA256, BuiltIn: []string{"eng"}})
	if err != nil {
		t.Fatal(err)
	}
	defer mgr.Close()
	obs := &failObserver{}
	var logs syncBuffer
	eng, err := bot.New(context.Background(), engine.Options{Config: e.cfg, Store: ro, Plugins: mgr, Credentials: e.creds,
		Policy: approvals.New(e.cfg), Sink: e.sink, Clock: e.clock.Now, Observer: obs,
		Logger: slog.New(slog.NewJSONHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()

	// carol is a viewer in production: refused by policy.
	if _, err := eng.Submit(context.Background(), engine.Origin{User: "carol", Channel: "prd"}, "/talos roll v2"); err == nil {
		t.Fatal("a viewer's disruptive command was not refused")
	}
	if got := obs.get(); len(got) != 1 || got[0] != "refused" {
		t.Fatalf("AuditFailed calls = %v, want [refused]", got)
	}
	err = eng.Act(context.Background(), engine.Origin{User: "carol", Channel: "prd"}, "forged-token")
	var ae *engine.ActionError
	if !errors.As(err, &ae) || !errors.Is(err, state.ErrReadOnly) {
		t.Fatalf("forged click: err = %v, want the refusal joined with the append failure", err)
	}
	if got := obs.get(); len(got) != 2 || got[1] != "action refused" {
		t.Fatalf("AuditFailed calls = %v, want [refused, action refused]", got)
	}
	out := logs.String()
	if strings.Count(out, `"msg":"audit append failed"`) != 2 || !strings.Contains(out, `"level":"ERROR"`) {
		t.Fatalf("log lacks the two audit failures:\n%s", out)
	}
}
