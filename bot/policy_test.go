package bot_test

import (
	"context"
	"github.com/talosbot/talosbot/state"
	"strings"
	"testing"
)

// TestFreezeReasonIsBounded: a 60 KB freeze reason (shown in every refusal
// and in /talos status while the freeze holds) is refused, and nothing is
// frozen or audited as frozen.
func TestFreezeReasonIsBounded(t *testing.T) {
	e := newEnv(t)
	_, err := e.submit("alice", "stg", `/talos freeze staging "`+strings.Repeat("x", 60<<10)+`"`)
	if err == nil || !strings.Contains(err.Error(), "at most 280 are kept") || len(err.Error()) > 200 {
		t.Fatalf("60 KB reason: %v", err)
	}
	if recs, _ := e.store.QueryAudit(context.Background(), state.AuditQuery{Action: "frozen", Cluster: "staging"}); len(recs) != 0 {
		t.Fatalf("frozen with a 60 KB reason: %+v", recs)
	}
	if _, err := e.submit("alice", "stg", `/talos freeze staging "`+strings.Repeat("y", 280)+`"`); err != nil {
		t.Fatalf("280 characters: %v", err)
	}
}
