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
	lifecyclev1 "github.com/talosbot/talosbot/plugins/proto/lifecycle/v1"
	"github.com/talosbot/talosbot/plugins/releaseinfo"
	"github.com/talosbot/talosbot/sim"
	"github.com/talosbot/talosbot/state"
)

// inProcess is the plugin host reduced to one in-process plugin.
type inProcess struct{}

func (inProcess) Plan(ctx context.Context, name string, req *lifecyclev1.OperationRequest) (*lifecyclev1.OperationPlan, error) {
	return releaseinfo.New().Plan(ctx, req)
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
	notes := (&releasenotice.Notes{Source: src, Config: cfg, Now: func() time.Time { return now }}).RequestNotes(ctx, "staging")
	if notes[releases.NoteVersions] != "v1.12.6,v1.13.9" || !strings.HasPrefix(notes[releases.NoteOrigin], "Image Factory") || f.Hits("/versions") != hits {
		t.Errorf("notes %v (hits %d → %d)", notes, hits, f.Hits("/versions"))
	}
}
