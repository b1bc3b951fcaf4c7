package auditapi_test

import (
	"context"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/talosbot/talosbot/bot/auditapi"
	"github.com/talosbot/talosbot/bot/auditview"
	"github.com/talosbot/talosbot/state"
)

const token = "audit-token"

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// The 10k-record trail: record i (1-based seq i) has these fields, so the
// expected result of any filter can be computed independently of the store.
var (
	clusters = []string{"production", "staging", "lab"}
	actors   = []string{"alice", "bob", "carol", "dave", "system"}
	actions  = []string{"requested", "approval", "started", "succeeded", "refused", "artifact", "failed"}
	results  = []string{"ok", "refused", "failed", "succeeded"}
	commands = []string{"upgrade talos", "health", "snapshot", "upgrade kubernetes"}
)

const n = 10000

func event(i int) state.AuditEvent {
	ev := state.AuditEvent{
		Time:    t0.Add(time.Duration(i) * time.Minute),
		Cluster: clusters[i%3], Actor: actors[i%5], Action: actions[i%7], Result: results[i%4], Command: commands[i%11%4],
		OpID:   fmt.Sprintf("op%04d", i/10),
		Detail: map[string]string{"n": strconv.Itoa(i), "note": `comma, "quote"` + "\nnewline"},
	}
	if i%13 == 0 {
		ev.Cluster = "" // events about no cluster
	}
	return ev
}

type fixture struct {
	store *state.Store
	srv   *httptest.Server
	now   time.Time
}

var (
	once     sync.Once
	shared   *fixture
	setupErr error
)

// trail builds the 10k-record store once for all tests of this package.
func trail(t testing.TB) *fixture {
	t.Helper()
	once.Do(func() {
		dir, err := osMkdirTemp()
		if err != nil {
			setupErr = err
			return
		}
		st, err := state.Open(filepath.Join(dir, "audit.db"), state.Options{})
		if err != nil {
			setupErr = err
			return
		}
		setupErr = st.Update(context.Background(), func(tx *state.Tx) error {
			for i := 1; i <= n; i++ {
				if _, err := tx.Append(event(i)); err != nil {
					return err
				}
			}
			return nil
		})
		now := t0.Add(n * time.Minute)
		shared = &fixture{store: st, now: now,
			srv: httptest.NewServer(auditapi.Handler(auditapi.Options{Store: st, Token: token, Clock: func() time.Time { return now }}))}
	})
	if setupErr != nil {
		t.Fatal(setupErr)
	}
	return shared
}

func (f *fixture) get(t *testing.T, query string, tok string) (*http.Response, []byte) {
	t.Helper()
	req, _ := http.NewRequest("GET", f.srv.URL+"/api/audit?"+query, nil)
	if tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var b strings.Builder
	buf := make([]byte, 32<<10)
	for {
		k, err := resp.Body.Read(buf)
		b.Write(buf[:k])
		if err != nil {
			break
		}
	}
	return resp, []byte(b.String())
}

func seqsJSON(t *testing.T, body []byte) []uint64 {
	t.Helper()
	var recs []state.AuditRecord
	if err := json.Unmarshal(body, &recs); err != nil {
		t.Fatalf("decode JSON: %v\n%.300s", err, body)
	}
	out := make([]uint64, len(recs))
	for i, r := range recs {
		out[i] = r.Seq
	}
	return out
}

// expect computes the newest-first seqs matching pred, up to limit.
func expect(limit int, pred func(i int, ev state.AuditEvent) bool) []uint64 {
	var out []uint64
	for i := n; i >= 1 && len(out) < limit; i-- {
		if pred(i, event(i)) {
			out = append(out, uint64(i))
		}
	}
	return out
}

func equalSeqs(a, b []uint64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestEveryFilterOver10kRecords(t *testing.T) {
	f := trail(t)
	since := f.now.Add(-7 * 24 * time.Hour)
	until := t0.Add(5000 * time.Minute)
	cases := []struct {
		query string
		limit int
		pred  func(i int, ev state.AuditEvent) bool
	}{
		{"", auditapi.DefaultLimit, func(int, state.AuditEvent) bool { return true }},
		{"cluster=staging&limit=500", 500, func(_ int, ev state.AuditEvent) bool { return ev.Cluster == "staging" }},
		{"user=carol&limit=300", 300, func(_ int, ev state.AuditEvent) bool { return ev.Actor == "carol" }},
		{"op=" + url.QueryEscape("upgrade talos") + "&limit=400", 400, func(_ int, ev state.AuditEvent) bool { return ev.Command == "upgrade talos" }},
		{"result=refused&limit=250", 250, func(_ int, ev state.AuditEvent) bool { return ev.Result == "refused" }},
		{"action=approval&limit=250", 250, func(_ int, ev state.AuditEvent) bool { return ev.Action == "approval" }},
		{"op_id=op0420&limit=50", 50, func(_ int, ev state.AuditEvent) bool { return ev.OpID == "op0420" }},
		{"since=7d&limit=100000", 100000, func(_ int, ev state.AuditEvent) bool { return !ev.Time.Before(since) }},
		{"until=" + until.Format(time.RFC3339) + "&limit=100000", 100000, func(_ int, ev state.AuditEvent) bool { return !ev.Time.After(until) }},
		{"since=2026-01-03&until=" + url.QueryEscape("2026-01-04T00:00:00Z") + "&limit=5000", 5000, func(_ int, ev state.AuditEvent) bool {
			return !ev.Time.Before(time.Date(2026, 1, 3, 0, 0, 0, 0, time.UTC)) && !ev.Time.After(time.Date(2026, 1, 4, 0, 0, 0, 0, time.UTC))
		}},
		{"before=5000&limit=10", 10, func(i int, _ state.AuditEvent) bool { return i < 5000 }},
		{"cluster=production&user=alice&result=ok&op=health&since=30d&limit=1000", 1000, func(_ int, ev state.AuditEvent) bool {
			return ev.Cluster == "production" && ev.Actor == "alice" && ev.Result == "ok" && ev.Command == "health" && !ev.Time.Before(f.now.Add(-30*24*time.Hour))
		}},
		{"cluster=nowhere", auditapi.DefaultLimit, func(_ int, ev state.AuditEvent) bool { return false }},
	}
	for _, c := range cases {
		resp, body := f.get(t, c.query, token)
		if resp.StatusCode != 200 {
			t.Fatalf("%s: status %d %s", c.query, resp.StatusCode, body)
		}
		got, want := seqsJSON(t, body), expect(c.limit, c.pred)
		if len(want) == 0 && c.query != "cluster=nowhere" {
			t.Fatalf("%s: test data selects nothing", c.query)
		}
		if !equalSeqs(got, want) {
			t.Errorf("%s: got %d records (first %v), want %d (first %v)", c.query, len(got), head(got), len(want), head(want))
		}
	}
}

func head(s []uint64) []uint64 { return s[:min(5, len(s))] }

func TestPagingWithNextBefore(t *testing.T) {
	f := trail(t)
	var all []uint64
	q := "user=bob&limit=700"
	for pages := 0; ; pages++ {
		if pages > 10 {
			t.Fatal("paging does not end")
		}
		resp, body := f.get(t, q, token)
		all = append(all, seqsJSON(t, body)...)
		next := resp.Header.Get("X-Next-Before")
		if next == "" {
			break
		}
		q = "user=bob&limit=700&before=" + next
	}
	if want := expect(n, func(_ int, ev state.AuditEvent) bool { return ev.Actor == "bob" }); !equalSeqs(all, want) {
		t.Fatalf("paged %d records, want %d", len(all), len(want))
	}
}

func TestCSVExportParsesBack(t *testing.T) {
	f := trail(t)
	resp, body := f.get(t, "format=csv&cluster=lab&limit=100000", token)
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/csv") {
		t.Fatalf("status %d type %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	rows, err := csv.NewReader(strings.NewReader(string(body))).ReadAll()
	if err != nil {
		t.Fatalf("CSV does not parse: %v", err)
	}
	if strings.Join(rows[0], ",") != strings.Join(auditview.CSVHeader(), ",") {
		t.Fatalf("header %v", rows[0])
	}
	want := expect(n, func(_ int, ev state.AuditEvent) bool { return ev.Cluster == "lab" })
	if len(rows)-1 != len(want) {
		t.Fatalf("%d rows, want %d", len(rows)-1, len(want))
	}
	col := map[string]int{}
	for i, h := range rows[0] {
		col[h] = i
	}
	recs, err := f.store.QueryAudit(context.Background(), state.AuditQuery{Cluster: "lab", Limit: n})
	if err != nil {
		t.Fatal(err)
	}
	for k, row := range rows[1:] {
		r := recs[k]
		seq, _ := strconv.ParseUint(row[col["seq"]], 10, 64)
		tm, err := time.Parse(time.RFC3339Nano, row[col["time"]])
		if err != nil || seq != r.Seq || !tm.Equal(r.Time) || row[col["actor"]] != r.Actor || row[col["action"]] != r.Action ||
			row[col["cluster"]] != r.Cluster || row[col["op_id"]] != r.OpID || row[col["command"]] != r.Command ||
			row[col["result"]] != r.Result || row[col["hash"]] != r.Hash || row[col["prev_hash"]] != r.PrevHash {
			t.Fatalf("row %d %v does not match record %+v", k, row, r)
		}
		if d := row[col["detail"]]; d != "n="+strconv.FormatUint(r.Seq, 10)+`;note=comma, "quote"`+"\nnewline" {
			t.Fatalf("row %d detail %q", k, d)
		}
	}
}

func TestAuthAndBadRequests(t *testing.T) {
	f := trail(t)
	for _, tok := range []string{"", "wrong", token + "x"} {
		if resp, _ := f.get(t, "", tok); resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("token %q: status %d, want 401", tok, resp.StatusCode)
		}
	}
	off := httptest.NewServer(auditapi.Handler(auditapi.Options{Store: f.store}))
	defer off.Close()
	resp, err := http.Get(off.URL + "/api/audit")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("empty configured token: status %d, want 401", resp.StatusCode)
	}
	for _, q := range []string{"format=xml", "limit=0", "limit=100001", "limit=x", "since=yesterday", "before=abc", "clusters=x"} {
		resp, body := f.get(t, q, token)
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(body), "error") {
			t.Errorf("%s: status %d %s, want 400 with an error", q, resp.StatusCode, body)
		}
	}
}

func TestLogPrunerDeletesOnlyOldLinesOnTicks(t *testing.T) {
	now := t0
	var mu sync.Mutex
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
	st, err := state.Open(filepath.Join(t.TempDir(), "logs.db"), state.Options{Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ctx := context.Background()
	appendLog := func(op, line string) {
		if err := st.Update(ctx, func(tx *state.Tx) error { return tx.AppendLog(op, line) }); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := st.AppendAudit(ctx, state.AuditEvent{Actor: "alice", Action: "requested", OpID: "old"}); err != nil {
		t.Fatal(err)
	}
	appendLog("old", "day 0")
	advance(24 * time.Hour)
	appendLog("mixed", "day 1")
	advance(24 * time.Hour)
	appendLog("mixed", "day 2")

	passes := make(chan [2]any, 10)
	p := &auditapi.LogPruner{Store: st, Retention: 36 * time.Hour, Now: clock,
		OnPrune: func(k int, err error) { passes <- [2]any{k, err} }}
	ticks := make(chan time.Time)
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- p.Run(runCtx, ticks) }()
	wait := func() (int, error) {
		select {
		case r := <-passes:
			err, _ := r[1].(error)
			return r[0].(int), err
		case <-time.After(10 * time.Second):
			t.Fatal("no prune pass")
		}
		return 0, nil
	}
	// First pass at start: now = day 2, cutoff day 0.5: "day 0" goes.
	if k, err := wait(); k != 1 || err != nil {
		t.Fatalf("first pass pruned %d (%v), want 1", k, err)
	}
	if l, _ := st.Logs(ctx, "old"); len(l) != 0 {
		t.Fatalf("old logs kept: %v", l)
	}
	if l, _ := st.Logs(ctx, "mixed"); len(l) != 2 {
		t.Fatalf("young logs pruned: %v", l)
	}
	// A tick with the clock moved a day: "day 1" goes, "day 2" stays.
	advance(24 * time.Hour)
	ticks <- now
	if k, err := wait(); k != 1 || err != nil {
		t.Fatalf("tick pass pruned %d (%v), want 1", k, err)
	}
	if l, _ := st.Logs(ctx, "mixed"); len(l) != 1 || l[0].Line != "day 2" {
		t.Fatalf("after tick: %v", l)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	// Logs are outside the chain: pruning leaves it intact.
	if rep, err := st.VerifyAudit(ctx); err != nil || rep.Records != 1 {
		t.Fatalf("audit chain after pruning: %+v %v", rep, err)
	}
}

func BenchmarkAuditAPIFilteredPage(b *testing.B) {
	f := trail(b)
	req, _ := http.NewRequest("GET", f.srv.URL+"/api/audit?cluster=production&user=alice&limit=100", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	for b.Loop() {
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		resp.Body.Close()
	}
}
