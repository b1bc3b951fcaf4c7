package talosupgrade

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/talosbot/talosbot/plugins/sdk"
	"github.com/talosbot/talosbot/plugins/sdk/sdktest"
	"github.com/talosbot/talosbot/sim"
)

// bootLog records when the sim logs "node booted", per node.
type bootLog struct {
	mu     sync.Mutex
	booted map[string]time.Time
}

func (h *bootLog) Enabled(context.Context, slog.Level) bool { return true }
func (h *bootLog) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h *bootLog) WithGroup(string) slog.Handler            { return h }
func (h *bootLog) Handle(_ context.Context, r slog.Record) error {
	if r.Message != "node booted" {
		return nil
	}
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "node" {
			h.mu.Lock()
			h.booted[a.Value.String()] = r.Time
			h.mu.Unlock()
		}
		return true
	})
	return nil
}

// BenchmarkRoll3Nodes rolls 3 control planes with 2 s sim reboots and reports
// the plugin's overhead: the run's wall time minus the node outages and the
// health gates, as a percentage of outages + gates. Goal: ≤ 5 % (issue 27).
//
// A node's outage runs from the upgrade request (its step going RUNNING) to
// the sim logging "node booted": the 2 s reboot delay plus what the sim does
// around it (upgrade sequence, embedded etcd member stop and rejoin), which
// the bot waits for but does not cause. Gates are the spans of the gate
// steps. The overhead left is the plan, snapshot, quorum checks, boot-id
// reads, events tracking (how late the bot notices a node is back) and drift
// note. nominal-overhead-% uses 3 × 2 s instead of the measured outages.
func BenchmarkRoll3Nodes(b *testing.B) {
	const reboot = 2 * time.Second
	var total, gates, outages time.Duration
	for range b.N {
		b.StopTimer()
		bl := &bootLog{booted: map[string]time.Time{}}
		e := start(b, 3, 0, false, func(o *sim.Options) { o.RebootDelay = reboot; o.Logger = slog.New(bl) })
		req := e.request(b, target)
		req.Settings.NodeTimeoutMs = 60_000
		b.StartTimer()
		t0 := time.Now()
		rec, _ := sdktest.Run(ctxFor(b, 5*time.Minute), &Plugin{}, req, nil)
		total += time.Since(t0)
		b.StopTimer()
		if res := rec.FinalResult(); !res.OK {
			b.Fatalf("roll failed: %v", res)
		}
		gates += gateTime(rec.Events())
		bl.mu.Lock()
		for _, p := range rec.Events() {
			if s := p.Step; s != nil && strings.HasSuffix(s.StepID, "/upgrade") && s.Status == sdk.StepRunning {
				outages += bl.booted[s.Node].Sub(time.Unix(0, p.UnixNano))
			}
		}
		bl.mu.Unlock()
		_ = e.c.Close()
	}
	base := outages + gates
	over := total - base
	nominal := time.Duration(b.N)*3*reboot + gates
	b.ReportMetric(float64(total.Milliseconds())/float64(b.N), "ms/roll")
	b.ReportMetric(float64(outages.Milliseconds())/float64(b.N), "outage-ms/roll")
	b.ReportMetric(float64(gates.Milliseconds())/float64(b.N), "gate-ms/roll")
	b.ReportMetric(float64(over.Milliseconds())/float64(b.N), "overhead-ms/roll")
	b.ReportMetric(100*float64(over)/float64(base), "overhead-%")
	b.ReportMetric(100*float64(total-nominal)/float64(nominal), "nominal-overhead-%")
}

// gateTime sums the spans of the gate steps: gate-before/* and gate-after/*
// from the first start to the last end, and each node/*/gate.
func gateTime(evs []*sdk.Event) time.Duration {
	spans := map[string][2]int64{} // group → first start, last end
	for _, p := range evs {
		s := p.Step
		if s == nil {
			continue
		}
		id := s.StepID
		group := ""
		switch {
		case strings.HasPrefix(id, "gate-before/"), strings.HasPrefix(id, "gate-after/"):
			group = id[:strings.Index(id, "/")]
		case strings.HasSuffix(id, "/gate"):
			group = id
		default:
			continue
		}
		sp := spans[group]
		if sp[0] == 0 || p.UnixNano < sp[0] {
			sp[0] = p.UnixNano
		}
		if p.UnixNano > sp[1] {
			sp[1] = p.UnixNano
		}
		spans[group] = sp
	}
	var d time.Duration
	for _, sp := range spans {
		d += time.Duration(sp[1] - sp[0])
	}
	return d
}
