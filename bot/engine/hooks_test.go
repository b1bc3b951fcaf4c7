package engine_test

import (
	"context"
	"errors"
	"fmt"
	"github.com/talosbot/talosbot/bot/engine"
	"github.com/talosbot/talosbot/state"
	"slices"
	"strings"
	"sync"
	"testing"
)

// recHook records what the engine tells a RunHook.
type recHook struct {
	mu     sync.Mutex
	calls  []string
	refuse string // target whose run the hook refuses
}

func (h *recHook) add(s string) { h.mu.Lock(); h.calls = append(h.calls, s); h.mu.Unlock() }

func (h *recHook) RunStarting(_ context.Context, op *state.Operation) ([]string, error) {
	h.add("start " + op.ID + " " + string(op.State))
	if op.Args["target"] == h.refuse {
		return nil, errors.New("the hook refuses this run: fix X")
	}
	return []string{"hook started " + op.ID}, nil
}

func (h *recHook) RunProgress(_ context.Context, op *state.Operation) { h.add("progress " + op.ID) }

func (h *recHook) RunEnded(_ context.Context, op *state.Operation, out engine.RunOutput) []string {
	h.add(fmt.Sprintf("end %s %s %v", op.ID, op.State, out.Declared))
	return []string{"hook ended " + op.ID}
}

func (h *recHook) of(id string) []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []string
	for _, c := range h.calls {
		if strings.Contains(c, " "+id) {
			if strings.HasPrefix(c, "progress") {
				if len(out) > 0 && out[len(out)-1] == "progress" {
					continue
				}
				c = "progress"
			}
			out = append(out, c)
		}
	}
	return out
}

// TestRunHooks: hooks hear a disruptive run's start, progress and end; what
// they return lands in the thread and the result; declared values reach
// them only from a succeeded run; a hook can refuse a run before the plugin
// runs; read-only and never-started operations do not reach them.
func TestRunHooks(t *testing.T) {
	h := &recHook{refuse: "v9"}
	e := newEnvWithHooks(t, h)
	id, err := e.submit("alice", "stg", "/talos roll v2 staging")
	if err != nil {
		t.Fatal(err)
	}
	e.await(id, state.StateSucceeded)
	waitFor(t, "the hook's end lines", func() bool {
		o, _ := e.eng.Operation(context.Background(), id)
		return strings.Contains(o.Result, "hook ended "+id)
	})
	if got := strings.Join(h.of(id), " | "); got != "start "+id+" running | progress | end "+id+" succeeded map[talos_version:v2]" {
		t.Fatalf("calls: %s", got)
	}
	// The thread is posted by the renderer after the result is stored:
	// wait for it rather than read it once.
	waitFor(t, "the hook's lines in the thread", func() bool {
		e.sink.Mu.Lock()
		threads := strings.Join(e.sink.Threads, "\n")
		e.sink.Mu.Unlock()
		return strings.Contains(threads, "hook started "+id) && strings.Contains(threads, "hook ended "+id)
	})

	id, _ = e.submit("alice", "stg", "/talos roll v3 staging --mode fail")
	e.await(id, state.StateFailed)
	waitFor(t, "the end of the failed run", func() bool { return len(h.of(id)) > 0 && strings.HasPrefix(h.of(id)[len(h.of(id))-1], "end") })
	if last := h.of(id)[len(h.of(id))-1]; last != "end "+id+" failed map[]" {
		t.Fatalf("a failed run passed declared values on: %s", last)
	}

	id, _ = e.submit("alice", "stg", "/talos roll v9 staging")
	op := e.await(id, state.StateRefused)
	// The state says refused; no redundant "refused" flag is stored beside it.
	if !strings.Contains(op.Error, "the hook refuses this run: fix X") || slices.Contains(op.Flags, "refused") {
		t.Fatalf("refused run: %+v", op)
	}
	for _, c := range h.of(id) {
		if strings.HasPrefix(c, "progress") {
			t.Fatalf("the plugin ran after the hook refused: %v", h.of(id))
		}
	}

	id, _ = e.submit("alice", "stg", "/talos probe staging")
	e.await(id, state.StateSucceeded)
	if got := h.of(id); len(got) != 0 {
		t.Fatalf("a read-only operation reached the hook: %v", got)
	}
	// Production waits for approval; cancelled before it ran, it never started.
	e.promote("v4")
	id, _ = e.submit("alice", "prd", "/talos roll v4 production")
	e.await(id, state.StateAwaitingApproval)
	if err := e.eng.Cancel(context.Background(), engine.Origin{User: "alice", Channel: "prd"}, id); err != nil {
		t.Fatal(err)
	}
	e.await(id, state.StateCancelled)
	if got := h.of(id); len(got) != 0 {
		t.Fatalf("an operation that never ran reached the hook: %v", got)
	}
}

func newEnvWithHooks(t *testing.T, hooks ...engine.RunHook) *env {
	t.Helper()
	e := newEnv(t)
	e.close()
	e.hooks = hooks
	e.open()
	return e
}
