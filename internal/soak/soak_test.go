package soak

import (
	"fmt"
	"math/rand/v2"
	"os"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/talosbot/talosbot/internal/servetest"
	"github.com/talosbot/talosbot/internal/testenv"
	"github.com/talosbot/talosbot/sim"
)

// TestSoak runs SOAK_SCENARIOS scenarios (default 3, the short soak of make
// test; make soak runs 200) with seeds SOAK_SEED, SOAK_SEED+1, … (default
// shortSeed),
// each printed with its schedule before it runs, and fails naming the seed of
// any scenario whose invariants broke. SOAK_SEED=N SOAK_SCENARIOS=1 replays one.
func TestSoak(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("runs talosbot against simulated clusters")
	}
	scenarios, err := strconv.Atoi(envOr("SOAK_SCENARIOS", "3"))
	if err != nil || scenarios < 1 {
		t.Fatalf("SOAK_SCENARIOS=%q: want a count ≥ 1", os.Getenv("SOAK_SCENARIOS"))
	}
	base, err := strconv.ParseUint(envOr("SOAK_SEED", strconv.FormatUint(shortSeed, 10)), 10, 64)
	if err != nil {
		t.Fatalf("SOAK_SEED=%q: want an unsigned integer", os.Getenv("SOAK_SEED"))
	}
	_, err = testenv.KubeAPIServerPath()
	testenv.Require(t, err) // skips (or fails in CI) without make tools, before the binary is built
	env := Env{Bin: servetest.Binary(t)}
	start := time.Now()
	var results []Result
	for i := range scenarios {
		s := Draw(base + uint64(i))
		t.Run(fmt.Sprintf("seed=%d", s.Seed), func(t *testing.T) {
			t.Logf("%s", s)
			r := Run(t, env, s)
			results = append(results, r)
			t.Logf("seed %d: %s in %s; ops: %s; applied: %v", s.Seed, s.Kind, r.Wall.Round(time.Second), strings.Join(r.Ops, "; "), r.Applied)
			if testing.Verbose() || len(r.Breaks) > 0 {
				t.Logf("endings:\n%s", strings.Join(r.Endings, "\n---\n"))
			}
			for _, n := range r.Notes {
				t.Logf("note: %s", n)
			}
			for _, b := range r.Breaks {
				t.Errorf("invariant broken: %s", b)
			}
			if len(r.Breaks) > 0 {
				t.Errorf("replay: SOAK_SEED=%d SOAK_SCENARIOS=1 make soak", s.Seed)
			}
		})
	}
	summary := Summarize(results, time.Since(start))
	t.Logf("\n%s", summary)
	if p := os.Getenv("SOAK_REPORT"); p != "" {
		if err := os.WriteFile(p, []byte(summary), 0o644); err != nil {
			t.Errorf("write SOAK_REPORT: %v", err)
		}
	}
}

// shortSeed starts the short soak of make test: seeds 23–25 draw a rollback
// (a roll first, with a SIGKILL), a staging roll (with a SIGKILL) and a
// production roll with its two approvals, about 2.5 minutes together
// (docs/BENCHMARKS.md). Fixed, so CI does not change from run to run; a new
// registry entry changes what these seeds draw, so check their time then.
const shortSeed = 23

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

// TestRegistryCoversEveryFault: every field of sim.Fault has a registry entry
// that sets it, so a fault added to the sim is drawn by the soak (or this
// test names it).
func TestRegistryCoversEveryFault(t *testing.T) {
	t.Parallel()
	covered := map[string]bool{}
	names := map[string]bool{}
	r := rand.New(rand.NewPCG(1, 2))
	for _, k := range Registry() {
		if names[k.Name] {
			t.Errorf("registry entry %s twice", k.Name)
		}
		names[k.Name] = true
		f := reflect.ValueOf(k.Draw(r))
		set := 0
		for i := range f.NumField() {
			if !f.Field(i).IsZero() {
				covered[f.Type().Field(i).Name] = true
				set++
			}
		}
		if set != 1 {
			t.Errorf("registry entry %s sets %d fields of sim.Fault, want 1", k.Name, set)
		}
	}
	ft := reflect.TypeFor[sim.Fault]()
	for i := range ft.NumField() {
		if !covered[ft.Field(i).Name] {
			t.Errorf("sim.Fault.%s has no entry in the soak's Registry (internal/soak/faults.go): add one", ft.Field(i).Name)
		}
	}
}

// TestDrawReplays: a seed draws the same scenario every time, and seeds differ.
func TestDrawReplays(t *testing.T) {
	t.Parallel()
	kinds := map[string]bool{}
	faults := map[string]bool{}
	for seed := uint64(1); seed <= 200; seed++ {
		a, b := Draw(seed), Draw(seed)
		if a.String() != b.String() {
			t.Fatalf("seed %d drew\n%s\nthen\n%s", seed, a, b)
		}
		kinds[a.Kind] = true
		for _, e := range a.Events {
			faults[e.Kind] = true
			if e.Kind != KindSIGKILL && e.Node == "" {
				t.Errorf("seed %d: %s without a node", seed, e.Kind)
			}
		}
	}
	for _, k := range Kinds() {
		if !kinds[k] {
			t.Errorf("200 seeds never drew scenario %s", k)
		}
	}
	for _, k := range append(slices.Collect(func(yield func(string) bool) {
		for _, f := range Registry() {
			if f.Scenarios != nil && len(f.Scenarios) == 0 {
				continue // drawn in no scenario, by its entry's choice
			}
			if !yield(f.Name) {
				return
			}
		}
	}), KindSIGKILL) {
		if !faults[k] {
			t.Errorf("200 seeds never drew fault %s", k)
		}
	}
	if Draw(1).String() == Draw(2).String() {
		t.Error("seeds 1 and 2 drew the same scenario")
	}
}

// Summarize is the soak's report: scenarios, faults by kind, breaks, wall time.
func Summarize(results []Result, wall time.Duration) string {
	applied := map[string]int{}
	kinds := map[string]int{}
	breaks := map[string]int{}
	var per []time.Duration
	for _, r := range results {
		kinds[r.Scenario.Kind]++
		for k, n := range r.Applied {
			applied[k] += n
		}
		for _, b := range r.Breaks {
			breaks[b.Invariant]++
		}
		per = append(per, r.Wall)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "scenarios: %d in %s", len(results), wall.Round(time.Second))
	if len(per) > 0 {
		slices.Sort(per)
		fmt.Fprintf(&b, " (per scenario: median %s, max %s)", per[len(per)/2].Round(time.Second), per[len(per)-1].Round(time.Second))
	}
	b.WriteString("\nby kind: " + counts(kinds))
	b.WriteString("\nfaults applied: " + counts(applied))
	total := 0
	for _, n := range breaks {
		total += n
	}
	fmt.Fprintf(&b, "\ninvariant breaks: %d", total)
	if total > 0 {
		b.WriteString(" (" + counts(breaks) + ")")
	}
	return b.String() + "\n"
}

func counts(m map[string]int) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var parts []string
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s %d", k, m[k]))
	}
	return strings.Join(parts, ", ")
}
