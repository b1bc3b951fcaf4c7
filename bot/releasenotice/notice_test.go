package releasenotice_test

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/talosbot/talosbot/bot/releasenotice"
	"github.com/talosbot/talosbot/config"
	"github.com/talosbot/talosbot/internal/factory"
	"github.com/talosbot/talosbot/internal/factory/factoryfake"
	"github.com/talosbot/talosbot/internal/releases"
	"github.com/talosbot/talosbot/internal/releases/compat"
	"github.com/talosbot/talosbot/state"
)

const cfgDoc = `
clusters:
  - name: staging
    environment: staging
    channels: [st]
    endpoints: [10.0.20.204]
    nodes: [{name: cp-1, address: 10.0.20.204, role: controlplane, host: pve5}]
    credentials: {source: files, talosconfig: file:/etc/tc}
  - name: production
    environment: production
    channels: [prd]
    endpoints: [10.0.30.11]
    nodes: [{name: cp-1, address: 10.0.30.11, role: controlplane, host: pve1}]
    credentials: {source: files, talosconfig: file:/etc/tc}
policy:
  staging: {operators: ["*"]}
  production: {operators: [alice, bob], approvers: [alice, bob]}
releases:
  talos: [v1.12.6]
  factory_url: http://127.0.0.1:1
`

// inspector plays the releases plugin: what each cluster runs, and the
// support ranges from machinery's real matrix.
type inspector struct {
	mu  sync.Mutex
	run map[string][2]string // cluster → Talos, Kubernetes
}

func (i *inspector) set(cluster, talos, kube string) {
	i.mu.Lock()
	i.run[cluster] = [2]string{talos, kube}
	i.mu.Unlock()
}

func (i *inspector) Inspect(_ context.Context, cluster string, known []releases.Version) (*releases.Inspection, error) {
	i.mu.Lock()
	r, ok := i.run[cluster]
	i.mu.Unlock()
	if !ok {
		return nil, fmt.Errorf("%s does not answer", cluster)
	}
	t, _ := releases.Parse(r[0])
	k, _ := releases.Parse(r[1])
	return releases.Inspect(compat.Machinery{}, t, k, known), nil
}

type post struct {
	channel, text string
	actions       []releasenotice.Action
}

type poster struct {
	mu    sync.Mutex
	posts []post
}

func (p *poster) Post(_ context.Context, channel, text string, actions []releasenotice.Action) error {
	p.mu.Lock()
	p.posts = append(p.posts, post{channel, text, actions})
	p.mu.Unlock()
	return nil
}

func (p *poster) take() []post {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := p.posts
	p.posts = nil
	return out
}

func labels(p post) string {
	var out []string
	for _, a := range p.actions {
		out = append(out, a.Label+"="+a.Command)
	}
	return strings.Join(out, "; ")
}

type rig struct {
	t     *testing.T
	now   time.Time
	cfg   *config.Config
	store *state.Store
	fac   *factoryfake.Factory
	insp  *inspector
	out   *poster
	n     *releasenotice.Notifier
}

func newRig(t *testing.T) *rig {
	cfg, err := config.Parse([]byte(cfgDoc))
	if err != nil {
		t.Fatal(err)
	}
	r := &rig{t: t, now: time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC), cfg: cfg,
		fac: factoryfake.Start(t, "v1.12.5", "v1.12.6"), insp: &inspector{run: map[string][2]string{}}, out: &poster{}}
	r.store, err = state.Open(filepath.Join(t.TempDir(), "s.db"), state.Options{Clock: func() time.Time { return r.now }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.store.Close() })
	r.restart()
	return r
}

// restart builds a new notifier (and release source) over the same store,
// as a restarted bot does.
func (r *rig) restart() {
	fc, err := factory.New(r.fac.URL(), nil)
	if err != nil {
		r.t.Fatal(err)
	}
	src := &releases.Source{Fetcher: fc, URL: r.fac.URL(), Store: r.store, Configured: r.cfg.Releases.Talos,
		Refresh: time.Hour, Now: func() time.Time { return r.now }}
	r.n, err = releasenotice.New(releasenotice.Options{Config: r.cfg, Store: r.store, Releases: src, Inspector: r.insp,
		Poster: r.out, Now: func() time.Time { return r.now }})
	if err != nil {
		r.t.Fatal(err)
	}
}

// day advances the clock to the next scheduled check and runs it.
func (r *rig) day() []post {
	r.now = r.n.Next(r.now)
	for _, oc := range r.n.Check(context.Background(), r.now) {
		if oc.Err != nil {
			r.t.Fatalf("check %s: %v", oc.Cluster, oc.Err)
		}
	}
	return r.out.take()
}

func TestOneNoticePerNewVersionStagingFirstSnoozeHonoured(t *testing.T) {
	r := newRig(t)
	r.insp.set("staging", "v1.12.6", "1.33.4")
	r.insp.set("production", "v1.12.6", "1.33.4")
	if got := r.day(); len(got) != 0 {
		t.Fatalf("nothing new, yet posted %+v", got)
	}
	if r.now != time.Date(2026, 12, 2, 9, 0, 0, 0, time.UTC) {
		t.Errorf("the default schedule is daily at 09:00: checked at %s", r.now)
	}

	// A patch and a minor appear.
	if err := r.fac.SetVersions("v1.12.5", "v1.12.6", "v1.12.7", "v1.13.0", "v1.13.9"); err != nil {
		t.Fatal(err)
	}
	got := r.day()
	if len(got) != 4 {
		t.Fatalf("want 4 notices (2 versions × 2 clusters), got %d: %+v", len(got), got)
	}
	byChan := map[string][]post{}
	for _, p := range got {
		byChan[p.channel] = append(byChan[p.channel], p)
	}
	st, prd := byChan["st"], byChan["prd"]
	if len(st) != 2 || len(prd) != 2 {
		t.Fatalf("by channel: %+v", byChan)
	}
	for i, want := range []string{"Talos v1.12.7 is out (a newer patch)", "Talos v1.13.9 is out (a newer minor release)"} {
		for _, p := range []post{st[i], prd[i]} {
			if !strings.Contains(p.text, want) {
				t.Errorf("%s notice %d: %q lacks %q", p.channel, i, p.text, want)
			}
		}
	}
	if !strings.Contains(st[1].text, "https://github.com/siderolabs/talos/releases/tag/v1.13.9") ||
		!strings.Contains(st[1].text, "Kubernetes 1.33.4 is supported by Talos v1.13 (1.31–1.36)") ||
		!strings.Contains(st[1].text, "release data: Image Factory") {
		t.Errorf("staging v1.13.9 notice:\n%s", st[1].text)
	}
	// Staging first: every notice offers staging; production is not offered.
	for _, p := range got {
		l := labels(p)
		if !strings.Contains(l, "Plan on staging=/talos upgrade talos v1.") || strings.Contains(l, "upgrade talos v1.13.9 production") || strings.Contains(l, "upgrade talos v1.12.7 production") {
			t.Errorf("%s buttons: %s", p.channel, l)
		}
		if !strings.Contains(l, "Snooze 7d=/talos releases snooze ") {
			t.Errorf("%s: no snooze button: %s", p.channel, l)
		}
	}
	if !strings.Contains(prd[1].text, "production is offered once staging runs it (R6)") {
		t.Errorf("production notice:\n%s", prd[1].text)
	}

	// Never repeated: not the next day, not after a restart.
	if got := r.day(); len(got) != 0 {
		t.Errorf("repeated: %+v", got)
	}
	r.restart()
	if got := r.day(); len(got) != 0 {
		t.Errorf("repeated after a restart: %+v", got)
	}

	// Staging runs v1.13.9: production is now offered it, once.
	r.insp.set("staging", "v1.13.9", "1.33.4")
	got = r.day()
	if len(got) != 1 || got[0].channel != "prd" || !strings.Contains(got[0].text, "runs on staging") ||
		!strings.Contains(labels(got[0]), "Plan on production=/talos upgrade talos v1.13.9 production") {
		t.Fatalf("promotion notice: %+v", got)
	}
	if got := r.day(); len(got) != 0 {
		t.Errorf("promotion repeated: %+v", got)
	}

	// Production snoozes; a new patch appears: staging hears of it,
	// production only once the snooze ends.
	if err := r.n.Snooze(context.Background(), "production", "alice", r.now.Add(releasenotice.DefaultSnooze)); err != nil {
		t.Fatal(err)
	}
	if err := r.fac.SetVersions("v1.12.6", "v1.12.7", "v1.13.9", "v1.13.10"); err != nil {
		t.Fatal(err)
	}
	got = r.day()
	if len(got) != 1 || got[0].channel != "st" || !strings.Contains(got[0].text, "v1.13.10 is out (a newer patch)") {
		t.Fatalf("during the snooze: %+v", got)
	}
	for range 5 {
		if got := r.day(); len(got) != 0 {
			t.Fatalf("snooze not honoured at %s: %+v", r.now, got)
		}
	}
	got = r.day() // day 7 after the snooze: it has ended
	if len(got) != 1 || got[0].channel != "prd" || !strings.Contains(got[0].text, "v1.13.10 is out") {
		t.Fatalf("after the snooze (%s): %+v", r.now, got)
	}
}

func TestNoticeSaysWhenKubernetesIsNotSupported(t *testing.T) {
	r := newRig(t)
	r.insp.set("staging", "v1.12.6", "1.30.2")
	r.insp.set("production", "v1.13.9", "1.33.4") // nothing newer
	if err := r.fac.SetVersions("v1.12.6", "v1.13.9"); err != nil {
		t.Fatal(err)
	}
	got := r.day()
	if len(got) != 1 || !strings.Contains(got[0].text, "Kubernetes 1.30.2 is not supported by Talos v1.13 (Kubernetes 1.31–1.36)") {
		t.Fatalf("notices: %+v", got)
	}
	// production does not answer: no notice, an error for that cluster only.
	r.insp.mu.Lock()
	delete(r.insp.run, "production")
	r.insp.mu.Unlock()
	var seen bool
	for _, oc := range r.n.Check(context.Background(), r.now) {
		if oc.Cluster == "production" && oc.Err != nil && strings.Contains(oc.Err.Error(), "does not answer") {
			seen = true
		}
	}
	if !seen {
		t.Error("an unreachable cluster was not reported")
	}
}

func TestNoticesOff(t *testing.T) {
	r := newRig(t)
	r.cfg.Releases.NoticeSchedule = config.ScheduleOff
	r.restart()
	if !r.n.Next(r.now).IsZero() {
		t.Error("notices off, yet a next check is scheduled")
	}
	if err := r.n.Run(context.Background()); err != nil {
		t.Error(err)
	}
}

// TestNoticeNamesTheBreakingChanges: the notice of v1.14.1 to a v1.13.9
// cluster says which breaking changes lie between; a patch notice none.
func TestNoticeNamesTheBreakingChanges(t *testing.T) {
	r := newRig(t)
	r.insp.set("staging", "v1.13.9", "1.36.3")
	r.insp.set("production", "v1.14.0", "1.36.3")
	if err := r.fac.SetVersions("v1.13.9", "v1.14.0", "v1.14.1"); err != nil {
		t.Fatal(err)
	}
	got := r.day()
	var staging, production string
	for _, p := range got {
		switch p.channel {
		case "st":
			staging += p.text
		case "prd":
			production += p.text
		}
	}
	if !strings.Contains(staging, "Talos v1.14.1 is out") || !strings.Contains(staging, "⚠️ v1.14 breaking changes: installer only from Image Factory; etcd 3.6 required; etcd metrics on port 2383") {
		t.Errorf("staging notice: %q", staging)
	}
	if strings.Contains(production, "breaking changes") {
		t.Errorf("a patch notice names breaking changes: %q", production)
	}
}
