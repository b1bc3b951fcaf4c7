package bot_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/talosbot/talosbot/bot/releasenotice"
	"github.com/talosbot/talosbot/internal/releases"
	"github.com/talosbot/talosbot/state"
)

// TestReleasesSnooze: the notices' snooze button runs `/talos releases
// snooze`: operators may, viewers may not; it is audited, bounded, and the
// notifier honours it.
func TestReleasesSnooze(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	// In the production channel the cluster may be omitted.
	if _, err := e.submit("alice", "prd", "/talos releases snooze --for 3d"); err != nil {
		t.Fatal(err)
	}
	n, err := releasenotice.New(releasenotice.Options{Config: e.cfg, Store: e.store, Releases: noReleases{}, Inspector: noInspector{}, Poster: noPoster{}, Now: e.clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	until, err := n.SnoozedUntil(ctx, "production")
	if err != nil || !until.Equal(e.clock.Now().Add(72*time.Hour)) {
		t.Errorf("snoozed until %s (%v), want %s", until, err, e.clock.Now().Add(72*time.Hour))
	}
	if recs, _ := e.store.QueryAudit(ctx, state.AuditQuery{Action: "releases.snoozed", Cluster: "production"}); len(recs) != 1 || recs[0].Actor != "alice" {
		t.Errorf("not audited: %+v", recs)
	}
	// A viewer may not; a silly length is refused; nothing changes.
	if _, err := e.submit("carol", "prd", "/talos releases snooze production"); err == nil || !strings.Contains(err.Error(), "viewer") {
		t.Errorf("viewer snooze: %v", err)
	}
	if _, err := e.submit("alice", "prd", "/talos releases snooze production --for 400d"); err == nil || !strings.Contains(err.Error(), "at most") && !strings.Contains(err.Error(), "between") {
		t.Errorf("400d: %v", err)
	}
	if u, _ := n.SnoozedUntil(ctx, "production"); !u.Equal(until) {
		t.Errorf("a refused snooze changed it to %s", u)
	}
}

type noReleases struct{}

func (noReleases) Talos(context.Context) (*releases.List, error) { return &releases.List{}, nil }

type noInspector struct{}

func (noInspector) Inspect(context.Context, string, []releases.Version) (*releases.Inspection, error) {
	return nil, context.Canceled
}

type noPoster struct{}

func (noPoster) Post(context.Context, string, string, []releasenotice.Action) error { return nil }
