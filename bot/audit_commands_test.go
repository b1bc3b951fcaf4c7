package bot_test

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/talosbot/talosbot/bot/auditview"
	"github.com/talosbot/talosbot/bot/chat"
	"github.com/talosbot/talosbot/bot/engine"
	"github.com/talosbot/talosbot/state"
)

// seedAudit appends n records cycling through clusters, actors, commands and
// results, one minute apart, ending at the env's clock.
func seedAudit(t *testing.T, e *env, n int) {
	t.Helper()
	clusters := []string{"staging", "production"}
	actors := []string{"alice", "bob", "carol"}
	commands := []string{"upgrade talos", "health"}
	results := []string{"ok", "failed", "refused"}
	now := e.clock.Now()
	err := e.store.Update(context.Background(), func(tx *state.Tx) error {
		for i := 0; i < n; i++ {
			_, err := tx.Append(state.AuditEvent{Time: now.Add(time.Duration(i-n) * time.Minute), Cluster: clusters[i%2], Actor: actors[i%3],
				Action: "seeded", Command: commands[i%2], Result: results[i%3], OpID: fmt.Sprintf("op%d", i)})
			if err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

var seqCol = regexp.MustCompile(`(?m)^(\d+) +\d{4}-`)

// tableSeqs returns the seq column of a /talos audit reply.
func tableSeqs(reply string) []uint64 {
	var out []uint64
	for _, m := range seqCol.FindAllStringSubmatch(reply, -1) {
		v, _ := strconv.ParseUint(m[1], 10, 64)
		out = append(out, v)
	}
	return out
}

// auditReply runs a command as user and returns its reply.
func auditReply(t *testing.T, e *env, user, text string) (string, error) {
	t.Helper()
	before := e.sink.ReplyCount()
	_, err := e.submit(user, "stg", text)
	if e.sink.ReplyCount() != before+1 {
		t.Fatalf("%s: %d replies, want 1", text, e.sink.ReplyCount()-before)
	}
	return e.sink.LastReply(), err
}

func TestAuditCommandFiltersNewestFirstAndMorePages(t *testing.T) {
	e := newEnv(t)
	seedAudit(t, e, 60)
	ctx := context.Background()

	reply, err := auditReply(t, e, "alice", "/talos audit --cluster staging --limit 7")
	if err != nil {
		t.Fatal(err)
	}
	want := []uint64{59, 57, 55, 53, 51, 49, 47} // staging is every even i = odd seq
	if got := tableSeqs(reply); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("page 1 seqs %v, want %v\n%s", got, want, reply)
	}
	if !strings.Contains(reply, "seq") || !strings.Contains(reply, "--cluster staging") {
		t.Fatalf("reply lacks the header or the filter:\n%s", reply)
	}
	// "More" runs the next page as the clicking user.
	more := e.sink.Button(t, "reply", "More")
	before := e.sink.ReplyCount()
	if err := e.eng.Act(ctx, engine.Origin{User: "bob", Channel: "stg"}, more); err != nil {
		t.Fatal(err)
	}
	if e.sink.ReplyCount() != before+1 {
		t.Fatal("More produced no reply")
	}
	if got := tableSeqs(e.sink.LastReply()); fmt.Sprint(got) != fmt.Sprint([]uint64{45, 43, 41, 39, 37, 35, 33}) {
		t.Fatalf("page 2 seqs %v\n%s", got, e.sink.LastReply())
	}

	// Every filter, alone and combined, against the same trail.
	for _, c := range []struct {
		text string
		want []uint64
	}{
		{"/talos audit --user carol --limit 3", []uint64{60, 57, 54}},
		{`/talos audit --op "upgrade talos" --limit 3`, []uint64{59, 57, 55}},
		{"/talos audit --result refused --limit 3", []uint64{60, 57, 54}},
		{"/talos audit --op_id op7", []uint64{8}},
		{"/talos audit --action seeded --limit 2", []uint64{60, 59}},
		{"/talos audit --since 3m", []uint64{60, 59, 58}},      // times are now-1m … now-60m
		{"/talos audit --until 58m --limit 2", []uint64{3, 2}}, // at least 58 minutes old
		{"/talos audit --cluster production --user bob --result failed --limit 3", []uint64{56, 50, 44}},
	} {
		reply, err := auditReply(t, e, "alice", c.text)
		if err != nil {
			t.Fatalf("%s: %v", c.text, err)
		}
		if got := tableSeqs(reply); fmt.Sprint(got) != fmt.Sprint(c.want) {
			t.Errorf("%s: seqs %v, want %v\n%s", c.text, got, c.want, reply)
		}
	}
	if reply, _ := auditReply(t, e, "alice", "/talos audit --user nobody"); !strings.Contains(reply, "no audit records match") {
		t.Fatalf("empty result: %s", reply)
	}
	for _, bad := range []string{"/talos audit --limit 0", "/talos audit --limit 1000", "/talos audit --since yesterday", "/talos audit --cluster nowhere"} {
		if _, err := auditReply(t, e, "alice", bad); err == nil {
			t.Errorf("%s: accepted", bad)
		}
	}
}

func TestAuditCommandNeedsAReadRole(t *testing.T) {
	e := newEnv(t)
	seedAudit(t, e, 10)
	// mallory has no role anywhere.
	if reply, err := auditReply(t, e, "mallory", "/talos audit"); err == nil || !strings.Contains(reply, "refused") {
		t.Fatalf("mallory: %v %s", err, reply)
	}
	// dave approves production only: all clusters is refused with the fix,
	// production alone is allowed.
	reply, err := auditReply(t, e, "dave", "/talos audit")
	if err == nil || !strings.Contains(reply, "--cluster production") {
		t.Fatalf("dave, all clusters: %v %s", err, reply)
	}
	if reply, err := auditReply(t, e, "dave", "/talos audit --cluster production"); err != nil || len(tableSeqs(reply)) == 0 {
		t.Fatalf("dave, production: %v %s", err, reply)
	}
	// carol is a production viewer: reading is fine.
	if _, err := auditReply(t, e, "carol", "/talos audit --cluster production"); err != nil {
		t.Fatalf("viewer: %v", err)
	}
	// Refusals are audited.
	recs, err := e.store.QueryAudit(context.Background(), state.AuditQuery{Actor: "mallory", Result: "refused"})
	if err != nil || len(recs) != 1 || recs[0].Command != "audit" {
		t.Fatalf("refusal audit: %+v %v", recs, err)
	}
}

func TestOpShowsMaintenanceRecord(t *testing.T) {
	e := newEnv(t)
	e.promote("v2")
	id, err := e.submit("alice", "prd", "/talos roll v2")
	if err != nil {
		t.Fatal(err)
	}
	e.await(id, state.StateAwaitingApproval)
	ctx := context.Background()
	if err := e.eng.Act(ctx, engine.Origin{User: "bob"}, e.sink.Button(t, id, "Approve")); err != nil {
		t.Fatal(err)
	}
	op := e.await(id, state.StateSucceeded)

	reply, err := auditReply(t, e, "carol", "/talos op "+id)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"Maintenance record " + id, "roll · production (production)", "State: succeeded",
		"Requested by: alice", "Approved by: bob (", "Plan: roll to v2", "Plan digest: " + op.Digest, "Target: v2",
		"Snapshot: none taken", "Terraform plan: not recorded", "Git commit: not recorded",
		"Started: " + op.StartedAt.UTC().Format("2006-01-02 15:04:05"), "Ended: " + op.EndedAt.UTC().Format("2006-01-02 15:04:05"),
		"✅ first node — done: done", "✅ second node — done: done", "Validation: passed (1 of 1 checks)", "Audit: ",
	} {
		if !strings.Contains(reply, want) {
			t.Errorf("maintenance record lacks %q:\n%s", want, reply)
		}
	}
	if reply, err := auditReply(t, e, "alice", "/talos op nosuchop"); err == nil || !strings.Contains(reply, `no operation "nosuchop"`) {
		t.Fatalf("unknown op: %v %s", err, reply)
	}
	if reply, err := auditReply(t, e, "mallory", "/talos op "+id); err == nil || !strings.Contains(reply, "refused") {
		t.Fatalf("mallory reads a production record: %v %s", err, reply)
	}
}

// /talos audit head posts a head that `audit verify --expect-head` accepts,
// only to users with a role, and only for a chain that verifies.
func TestAuditHeadPostsAPinnableHead(t *testing.T) {
	e := newEnv(t)
	seedAudit(t, e, 3)
	reply, err := auditReply(t, e, "carol", "/talos audit head")
	if err != nil {
		t.Fatal(err)
	}
	rep, err := e.store.VerifyAudit(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(reply, fmt.Sprintf("record %d of %d, sha256 `%s`", rep.HeadSeq, rep.Records, rep.Head)) || !strings.Contains(reply, "--expect-head "+rep.Head) {
		t.Fatalf("reply: %s (head %+v)", reply, rep)
	}
	if _, err := e.store.VerifyAuditWith(context.Background(), state.VerifyOptions{ExpectHead: rep.Head}); err != nil {
		t.Fatalf("the posted head does not verify: %v", err)
	}
	if reply, err := auditReply(t, e, "mallory", "/talos audit head"); err == nil || !strings.Contains(reply, "mallory has no role") {
		t.Fatalf("stranger: %v %s", err, reply)
	}
}

// A long filter value is refused, quoted as a short prefix: an accepted one
// came back in full in the answer's header (a 60 KB --op gave a 60 KB
// reply; issue 29, defect 3, through the audit filters).
func TestAuditFilterValueIsBounded(t *testing.T) {
	e := newEnv(t)
	long := strings.Repeat("y", 60<<10)
	for _, k := range []string{"op", "action", "user", "result", "op_id", "cluster"} {
		reply, err := auditReply(t, e, "alice", "/talos audit --"+k+" "+long)
		if err == nil || len(reply) > 1024 || !strings.Contains(reply, k+` "`+strings.Repeat("y", chat.EchoRunes)+`"… is longer than`) {
			t.Fatalf("--%s with 60 KB: %v; the reply (%d bytes): %.300s", k, err, len(reply), reply)
		}
	}
	if _, err := auditReply(t, e, "alice", "/talos audit --op "+strings.Repeat("y", auditview.MaxFilterValue)); err != nil {
		t.Fatalf("a value of the maximum length: %v", err)
	}
}
