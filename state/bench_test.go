package state

import (
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

// BenchmarkAuditAppend measures appends with real fsync: one record per
// transaction (how the engine writes) and 100 per transaction.
func BenchmarkAuditAppend(b *testing.B) {
	for _, batch := range []int{1, 100} {
		b.Run(fmt.Sprintf("per-tx=%d", batch), func(b *testing.B) {
			clock := newFakeClock()
			s, err := Open(filepath.Join(b.TempDir(), "bench.db"), Options{Clock: clock.Now})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			ev := benchEvent(rand.New(rand.NewPCG(1, 1)), 0)
			b.ResetTimer()
			for done := 0; done < b.N; {
				n := min(batch, b.N-done)
				if err := s.Update(b.Context(), func(tx *Tx) error {
					for range n {
						if _, err := tx.Append(ev); err != nil {
							return err
						}
					}
					return nil
				}); err != nil {
					b.Fatal(err)
				}
				done += n
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "records/s")
		})
	}
}

// Distribution of the benchmark data: 5 clusters, 20 actors, 8 actions,
// results 80% ok, 10% refused, 10% failed, 10 records per operation.
var (
	benchClusters = []string{"prod-eu", "prod-us", "staging", "dev", "lab"}
	benchActions  = []string{"op.plan", "op.approve", "op.deny", "op.run", "op.step", "op.finish", "lock.acquire", "alert.received"}
)

func benchActor(i int) string { return fmt.Sprintf("user-%02d", i%20) }

func benchEvent(rng *rand.Rand, i int) AuditEvent {
	res := "ok"
	switch r := rng.IntN(10); r {
	case 0:
		res = "refused"
	case 1:
		res = "failed"
	}
	return AuditEvent{
		Actor:   benchActor(rng.IntN(20)),
		Action:  benchActions[rng.IntN(len(benchActions))],
		Cluster: benchClusters[rng.IntN(len(benchClusters))],
		OpID:    fmt.Sprintf("op-%07d", i/10),
		Command: "upgrade talos",
		Result:  res,
		Detail:  map[string]string{"node": fmt.Sprintf("node-%d", rng.IntN(12))},
	}
}

// buildAuditDB writes n records in batches of 20k (no fsync: setup only),
// one second apart, and returns the open store.
func buildAuditDB(b *testing.B, dir string, n int) *Store {
	b.Helper()
	clock := newFakeClock()
	opts := testOptions(clock)
	opts.mmapSize = 0
	s, err := Open(filepath.Join(dir, fmt.Sprintf("audit-%d.db", n)), opts)
	if err != nil {
		b.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(7, 7))
	const batch = 20_000
	start := time.Now()
	for done := 0; done < n; done += batch {
		if err := s.Update(b.Context(), func(tx *Tx) error {
			for i := done; i < min(done+batch, n); i++ {
				clock.Advance(time.Second)
				if _, err := tx.Append(benchEvent(rng, i)); err != nil {
					return err
				}
			}
			return nil
		}); err != nil {
			b.Fatal(err)
		}
	}
	b.Logf("built %d audit records in %s", n, time.Since(start).Round(time.Millisecond))
	return s
}

// BenchmarkAuditQuery runs a mix of page-sized (Limit 50) queries against 1k
// and 1M records and reports p50 and p99 latency. The 1M database is built
// once per run, in a temp dir, only when its sub-benchmark is selected (so
// `go test` without -bench, or -short, never builds it).
func BenchmarkAuditQuery(b *testing.B) {
	dir := b.TempDir()
	for _, size := range []struct {
		name string
		n    int
	}{{"1k", 1_000}, {"1M", 1_000_000}} {
		var s *Store // built on first use; b.Run calls the closure several times
		b.Cleanup(func() {
			if s != nil {
				_ = s.Close()
			}
		})
		b.Run("records="+size.name, func(b *testing.B) {
			if size.n > 100_000 && testing.Short() {
				b.Skip("1M-record database skipped in -short mode")
			}
			if s == nil {
				s = buildAuditDB(b, dir, size.n)
			}
			benchQueries(b, s, size.n)
		})
	}
}

func benchQueries(b *testing.B, s *Store, n int) {
	rng := rand.New(rand.NewPCG(3, 4))
	start := newFakeClock().Now()
	at := func(seq int) time.Time { return start.Add(time.Duration(seq) * time.Second) }
	queries := []func() AuditQuery{
		func() AuditQuery { return AuditQuery{} },
		func() AuditQuery { return AuditQuery{Cluster: benchClusters[rng.IntN(5)]} },
		func() AuditQuery { return AuditQuery{Actor: benchActor(rng.IntN(20))} },
		func() AuditQuery {
			return AuditQuery{Cluster: benchClusters[rng.IntN(5)], Actor: benchActor(rng.IntN(20))}
		},
		func() AuditQuery { return AuditQuery{Action: benchActions[rng.IntN(8)]} },
		func() AuditQuery { return AuditQuery{Result: "failed"} },
		func() AuditQuery { return AuditQuery{Cluster: benchClusters[rng.IntN(5)], Result: "refused"} },
		func() AuditQuery { return AuditQuery{OpID: fmt.Sprintf("op-%07d", rng.IntN(n/10))} },
		func() AuditQuery {
			from := rng.IntN(n - 100)
			return AuditQuery{Since: at(from), Until: at(from + 100)}
		},
		func() AuditQuery {
			from := rng.IntN(n / 2)
			return AuditQuery{Cluster: benchClusters[rng.IntN(5)], Since: at(from), Until: at(from + n/4)}
		},
		func() AuditQuery {
			return AuditQuery{Cluster: benchClusters[rng.IntN(5)], BeforeSeq: uint64(n/2 + rng.IntN(n/2))}
		},
	}
	lat := make([]time.Duration, 0, b.N)
	byKind := make([][]time.Duration, len(queries))
	returned := 0
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		kind := i % len(queries)
		q := queries[kind]()
		q.Limit = 50
		t0 := time.Now()
		recs, err := s.QueryAudit(b.Context(), q)
		d := time.Since(t0)
		lat = append(lat, d)
		byKind[kind] = append(byKind[kind], d)
		if err != nil {
			b.Fatal(err)
		}
		returned += len(recs)
	}
	b.StopTimer()
	b.ReportMetric(float64(percentile(lat, 0.50).Nanoseconds()), "p50-ns")
	b.ReportMetric(float64(percentile(lat, 0.99).Nanoseconds()), "p99-ns")
	b.ReportMetric(float64(returned)/float64(b.N), "records/query")
	if b.N >= 1000 {
		for k, l := range byKind {
			b.Logf("query kind %2d: p50 %8s  p99 %8s", k, percentile(l, 0.5), percentile(l, 0.99))
		}
	}
}

func percentile(l []time.Duration, p float64) time.Duration {
	if len(l) == 0 {
		return 0
	}
	l = slices.Clone(l)
	slices.Sort(l)
	return l[min(len(l)-1, int(p*float64(len(l))))]
}
