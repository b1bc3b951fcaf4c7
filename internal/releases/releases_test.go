package releases_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/talosbot/talosbot/internal/factory"
	"github.com/talosbot/talosbot/internal/factory/factoryfake"
	"github.com/talosbot/talosbot/internal/releases"
	"github.com/talosbot/talosbot/internal/releases/compat"
	"github.com/talosbot/talosbot/state"
)

// factoryVersions is what the fake factory lists: three minors with
// several patches each, and a beta of the next minor (the factory lists
// pre-releases of its newest minor).
var factoryVersions = []string{
	"v1.11.0", "v1.11.2", "v1.11.5", "v1.11.6",
	"v1.12.0", "v1.12.3", "v1.12.6",
	"v1.13.0", "v1.13.4", "v1.13.9",
	"v1.14.0-beta.0",
}

type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func openStore(t *testing.T, path string, clk *clock) *state.Store {
	t.Helper()
	st, err := state.Open(path, state.Options{Clock: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	return st
}

func source(t *testing.T, f *factoryfake.Factory, st *state.Store, clk *clock, configured ...string) *releases.Source {
	t.Helper()
	c, err := factory.New(f.URL(), nil)
	if err != nil {
		t.Fatal(err)
	}
	return &releases.Source{Fetcher: c, URL: f.URL(), Store: st, Configured: configured, Refresh: 6 * time.Hour, Now: clk.Now}
}

func v(s string) releases.Version {
	x, err := releases.Parse(s)
	if err != nil {
		panic(err)
	}
	return x
}

func vs(ss ...string) []releases.Version {
	out := make([]releases.Version, len(ss))
	for i, s := range ss {
		out[i] = v(s)
	}
	return out
}

func TestMultiHopPlanFromTheFactoryChoosesLatestPatches(t *testing.T) {
	clk := &clock{t: time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)}
	f := factoryfake.Start(t, factoryVersions...)
	src := source(t, f, openStore(t, filepath.Join(t.TempDir(), "s.db"), clk), clk)
	list, err := src.Talos(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if list.Origin != releases.OriginFactory || slices.Contains(releases.Tags(list.Versions), "v1.14.0-beta.0") || len(list.Versions) != 10 {
		t.Fatalf("list %s %v", list.Origin, releases.Tags(list.Versions))
	}
	p, err := releases.PlanTalos(compat.Machinery{}, releases.TalosRequest{
		Running: v("v1.11.2"), Target: v("v1.13.9"), Kubernetes: v("1.33.4"), Known: list.Targets(),
	})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := p.Path(), "v1.11.2 → v1.11.6 → v1.12.6 → v1.13.9"; got != want {
		t.Errorf("path %q, want %q", got, want)
	}
	// The Kubernetes support matrix at each hop is machinery's.
	for i, want := range []string{"1.29–1.34", "1.30–1.35", "1.31–1.36"} {
		if h := p.Hops[i]; h.Kubernetes.String() != want || !h.KubernetesOK {
			t.Errorf("hop %d %s → %s: Kubernetes %s ok=%v, want %s", i+1, h.From.Tag(), h.To.Tag(), h.Kubernetes, h.KubernetesOK, want)
		}
	}
	if len(p.Warnings) != 0 {
		t.Errorf("warnings: %v", p.Warnings)
	}
	lines := strings.Join(p.Lines(), "\n")
	if !strings.Contains(lines, "hop 3/3: v1.12.6 → v1.13.9 — Talos v1.13 supports Kubernetes 1.31–1.36; Kubernetes 1.33.4 supported") {
		t.Errorf("lines:\n%s", lines)
	}
	// Already on the newest patch of the running minor: no first hop.
	p, err = releases.PlanTalos(compat.Machinery{}, releases.TalosRequest{Running: v("v1.12.6"), Target: v("v1.13.9"), Kubernetes: v("1.35.2"), Known: list.Targets()})
	if err != nil || p.Path() != "v1.12.6 → v1.13.9" {
		t.Errorf("one hop: %v %v", p, err)
	}
}

func TestFallbackToTheCachedListWhenTheFactoryIsDown(t *testing.T) {
	ctx := context.Background()
	clk := &clock{t: time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)}
	path := filepath.Join(t.TempDir(), "s.db")
	f := factoryfake.Start(t, factoryVersions...)
	st := openStore(t, path, clk)
	src := source(t, f, st, clk, "v1.11.6", "v1.12.6")
	if _, err := src.Talos(ctx); err != nil {
		t.Fatal(err)
	}
	// Within the refresh period the cache answers, without a request.
	clk.Advance(time.Hour)
	if l, err := src.Talos(ctx); err != nil || l.Origin != releases.OriginFactory || f.Hits("/versions") != 1 {
		t.Fatalf("fresh cache: %+v %v hits=%d", l, err, f.Hits("/versions"))
	}
	// The factory goes down, the cache is stale, the bot restarts: the last
	// known list is used, and its age and the failure are shown.
	f.SetDown(http.StatusServiceUnavailable)
	clk.Advance(7 * time.Hour)
	_ = st.Close()
	st2 := openStore(t, path, clk)
	src = source(t, f, st2, clk, "v1.11.6", "v1.12.6")
	l, err := src.Talos(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if l.Origin != releases.OriginCache || len(l.Versions) != 10 || l.Age(clk.Now()) != 8*time.Hour {
		t.Fatalf("down: origin %s, %d versions, age %s", l.Origin, len(l.Versions), l.Age(clk.Now()))
	}
	if d := l.Describe(clk.Now()); !strings.Contains(d, "cached Image Factory list, 8h old") || !strings.Contains(d, "HTTP 503") {
		t.Errorf("describe: %s", d)
	}
	// A plan still works from the cached list.
	p, err := releases.PlanTalos(compat.Machinery{}, releases.TalosRequest{Running: v("v1.11.2"), Target: v("v1.13.9"), Kubernetes: v("1.33.4"), Known: l.Targets()})
	if err != nil || p.Path() != "v1.11.2 → v1.11.6 → v1.12.6 → v1.13.9" {
		t.Errorf("plan from cache: %v %v", p, err)
	}
	// An outage costs one request per retry period, not one per command.
	hits := f.Hits("/versions")
	clk.Advance(time.Minute)
	if l, err := src.Talos(ctx); err != nil || l.Origin != releases.OriginCache || f.Hits("/versions") != hits {
		t.Errorf("retry within the back-off: %v %v hits %d → %d", l, err, hits, f.Hits("/versions"))
	}
	// Back up: the next read after the back-off refreshes the cache.
	f.SetDown(0)
	clk.Advance(10 * time.Minute)
	if l, err := src.Talos(ctx); err != nil || l.Origin != releases.OriginFactory || l.Age(clk.Now()) != 0 {
		t.Errorf("back up: %+v %v", l, err)
	}
}

func TestNoCacheFallsBackToTheConfiguredListOrSaysWhatToDo(t *testing.T) {
	ctx := context.Background()
	clk := &clock{t: time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)}
	f := factoryfake.Start(t, factoryVersions...)
	f.Close() // connection refused
	src := source(t, f, openStore(t, filepath.Join(t.TempDir(), "s.db"), clk), clk, "v1.12.6", "v1.11.6")
	l, err := src.Talos(ctx)
	if err != nil || l.Origin != releases.OriginConfig || !slices.Equal(releases.Tags(l.Versions), []string{"v1.11.6", "v1.12.6"}) || l.Err == nil {
		t.Fatalf("config fallback: %+v %v", l, err)
	}
	if d := l.Describe(clk.Now()); !strings.Contains(d, "releases.talos only") {
		t.Errorf("describe: %s", d)
	}
	src = source(t, f, openStore(t, filepath.Join(t.TempDir(), "s2.db"), clk), clk)
	if _, err := src.Talos(ctx); err == nil || !strings.Contains(err.Error(), "add the releases you use to releases.talos") {
		t.Errorf("nothing at all: %v", err)
	}
	// No factory configured: the list is the configuration, with no age.
	none := &releases.Source{Configured: []string{"v1.13.9"}, Now: clk.Now}
	if l, err := none.Talos(ctx); err != nil || l.Origin != releases.OriginConfig || l.Describe(clk.Now()) != "releases.talos (no Image Factory configured)" {
		t.Errorf("no factory: %+v %v", l, err)
	}
}

func TestCacheOfAnotherFactoryIsNotUsed(t *testing.T) {
	ctx := context.Background()
	clk := &clock{t: time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)}
	st := openStore(t, filepath.Join(t.TempDir(), "s.db"), clk)
	a := factoryfake.Start(t, "v1.13.9")
	if _, err := source(t, a, st, clk).Talos(ctx); err != nil {
		t.Fatal(err)
	}
	b := factoryfake.Start(t, "v1.13.8")
	b.Close()
	l, err := source(t, b, st, clk, "v1.12.6").Talos(ctx)
	if err != nil || l.Origin != releases.OriginConfig {
		t.Errorf("another factory's cache was used: %+v %v", l, err)
	}
}

func TestHopRefusedBecauseKubernetesIsTooOld(t *testing.T) {
	known := releases.ParseAll(factoryVersions)
	// Talos 1.13 needs Kubernetes ≥ 1.31; the cluster runs 1.30 on Talos
	// 1.11, which supports 1.31: upgrade Kubernetes first, now.
	_, err := releases.PlanTalos(compat.Machinery{}, releases.TalosRequest{
		Running: v("v1.11.6"), Target: v("v1.13.9"), Kubernetes: v("1.30.5"), Known: known, KnownKubernetes: vs("1.30.14", "1.31.14", "1.31.9"),
	})
	var r *releases.Refusal
	if !errors.As(err, &r) || r.Rule != "R20" {
		t.Fatalf("want an R20 refusal, got %v", err)
	}
	for _, want := range []string{"hop 2 (v1.12.6 → v1.13.9) would leave Kubernetes 1.30.5 unsupported", "Talos v1.13 supports Kubernetes 1.31–1.36"} {
		if !strings.Contains(r.Reason, want) {
			t.Errorf("reason %q lacks %q", r.Reason, want)
		}
	}
	if !strings.Contains(r.Fix, "/talos upgrade k8s 1.31.14") || !strings.Contains(r.Fix, "Talos v1.11.6 supports it") {
		t.Errorf("fix: %s", r.Fix)
	}
	// The refusal comes at the hop that needs it, after the newest patch of
	// the running minor: Kubernetes 1.28 is fine on v1.10.x, not on v1.11.
	_, err = releases.PlanTalos(compat.Machinery{}, releases.TalosRequest{
		Running: v("v1.10.3"), Target: v("v1.11.6"), Kubernetes: v("1.28.3"), Known: append(vs("v1.10.7"), known...), KnownKubernetes: vs("1.29.15", "1.30.14"),
	})
	if !errors.As(err, &r) || !strings.Contains(r.Reason, "hop 2 (v1.10.7 → v1.11.6)") || !strings.Contains(r.Fix, "/talos upgrade k8s 1.29.15 — Talos v1.10.3 supports it") {
		t.Errorf("second hop: %v", err)
	}
}

func TestTalosPlanRefusals(t *testing.T) {
	m := compat.Machinery{}
	known := releases.ParseAll(factoryVersions)
	var r *releases.Refusal
	_, err := releases.PlanTalos(m, releases.TalosRequest{Running: v("v1.13.9"), Target: v("v1.12.6"), Known: known})
	if !errors.As(err, &r) || !strings.Contains(r.Reason, "downgrade") {
		t.Errorf("downgrade: %v", err)
	}
	_, err = releases.PlanTalos(m, releases.TalosRequest{Running: v("v1.10.7"), Target: v("v1.13.9"), Kubernetes: v("1.31.1"), Known: vs("v1.10.7", "v1.12.6", "v1.13.9")})
	if !errors.As(err, &r) || !strings.Contains(r.Reason, "no v1.11 release is known") || (!strings.Contains(r.Fix, "declare the newest v1.11 release under releases.talos") || strings.Contains(r.Fix, ".x")) {
		t.Errorf("missing minor: %v", err)
	}
	// A hop the machinery refuses (1.13 needs a host ≥ 1.11).
	_, err = releases.PlanTalos(m, releases.TalosRequest{Running: v("v1.10.7"), Target: v("v1.11.6"), Kubernetes: v("1.31.1"), Known: known})
	if err != nil {
		t.Errorf("v1.10 → v1.11: %v", err)
	}
	p, err := releases.PlanTalos(m, releases.TalosRequest{Running: v("v1.13.9"), Target: v("v1.13.9"), Known: known})
	if err != nil || len(p.Hops) != 0 {
		t.Errorf("no-op: %v %v", p, err)
	}
	p, err = releases.PlanTalos(m, releases.TalosRequest{Running: v("v1.12.3"), Target: v("v1.12.6"), Known: known})
	if err != nil || p.Path() != "v1.12.3 → v1.12.6" || !strings.Contains(strings.Join(p.Warnings, " "), "Kubernetes version is unknown") {
		t.Errorf("patch upgrade, Kubernetes unknown: %v %v", p, err)
	}
}

func TestListedOnlyIsAnAllowList(t *testing.T) {
	clk := &clock{t: time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)}
	f := factoryfake.Start(t, factoryVersions...)
	src := source(t, f, openStore(t, filepath.Join(t.TempDir(), "s.db"), clk), clk, "v1.11.6", "v1.12.3", "v1.13.4")
	src.ListedOnly = true
	l, err := src.Talos(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	// The factory's newest is still known (for notices), but plans go
	// through listed versions only.
	if l.Versions[len(l.Versions)-1] != v("v1.13.9") {
		t.Errorf("versions %v", releases.Tags(l.Versions))
	}
	if err := l.Allowed(v("v1.13.9")); err == nil || !strings.Contains(err.Error(), "releases.listed_only") {
		t.Errorf("unlisted allowed: %v", err)
	}
	p, err := releases.PlanTalos(compat.Machinery{}, releases.TalosRequest{Running: v("v1.11.2"), Target: v("v1.13.4"), Kubernetes: v("1.33.1"), Known: l.Targets()})
	if err != nil || p.Path() != "v1.11.2 → v1.11.6 → v1.12.3 → v1.13.4" {
		t.Errorf("listed path: %v %v", p, err)
	}
	// The plugins get the same rule through the request notes.
	n, ok := releases.ReadNotes(releases.NotesOf(l, nil, clk.t))
	if !ok || !n.ListedOnly {
		t.Fatalf("notes lose listed_only: %+v", n)
	}
	if err := n.Allowed(v("v1.13.9")); err == nil || !strings.Contains(err.Error(), "releases.listed_only") {
		t.Errorf("notes: unlisted allowed: %v", err)
	}
	if err := n.Allowed(v("v1.13.4")); err != nil {
		t.Errorf("notes: listed refused: %v", err)
	}
	src.ListedOnly = false
	if l, err = src.Talos(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n, _ := releases.ReadNotes(releases.NotesOf(l, nil, clk.t)); n.ListedOnly || n.Allowed(v("v1.13.9")) != nil {
		t.Errorf("without listed_only the notes refuse: %+v", n)
	}
}

func TestKubernetesMultiHop(t *testing.T) {
	m := compat.Machinery{}
	known := vs("1.33.9", "1.34.2", "1.34.5", "1.35.2", "1.36.3")
	p, err := releases.PlanKubernetes(m, releases.KubeRequest{Talos: v("v1.13.9"), Running: v("1.33.4"), Target: v("1.36.3"), Known: known})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := p.Path(), "1.33.4 → 1.34.5 → 1.35.2 → 1.36.3"; got != want || p.Supported.String() != "1.31–1.36" {
		t.Errorf("path %q (supported %s), want %q", got, p.Supported, want)
	}
	// Talos 1.12 stops at 1.35: refused at the last hop, naming the Talos upgrade.
	_, err = releases.PlanKubernetes(m, releases.KubeRequest{Talos: v("v1.12.6"), Running: v("1.33.4"), Target: v("1.36.3"), Known: known, KnownTalos: releases.ParseAll(factoryVersions)})
	var r *releases.Refusal
	if !errors.As(err, &r) || r.Rule != "R20" || !strings.Contains(r.Reason, "hop 3 (1.35.2 → 1.36.3)") || !strings.Contains(r.Fix, "/talos upgrade talos v1.13.9") {
		t.Errorf("Talos too old: %v", err)
	}
	_, err = releases.PlanKubernetes(m, releases.KubeRequest{Talos: v("v1.13.9"), Running: v("1.36.3"), Target: v("1.35.2"), Known: known})
	if !errors.As(err, &r) || r.Rule != "R21" {
		t.Errorf("downgrade: %v", err)
	}
	_, err = releases.PlanKubernetes(m, releases.KubeRequest{Talos: v("v1.13.9"), Running: v("1.33.4"), Target: v("1.36.3"), Known: vs("1.34.5", "1.36.3")})
	if !errors.As(err, &r) || !strings.Contains(r.Fix, "declare the newest 1.35 release under releases.kubernetes") {
		t.Errorf("missing minor: %v", err)
	}
}

func TestParse(t *testing.T) {
	for _, bad := range []string{"1.13", "v1.13.x", "v1.14.0-beta.0", "v01.2.3", ""} {
		if _, err := releases.Parse(bad); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
	if got := releases.LatestPerMinor(releases.ParseAll(factoryVersions)); !slices.Equal(releases.Tags(got), []string{"v1.11.6", "v1.12.6", "v1.13.9"}) {
		t.Errorf("latest per minor %v", releases.Tags(got))
	}
}

func TestInspectionWireForm(t *testing.T) {
	in := releases.Inspect(compat.Machinery{}, v("v1.12.6"), v("1.30.2"), releases.ParseAll(factoryVersions))
	if len(in.Supports) != 3 || in.Supports[v("v1.13.9")].String() != "1.31–1.36" || in.KubernetesOK(v("v1.13.9")) {
		t.Fatalf("inspect: %+v", in)
	}
	raw, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	var back releases.Inspection
	if err := json.Unmarshal(raw, &back); err != nil {
		t.Fatal(err)
	}
	if back.Talos != in.Talos || back.Kubernetes != in.Kubernetes || len(back.Supports) != 3 || back.Supports[v("v1.13.4")] != in.Supports[v("v1.13.4")] {
		t.Errorf("round trip %s: %+v", raw, back)
	}
	for _, bad := range []string{`{"talos":"1.13"}`, `{"talos":"v1.13.9","supports":{"v1.14.0":"1.31"}}`, `{"talos":"v1.13.9","kubernetes":"x"}`} {
		if err := json.Unmarshal([]byte(bad), &back); err == nil {
			t.Errorf("%s accepted", bad)
		}
	}
}

func TestCachedNeverContactsTheFactory(t *testing.T) {
	ctx := context.Background()
	clk := &clock{t: time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)}
	f := factoryfake.Start(t, factoryVersions...)
	src := source(t, f, openStore(t, filepath.Join(t.TempDir(), "s.db"), clk), clk, "v1.12.6")
	l, err := src.Cached(ctx)
	if err != nil || l.Origin != releases.OriginConfig || f.Hits("/versions") != 0 {
		t.Fatalf("before the first read: %+v %v hits %d", l, err, f.Hits("/versions"))
	}
	if _, err := src.RefreshNow(ctx); err != nil {
		t.Fatal(err)
	}
	if l, err := src.Cached(ctx); err != nil || l.Origin != releases.OriginFactory || len(l.Versions) != 10 {
		t.Errorf("fresh: %+v %v", l, err)
	}
	clk.Advance(7 * time.Hour)
	l, err = src.Cached(ctx)
	if err != nil || l.Origin != releases.OriginCache || l.Age(clk.Now()) != 7*time.Hour || f.Hits("/versions") != 1 {
		t.Errorf("stale: %+v %v hits %d", l, err, f.Hits("/versions"))
	}
}

// startRun runs src.Run with an injected timer: each wait Run asks for
// arrives on waits (so a receive means Run has finished its read and is
// waiting), and a send on fire wakes it. stop ends Run and waits for it.
func startRun(t *testing.T, src *releases.Source) (waits <-chan time.Duration, fire chan<- time.Time, stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	w, fi := make(chan time.Duration), make(chan time.Time)
	src.After = func(d time.Duration) <-chan time.Time {
		select {
		case w <- d:
		case <-ctx.Done():
		}
		return fi
	}
	done := make(chan struct{})
	go func() { src.Run(ctx); close(done) }()
	stop = func() { cancel(); <-done }
	t.Cleanup(stop)
	return w, fi, stop
}

// TestRunReadsTheFactoryOnlyWhenTheCacheIsDue: Run reads through the cache,
// so a restart with a fresh cache does not read the factory and waits only
// what is left of the refresh period; a missing or stale cache is read at
// start; a failed read is retried after the back-off.
func TestRunReadsTheFactoryOnlyWhenTheCacheIsDue(t *testing.T) {
	clk := &clock{t: time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)}
	f := factoryfake.Start(t, factoryVersions...)
	st := openStore(t, filepath.Join(t.TempDir(), "s.db"), clk)
	hits := func() int { return f.Hits("/versions") }
	expect := func(what string, waits <-chan time.Duration, wait time.Duration, n int) {
		t.Helper()
		if d := <-waits; d != wait || hits() != n {
			t.Fatalf("%s: Run waits %s after %d reads; want %s after %d", what, d, hits(), wait, n)
		}
	}

	// Nothing cached: one read at start, then a full refresh period.
	waits, fire, stop := startRun(t, source(t, f, st, clk))
	expect("no cache", waits, 6*time.Hour, 1)
	clk.Advance(6 * time.Hour)
	fire <- clk.Now()
	expect("due", waits, 6*time.Hour, 2)
	stop()

	// A restart 2h later: the cache is fresh, so no read, and Run wakes
	// when it is due, 4h on, not 6h from now.
	clk.Advance(2 * time.Hour)
	waits, fire, stop = startRun(t, source(t, f, st, clk))
	expect("fresh cache", waits, 4*time.Hour, 2)
	clk.Advance(4 * time.Hour)
	fire <- clk.Now()
	expect("fresh cache, then due", waits, 6*time.Hour, 3)
	stop()

	// A restart with a stale cache reads at start.
	clk.Advance(7 * time.Hour)
	waits, _, stop = startRun(t, source(t, f, st, clk))
	expect("stale cache", waits, 6*time.Hour, 4)
	stop()

	// A failed read is retried after the back-off, not after Refresh.
	f.SetDown(http.StatusServiceUnavailable)
	clk.Advance(7 * time.Hour)
	waits, fire, stop = startRun(t, source(t, f, st, clk))
	expect("down", waits, 5*time.Minute, 5)
	clk.Advance(5 * time.Minute)
	fire <- clk.Now()
	expect("still down", waits, 5*time.Minute, 6)
	stop()
}

// TestTalosAndCachedAgreeAfterAFailedRead: after a forced read fails
// within the refresh period, Talos and Cached both give the cached list as
// OriginCache with that failure (Talos used to call it OriginFactory), and
// neither reads again within the back-off.
func TestTalosAndCachedAgreeAfterAFailedRead(t *testing.T) {
	ctx := context.Background()
	clk := &clock{t: time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)}
	f := factoryfake.Start(t, factoryVersions...)
	src := source(t, f, openStore(t, filepath.Join(t.TempDir(), "s.db"), clk), clk, "v1.12.6")
	if _, err := src.Talos(ctx); err != nil {
		t.Fatal(err)
	}
	clk.Advance(time.Hour)
	f.SetDown(http.StatusServiceUnavailable)
	if l, err := src.RefreshNow(ctx); err != nil || l.Origin != releases.OriginCache {
		t.Fatalf("failed refresh: %+v %v", l, err)
	}
	clk.Advance(time.Minute)
	lt, err := src.Talos(ctx)
	if err != nil {
		t.Fatal(err)
	}
	lc, err := src.Cached(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for name, l := range map[string]*releases.List{"Talos": lt, "Cached": lc} {
		if l.Origin != releases.OriginCache || l.Err == nil || !strings.Contains(l.Err.Error(), "HTTP 503") || len(l.Versions) != 10 {
			t.Errorf("%s after a failed read: origin %s, err %v, %d versions", name, l.Origin, l.Err, len(l.Versions))
		}
	}
	if f.Hits("/versions") != 2 {
		t.Errorf("read again within the back-off: %d reads", f.Hits("/versions"))
	}
	// A successful read makes both say Image Factory again.
	f.SetDown(0)
	if _, err := src.RefreshNow(ctx); err != nil {
		t.Fatal(err)
	}
	for _, get := range []func(context.Context) (*releases.List, error){src.Talos, src.Cached} {
		if l, err := get(ctx); err != nil || l.Origin != releases.OriginFactory || l.Err != nil {
			t.Errorf("after a good read: %+v %v", l, err)
		}
	}
}

// blocking is a factory that hangs until released.
type blocking struct{ entered, release chan struct{} }

func (b blocking) Versions(ctx context.Context) ([]string, error) {
	close(b.entered)
	select {
	case <-b.release:
		return []string{"v1.13.9"}, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func TestCachedDoesNotWaitForAReadInFlight(t *testing.T) {
	clk := &clock{t: time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)}
	b := blocking{entered: make(chan struct{}), release: make(chan struct{})}
	src := &releases.Source{Fetcher: b, URL: "https://factory.example", Store: openStore(t, filepath.Join(t.TempDir(), "s.db"), clk),
		Configured: []string{"v1.12.6"}, Refresh: time.Hour, Now: clk.Now}
	done := make(chan error, 1)
	go func() { _, err := src.RefreshNow(context.Background()); done <- err }()
	<-b.entered
	got := make(chan *releases.List, 1)
	go func() { l, _ := src.Cached(context.Background()); got <- l }()
	select {
	case l := <-got:
		if l == nil || l.Origin != releases.OriginConfig {
			t.Errorf("cached during a read: %+v", l)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Cached waited for the factory")
	}
	close(b.release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// TestPlanTarget: the promotion gate's (R6) target is the version for one stop and the
// stops for a path, for Talos and Kubernetes alike.
func TestPlanTarget(t *testing.T) {
	if got := releases.PlanTarget(vs("1.36.3")); got != "v1.36.3" {
		t.Fatalf("one stop: %q", got)
	}
	if got := releases.PlanTarget(vs("1.35.2", "1.36.3")); got != "v1.35.2 → v1.36.3" {
		t.Fatalf("a path: %q", got)
	}
}
