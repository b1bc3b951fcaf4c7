package engine_test

import (
	"context"
	"errors"
	"github.com/talosbot/talosbot/bot/chat"
	"github.com/talosbot/talosbot/bot/engine"
	"github.com/talosbot/talosbot/state"
	"strings"
	"testing"
)

// TestHandleRefusalAuditsAndAnswers: input an adapter refused (here a console
// token naming another user, a replay with no channel, and a stale button) is
// audited with the credential's user, answered where it came from when a
// channel is known, and changes nothing else.
func TestHandleRefusalAuditsAndAnswers(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	opsBefore, auditBefore := e.counts()
	for _, r := range []chat.Refusal{
		{User: "alice", Channel: "prd", What: "identity", Reason: "the console token of alice cannot act as \"bob\"", Detail: map[string]string{"claimed_user": "bob", "what": "overridden?"}},
		{User: "500000000000000001", What: "replay", Reason: "interaction 42 was already handled", Detail: map[string]string{"via": "discord"}},
		{User: "dave", Channel: "stg", What: "action", Reason: "this button is unknown or no longer valid; run the command again"},
	} {
		var ae *engine.ActionError
		if err := e.eng.HandleRefusal(ctx, r); !errors.As(err, &ae) || ae.Msg != r.Reason {
			t.Fatalf("HandleRefusal(%s) = %v, want the reason as an ActionError", r.What, err)
		}
	}
	ops, audit := e.counts()
	if ops != opsBefore || audit != auditBefore+3 {
		t.Fatalf("ops %d→%d, audit %d→%d; want no operation and 3 records", opsBefore, ops, auditBefore, audit)
	}
	recs, err := e.store.QueryAudit(ctx, state.AuditQuery{Result: "refused", Limit: 10})
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 3 {
		t.Fatalf("refused records %+v", recs)
	}
	act, replay, ident := recs[0], recs[1], recs[2] // newest first
	if ident.Actor != "alice" || ident.Action != "request refused" || ident.Detail["what"] != "identity" || ident.Detail["claimed_user"] != "bob" || ident.Detail["channel"] != "prd" {
		t.Errorf("identity record %+v", ident)
	}
	if replay.Actor != "500000000000000001" || replay.Detail["via"] != "discord" || replay.Detail["channel"] != "" {
		t.Errorf("replay record %+v", replay)
	}
	if act.Actor != "dave" || act.Action != "action refused" {
		t.Errorf("button record %+v (want the same action as an engine-refused click)", act)
	}
	// Answered in prd and stg; the replay had no channel to answer in.
	e.sink.WaitReply(t, "refused: the console token of alice cannot act as")
	e.sink.WaitReply(t, "refused: this button is unknown")
	e.sink.Mu.Lock()
	replies := append([]string(nil), e.sink.Replies...)
	e.sink.Mu.Unlock()
	for _, text := range replies {
		if strings.Contains(text, "already handled") {
			t.Errorf("a refusal without a channel was answered: %q", text)
		}
	}
}
