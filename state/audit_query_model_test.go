package state

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// QueryAudit answers exactly what a plain scan of the chain answers: the
// records matching every filter, Since/Until inclusive, Seq < BeforeSeq,
// newest first, at most Limit. Checked against that scan over seeded random
// queries on a chain whose fields repeat in different rhythms, so index
// intersections, time bounds on equal and missing instants, and paging
// meet every shape. (The audit trail is what `/talos audit` shows: a query
// that drops or invents a record hides or fakes history.)
func TestQueryAuditMatchesAPlainScan(t *testing.T) {
	s, clock, _ := openTest(t)
	var recs []AuditRecord
	for i := range 60 {
		if i%7 != 3 { // some records share an instant
			clock.Advance(time.Second)
		}
		r, err := s.AppendAudit(t.Context(), AuditEvent{
			Actor:   fmt.Sprintf("u%d", i%3),
			Cluster: fmt.Sprintf("c%d", i%4),
			Action:  []string{"op.run", "approval", "op.plan"}[i%5%3],
			Result:  []string{"ok", "refused"}[i%2],
			OpID:    fmt.Sprintf("op-%d", i/6),
			Command: []string{"upgrade talos", "snapshot"}[i/10%2],
		})
		if err != nil {
			t.Fatal(err)
		}
		recs = append(recs, r)
	}
	first, last := recs[0].Time, recs[len(recs)-1].Time
	rng := rand.New(rand.NewPCG(34, 1))
	pick := func(vals ...string) string { return vals[rng.IntN(len(vals))] }
	instant := func() time.Time {
		switch rng.IntN(4) {
		case 0:
			return time.Time{}
		case 1:
			return recs[rng.IntN(len(recs))].Time // a record's own instant (inclusive bound)
		case 2:
			return first.Add(time.Duration(rng.IntN(int(last.Sub(first)/time.Millisecond)+2000)-1000) * time.Millisecond)
		default:
			return recs[rng.IntN(len(recs))].Time.Add(time.Duration(rng.IntN(3)-1) * time.Nanosecond)
		}
	}
	for n := range 3000 {
		q := AuditQuery{
			Actor:   pick("", "", "u0", "u1", "u2", "nobody"),
			Cluster: pick("", "", "c0", "c1", "c3"),
			Action:  pick("", "", "op.run", "approval"),
			Result:  pick("", "", "ok", "refused"),
			OpID:    pick("", "", "", "op-2", "op-9"),
			Command: pick("", "", "upgrade talos", "snapshot"),
			Since:   instant(),
			Until:   instant(),
			Limit:   []int{0, 1, 2, 5, 100}[rng.IntN(5)],
		}
		if rng.IntN(3) == 0 {
			q.BeforeSeq = uint64(rng.IntN(len(recs) + 3))
		}
		got, err := s.QueryAudit(t.Context(), q)
		if err != nil {
			t.Fatal(err)
		}
		want := scanAudit(recs, q)
		if !slices.EqualFunc(got, want, func(a, b AuditRecord) bool { return a.Seq == b.Seq && a.Hash == b.Hash }) {
			t.Fatalf("query %d %+v:\n got seqs  %v\n want seqs %v", n, q, seqs(got), seqs(want))
		}
	}
}

func scanAudit(recs []AuditRecord, q AuditQuery) []AuditRecord {
	limit := q.Limit
	if limit <= 0 {
		limit = DefaultAuditLimit
	}
	var out []AuditRecord
	for i := len(recs) - 1; i >= 0 && len(out) < limit; i-- {
		r := recs[i]
		match := func(f, v string) bool { return f == "" || f == v }
		if !match(q.Actor, r.Actor) || !match(q.Cluster, r.Cluster) || !match(q.Action, r.Action) ||
			!match(q.Result, r.Result) || !match(q.OpID, r.OpID) || !match(q.Command, r.Command) {
			continue
		}
		if !q.Since.IsZero() && r.Time.Before(q.Since) || !q.Until.IsZero() && r.Time.After(q.Until) {
			continue
		}
		if q.BeforeSeq > 0 && r.Seq >= q.BeforeSeq {
			continue
		}
		out = append(out, r)
	}
	return out
}
