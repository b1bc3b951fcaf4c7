package bot_test

import (
	"context"
	"github.com/talosbot/talosbot/bot/chat"
	"github.com/talosbot/talosbot/state"
	"strings"
	"testing"
)

// TestTypedApproveTakesTheButtonsPath: `/talos approve ID` refuses what the
// Approve button refuses (the requester without allow_self_approval, a
// non-approver, an unknown id, a finished operation, a second approval by
// the same approver counted once), with the same audit records, and an
// approver's typed approval runs the operation.
func TestTypedApproveTakesTheButtonsPath(t *testing.T) {
	e := newEnv(t)
	id, err := e.submit("alice", "prd", "/talos roll v2 --skip-staging")
	if err != nil {
		t.Fatal(err)
	}
	e.await(id, state.StateAwaitingApproval)
	for _, tc := range []struct{ user, text, want string }{
		{"alice", "/talos approve " + id, "alice requested " + id + " and cannot approve it"},
		{"carol", "/talos approve " + id, "carol is not an approver for production"},
		{"bob", "/talos approve nosuchop", `no operation "nosuchop"`},
		{"bob", "/talos approve", "missing <id>"},
	} {
		if _, err := e.submit(tc.user, "prd", tc.text); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %q: got %v, want %q", tc.user, tc.text, err, tc.want)
		}
	}
	e.sink.WaitReply(t, "refused: carol is not an approver")
	if _, err := e.submit("bob", "prd", "/talos approve "+id); err != nil {
		t.Fatal(err)
	}
	// Skipping staging needs two approvals: bob's second is counted once.
	if _, err := e.submit("bob", "prd", "/talos approve "+id); err != nil {
		t.Fatal(err)
	}
	e.sink.WaitReply(t, "you already approved "+id+"; your approval is counted once")
	if op, _ := e.eng.Operation(context.Background(), id); op.State != state.StateAwaitingApproval {
		t.Fatalf("one approver approved twice and the operation is %s", op.State)
	}
	if _, err := e.submit("dave", "prd", "/talos approve "+id); err != nil {
		t.Fatal(err)
	}
	e.await(id, state.StateSucceeded)
	if _, err := e.submit("dave", "prd", "/talos approve "+id); err == nil || !strings.Contains(err.Error(), "succeeded; there is nothing to approve") {
		t.Fatalf("approve a finished operation: %v", err)
	}
	want := "requested/alice approval requested/system action refused/alice action refused/carol approval/bob approval/bob approval/dave approved/dave started/system succeeded/system action refused/dave"
	if got := strings.Join(e.auditActions(id), " "); got != want {
		t.Fatalf("audit = %s\nwant     %s", got, want)
	}
	recs, err := e.store.QueryAudit(context.Background(), state.AuditQuery{Actor: "bob", Action: "action refused"})
	if err != nil || len(recs) != 1 || recs[0].Detail["what"] != "approve" || !strings.Contains(recs[0].Detail["reason"], "nosuchop") {
		t.Fatalf("bob's refused approval of an unknown id is not audited as one: %+v %v", recs, err)
	}
}

// TestTypedDenyEndsTheRequest: `/talos deny ID` by a non-approver who did not
// request it is refused; by an approver it ends the operation as denied,
// and a deny of a finished operation is refused.
func TestTypedDenyEndsTheRequest(t *testing.T) {
	e := newEnv(t)
	e.promote("v2")
	id, err := e.submit("alice", "prd", "/talos roll v2")
	if err != nil {
		t.Fatal(err)
	}
	e.await(id, state.StateAwaitingApproval)
	if _, err := e.submit("carol", "prd", "/talos deny "+id); err == nil || !strings.Contains(err.Error(), "carol is not an approver") {
		t.Fatalf("non-approver deny: %v", err)
	}
	if _, err := e.submit("dave", "prd", "/talos deny nosuchop"); err == nil || !strings.Contains(err.Error(), `no operation "nosuchop"`) {
		t.Fatalf("unknown id: %v", err)
	}
	if _, err := e.submit("dave", "prd", "/talos deny "+id); err != nil {
		t.Fatal(err)
	}
	if op := e.await(id, state.StateDenied); op.Result != "denied by dave" {
		t.Fatalf("result = %q", op.Result)
	}
	if _, err := e.submit("bob", "prd", "/talos deny "+id); err == nil || !strings.Contains(err.Error(), "denied; there is nothing to deny") {
		t.Fatalf("deny a finished operation: %v", err)
	}
	if got := strings.Join(e.auditActions(id), " "); !strings.Contains(got, "approval requested/system action refused/carol denied/dave action refused/bob") {
		t.Fatalf("audit = %s", got)
	}
	// Both have a usage line in /talos help.
	if _, err := e.submit("carol", "prd", "/talos help"); err != nil {
		t.Fatal(err)
	}
	help := e.sink.WaitReply(t, "talosbot commands:")
	for _, want := range []string{"• `/talos approve <id>` — approve an operation awaiting approval", "• `/talos deny <id>` — deny an operation awaiting approval"} {
		if !strings.Contains(help, want) {
			t.Errorf("/talos help lacks %q:\n%s", want, help)
		}
	}
}

// TestIDCommandsEchoAShortPrefix: every command that takes an operation id
// answers an unknown one by quoting at most chat.EchoRunes runes of it, in
// the reply and in the audited refusal (issue 29, defect 3: a 60 KB echo).
// approve and deny quoted the whole id.
func TestIDCommandsEchoAShortPrefix(t *testing.T) {
	e := newEnv(t)
	long := strings.Repeat("x", 60<<10)
	want := `"` + strings.Repeat("x", chat.EchoRunes) + `"…`
	for _, cmd := range []string{"approve", "deny", "cancel", "pause", "resume", "abandon", "op"} {
		t.Run(cmd, func(t *testing.T) {
			_, _ = e.submit("bob", "prd", "/talos "+cmd+" "+cmd+long)
			got := e.sink.WaitReply(t, `"`+cmd+"xxx")
			if len(got) > 1024 || !strings.Contains(got, `"`+cmd+want[1+len(cmd):]) {
				t.Fatalf("the reply (%d bytes) is not a short prefix of the id: %.200s", len(got), got)
			}
		})
	}
	recs, err := e.store.QueryAudit(context.Background(), state.AuditQuery{Actor: "bob"})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range recs {
		for k, v := range r.Detail {
			if len(v) > 1024 {
				t.Errorf("audit record %s keeps %d bytes of input in %s", r.Action, len(v), k)
			}
		}
	}
}
