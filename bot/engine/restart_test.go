package engine_test

import (
	"context"
	"github.com/talosbot/talosbot/bot/engine"
	"github.com/talosbot/talosbot/state"
	"strings"
	"testing"
	"time"
)

// TestRestartRepostsAwaitingApproval: an operation awaiting its second
// approval when the bot stops is posted again at start-up, with the
// approval already given and fresh buttons; both the new buttons and those
// minted before the restart approve through the same checks (a duplicate
// is counted once), and the second approval runs it.
func TestRestartRepostsAwaitingApproval(t *testing.T) {
	for _, which := range []string{"new", "old"} {
		t.Run(which+" button", func(t *testing.T) {
			e := newEnv(t)
			ctx := context.Background()
			id, err := e.submit("alice", "prd", "/talos roll v2 --skip-staging")
			if err != nil {
				t.Fatal(err)
			}
			e.await(id, state.StateAwaitingApproval)
			old := e.sink.Button(t, id, "Approve")
			if err := e.eng.Act(ctx, engine.Origin{User: "bob", Channel: "prd", Click: true}, old); err != nil {
				t.Fatal(err)
			}
			e.close()
			e.open()
			if _, err := e.eng.Recover(ctx); err != nil {
				t.Fatal(err)
			}
			fresh := e.sink.Button(t, id, "Approve", old)
			e.sink.Mu.Lock()
			threads := strings.Join(e.sink.Threads, "\n")
			e.sink.Mu.Unlock()
			if !strings.Contains(threads, "talosbot restarted while this request awaited approval; it still does (1/2 — approved by bob)") ||
				!strings.Contains(threads, "/talos approve "+id) {
				t.Fatalf("no re-post line in the thread:\n%s", threads)
			}
			// bob's approval survived the restart: his click is a duplicate.
			if err := e.eng.Act(ctx, engine.Origin{User: "bob", Channel: "prd", Click: true}, fresh); err != nil {
				t.Fatal(err)
			}
			e.sink.WaitReply(t, "you already approved "+id)
			click := fresh
			if which == "old" {
				click = old
			}
			if err := e.eng.Act(ctx, engine.Origin{User: "dave", Channel: "prd", Click: true}, click); err != nil {
				t.Fatal(err)
			}
			e.await(id, state.StateSucceeded)
			if got := strings.Join(e.auditActions(id), " "); !strings.Contains(got, "approval/bob approval reposted/system approval/bob approval/dave approved/dave started/system succeeded/system") {
				t.Fatalf("audit = %s", got)
			}
		})
	}
}

// TestRestartExpiresLapsedApprovalRequest: a request whose expiry passed
// while the bot was stopped is marked expired at start-up (audited), not
// offered again, and its buttons refuse.
func TestRestartExpiresLapsedApprovalRequest(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	e.promote("v2")
	id, err := e.submit("alice", "prd", "/talos roll v2")
	if err != nil {
		t.Fatal(err)
	}
	e.await(id, state.StateAwaitingApproval)
	old := e.sink.Button(t, id, "Approve")
	e.close()
	e.clock.Add(31 * time.Minute)
	e.open()
	if _, err := e.eng.Recover(ctx); err != nil {
		t.Fatal(err)
	}
	op := e.await(id, state.StateExpired)
	if !strings.Contains(op.Result, "expired at 2026-11-30 12:30 UTC while talosbot was stopped") {
		t.Fatalf("result = %q", op.Result)
	}
	got := strings.Join(e.auditActions(id), " ")
	if !strings.HasSuffix(got, "approval requested/system expired/system") {
		t.Fatalf("audit = %s", got)
	}
	e.sink.Mu.Lock()
	buttons := e.sink.Buttons[id]
	e.sink.Mu.Unlock()
	if len(buttons) != 3 || buttons[0].ID != old {
		t.Fatalf("an expired request was offered again: %v", buttons)
	}
	if err := e.eng.Act(ctx, engine.Origin{User: "bob", Channel: "prd", Click: true}, old); err == nil || !strings.Contains(err.Error(), "expired; there is nothing to approve") {
		t.Fatalf("old button on an expired request: %v", err)
	}
}
