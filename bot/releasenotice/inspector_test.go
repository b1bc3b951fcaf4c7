package releasenotice_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/talosbot/talosbot/bot/releasenotice"
	"github.com/talosbot/talosbot/config"
	"github.com/talosbot/talosbot/internal/factory"
	"github.com/talosbot/talosbot/internal/factory/factoryfake"
	"github.com/talosbot/talosbot/internal/releases"
	"github.com/talosbot/talosbot/plugins/releaseinfo"
	"github.com/talosbot/talosbot/plugins/sdk"
	lifecyclev1 "github.com/talosbot/talosbot/plugins/sdk/proto/lifecycle/v1"
	"github.com/talosbot/talosbot/sim"
	"github.com/talosbot/talosbot/state"
)

// inProcess is the plugin host reduced to one in-process plugin.
type inProcess struct{}

func (inProcess) Plan(ctx context.Context, name string, req *lifecyclev1.OperationRequest) (*lifecyclev1.OperationPlan, error) {
	plan, err := releaseinfo.New().Plan(ctx, sdk.RequestFromWire(req))
	return sdk.PlanToWire(plan), err
}

// TestNoticeFromASimClusterThroughThePlugin: the whole path — Image
// Factory (fake) → release source and its cache → the releases plugin
// reading a simulated cluster → a notice in the cluster's channel.
func TestNoticeFromASimClusterThroughThePlugin(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c, err := sim.Start(ctx, sim.Options{ControlPlanes: 1, TalosVersion: "v1.12.6"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	n0 := c.Nodes()[0]
	cfg, err := config.Parse([]byte(`
clusters:
  - name: staging
    environment: staging
    channels: [st]
    endpoints: [` + n0.IP + `]
    nodes: [{name: ` + n0.Name + `, address: ` + n0.IP + `, role: controlplane, host: pve5}]
    credentials: {source: files, talosconfig: file:/etc/tc}
policy:
  staging: {operators: ["*"]}
`))
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	st, err := state.Open(filepath.Join(t.TempDir(), "s.db"), state.Options{Clock: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = st.Close() }()
	f := factoryfake.Start(t, "v1.12.6", "v1.13.9")
	fc, _ := factory.New(f.URL(), nil)
	src := &releases.Source{Fetcher: fc, URL: f.URL(), Store: st, Refresh: time.Hour, Now: func() time.Time { return now }}
	insp := &releasenotice.PluginInspector{Config: cfg, Plugins: inProcess{}, Releases: src, Now: func() time.Time { return now },
		Credentials: func(context.Context, *config.Cluster) ([]byte, []byte, error) { return c.Talosconfig(), nil, nil }}
	out := &poster{}
	n, err := releasenotice.New(releasenotice.Options{Config: cfg, Store: st, Releases: src, Inspector: insp, Poster: out, Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	for _, oc := range n.Check(ctx, now) {
		if oc.Err != nil {
			t.Fatal(oc.Err)
		}
	}
	got := out.take()
	if len(got) != 1 || got[0].channel != "st" || !strings.Contains(got[0].text, "Talos v1.13.9 is out (a newer minor release): staging runs v1.12.6") ||
		!strings.Contains(got[0].text, "Kubernetes: the running version is unknown; Talos v1.13 supports Kubernetes 1.31–1.36") {
		t.Fatalf("notices: %+v", got)
	}
	// The notes hook hands plugins the cached list, without a request.
	hits := f.Hits("/versions")
	notes := (&releasenotice.Notes{Source: src, Config: cfg, Now: func() time.Time { return now }}).ReleaseEvidence(ctx, "staging")
	if strings.Join(notes.GetVersions(), ",") != "v1.12.6,v1.13.9" || !strings.HasPrefix(notes.GetOrigin(), "Image Factory") || f.Hits("/versions") != hits {
		t.Errorf("notes %v (hits %d → %d)", notes, hits, f.Hits("/versions"))
	}
}

// TestListedOnlyHoldsWhenTheReleaseDataCannotBeRead: with releases.listed_only the evidence
// still carries the allow-list when the cached release data cannot be read, so a plugin never
// falls back to "any version" (it learns listed_only only from the evidence). Without
// listed_only the hook sends the configured releases.talos: plugins no longer read the core's
// settings, so the evidence is the only list they have.
func TestListedOnlyHoldsWhenTheReleaseDataCannotBeRead(t *testing.T) {
	st, err := state.Open(filepath.Join(t.TempDir(), "s.db"), state.Options{})
	if err != nil {
		t.Fatal(err)
	}
	_ = st.Close() // every read of the cache fails
	f := factoryfake.Start(t, "v1.12.6", "v1.13.9")
	fc, _ := factory.New(f.URL(), nil)
	for _, listed := range []bool{true, false} {
		cfg := &config.Config{Releases: config.Releases{Talos: []string{"v1.12.6"}, ListedOnly: listed}}
		src := &releases.Source{Fetcher: fc, URL: f.URL(), Store: st, Configured: cfg.Releases.Talos, ListedOnly: listed, Refresh: time.Hour}
		if _, err := src.Cached(context.Background()); err == nil {
			t.Fatal("the cache read of a closed store succeeded; the test needs it to fail")
		}
		notes := (&releasenotice.Notes{Source: src, Config: cfg}).ReleaseEvidence(context.Background(), "staging")
		n, ok := releases.ReadNotes(&sdk.Releases{Versions: notes.GetVersions(), Targets: notes.GetTargets(), ListedOnly: notes.GetListedOnly()})
		if !listed {
			if !ok || n.ListedOnly || len(n.Targets) != 1 || n.Targets[0].Tag() != "v1.12.6" || n.Allowed(releases.Version{Major: 1, Minor: 12, Patch: 6}) != nil {
				t.Errorf("without listed_only an unreadable cache sends %v, want releases.talos", notes)
			}
			continue
		}
		if !ok || !n.ListedOnly {
			t.Fatalf("listed_only with an unreadable cache: notes %v, want the allow-list", notes)
		}
		if err := n.Allowed(releases.Version{Major: 1, Minor: 13, Patch: 9}); err == nil {
			t.Errorf("v1.13.9 (not in releases.talos) is allowed when the cache cannot be read")
		}
		if err := n.Allowed(releases.Version{Major: 1, Minor: 12, Patch: 6}); err != nil {
			t.Errorf("v1.12.6 (listed) refused: %v", err)
		}
	}
}
