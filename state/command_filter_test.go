package state

import (
	"context"
	"testing"
)

func TestQueryAuditByCommand(t *testing.T) {
	s, _, _ := openTest(t)
	ctx := context.Background()
	for i, cmd := range []string{"upgrade talos", "health", "upgrade talos", "snapshot", "upgrade k8s"} {
		if _, err := s.AppendAudit(ctx, AuditEvent{Actor: "alice", Action: "requested", Cluster: "staging", Command: cmd, Result: "ok", OpID: string(rune('a' + i))}); err != nil {
			t.Fatal(err)
		}
	}
	recs, err := s.QueryAudit(ctx, AuditQuery{Command: "upgrade talos"})
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 2 || recs[0].OpID != "c" || recs[1].OpID != "a" {
		t.Fatalf("got %+v, want ops c, a (newest first)", recs)
	}
	if recs, _ := s.QueryAudit(ctx, AuditQuery{Command: "upgrade k8s", Cluster: "production"}); len(recs) != 0 {
		t.Fatalf("filters must intersect: %+v", recs)
	}
}
