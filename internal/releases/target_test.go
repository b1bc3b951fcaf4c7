package releases_test

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/talosbot/talosbot/internal/factory/factoryfake"
	"github.com/talosbot/talosbot/internal/releases"
	"github.com/talosbot/talosbot/internal/releases/compat"
)

// refusal asserts err is a *releases.Refusal of rule whose text has every
// want and, besides what (the target), none of the never.
func refusal(t *testing.T, what string, err error, rule string, want, never []string) {
	t.Helper()
	var rf *releases.Refusal
	if !errors.As(err, &rf) || rf.Rule != rule {
		t.Fatalf("%s: %v, want a %s refusal", what, err, rule)
	}
	for _, w := range want {
		if !strings.Contains(rf.Error(), w) {
			t.Errorf("%s: %q does not say %q", what, rf.Error(), w)
		}
	}
	// The target itself is named, of course; nothing else unknown may be.
	rest := strings.ReplaceAll(rf.Error(), what, "")
	for _, n := range never {
		if strings.Contains(rest, n) {
			t.Errorf("%s: %q names %q, a version the bot does not know", what, rf.Error(), n)
		}
	}
}

// TestOnlyRealTalosReleasesAreTargets: a version the factory's list does
// not have is refused, naming the newest patch of its minor (v1.13.99) or,
// when its minor is not known at all, the newest known release (v9.9.9) —
// never a version the bot does not know — and how to declare a release.
// A release declared in releases.talos but not (yet) listed by the factory
// is a target.
func TestOnlyRealTalosReleasesAreTargets(t *testing.T) {
	ctx := context.Background()
	clk := &clock{t: time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)}
	f := factoryfake.Start(t, factoryVersions...)
	src := source(t, f, openStore(t, filepath.Join(t.TempDir(), "s.db"), clk), clk, "v1.13.10")
	l, err := src.Talos(ctx)
	if err != nil || l.Origin != releases.OriginFactory {
		t.Fatalf("list: %+v %v", l, err)
	}
	n, ok := releases.ReadNotes(releases.NotesOf(l, []string{"1.35.2", "1.36.3"}, clk.Now()))
	if !ok {
		t.Fatal("no notes")
	}
	for _, check := range []func(releases.Version) error{l.Allowed, n.Allowed} {
		refusal(t, "v1.13.99", check(v("v1.13.99")), "R10",
			[]string{"v1.13.99 is not a Talos release the bot knows", "the newest v1.13 patch is v1.13.10", "declare a release under releases.talos"}, nil)
		refusal(t, "v9.9.9", check(v("v9.9.9")), "R10",
			[]string{"v9.9.9 is not a Talos release the bot knows", "the newest known Talos release is v1.13.10", "releases.talos"},
			[]string{"v9.9", "v1.14", ".x"})
		// The beta the factory lists is not a release either.
		refusal(t, "v1.14.0", check(v("v1.14.0")), "R10", []string{"the newest known Talos release is v1.13.10"}, []string{"v1.14.x"})
		for _, ok := range []string{"v1.13.9", "v1.11.2", "v1.13.10"} { // listed, listed, declared
			if err := check(v(ok)); err != nil {
				t.Errorf("%s refused: %v", ok, err)
			}
		}
	}
	refusal(t, "1.36.99", n.AllowedKubernetes(v("1.36.99")), "R20",
		[]string{"1.36.99 is not a Kubernetes release the bot knows", "the newest 1.36 patch is 1.36.3", "releases.kubernetes"}, nil)
	refusal(t, "9.9.9", n.AllowedKubernetes(v("9.9.9")), "R20",
		[]string{"the newest known Kubernetes release is 1.36.3"}, []string{"9.9", "1.37"})
	if err := n.AllowedKubernetes(v("1.35.2")); err != nil {
		t.Errorf("a declared Kubernetes release refused: %v", err)
	}
}

// TestNoKnownReleaseRefusesEveryTarget: with the factory unreachable,
// nothing cached and releases.talos empty there is no list, the plugins
// get none (Settings.known_talos_releases is empty too), and every target
// is refused, naming how to declare one; without releases.kubernetes every
// Kubernetes target is.
func TestNoKnownReleaseRefusesEveryTarget(t *testing.T) {
	ctx := context.Background()
	clk := &clock{t: time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)}
	f := factoryfake.Start(t, factoryVersions...)
	f.Close() // connection refused
	src := source(t, f, openStore(t, filepath.Join(t.TempDir(), "s.db"), clk), clk)
	if l, err := src.Talos(ctx); err == nil {
		t.Fatalf("a list from nothing: %+v", l)
	}
	// The bot sends no release data then (releasenotice.Notes), and the
	// plugin plans from the configured releases: none.
	n := releases.NotesOrConfigured(nil, nil)
	for _, target := range []string{"v1.13.9", "v1.12.6", "v1.13.99"} {
		refusal(t, target, n.Allowed(v(target)), "R10",
			[]string{"no Talos release is known", "every Talos target is refused", "declare the Talos releases you use under releases.talos"}, nil)
	}
	refusal(t, "Kubernetes", n.AllowedKubernetes(v("1.36.3")), "R20",
		[]string{"no Kubernetes release is known", "releases.kubernetes"}, nil)
	// An empty list in the notes is refused the same way.
	empty, _ := releases.ReadNotes(map[string]string{releases.NoteVersions: "", releases.NoteTargets: ""})
	refusal(t, "empty notes", empty.Allowed(v("v1.13.9")), "R10", []string{"no Talos release is known"}, nil)
	// Declared releases alone are targets.
	if err := releases.NotesOrConfigured(nil, []string{"v1.13.9"}).Allowed(v("v1.13.9")); err != nil {
		t.Errorf("a declared release refused: %v", err)
	}
}

// TestUpgradeFirstAdviceNamesOnlyKnownReleases: when a hop needs the other
// upgrade first and no release of the needed minor is known, the advice
// says what to declare instead of inventing "1.31.x" or "v1.14.x".
func TestUpgradeFirstAdviceNamesOnlyKnownReleases(t *testing.T) {
	known := releases.ParseAll(factoryVersions)
	_, err := releases.PlanTalos(compat.Machinery{}, releases.TalosRequest{
		Running: v("v1.11.6"), Target: v("v1.13.9"), Kubernetes: v("1.30.5"), Known: known,
	})
	refusal(t, "v1.13.9", err, "R20", []string{"the newest 1.31 patch, once declared under releases.kubernetes"}, []string{".x"})
	// Kubernetes 1.35 (the path's second hop) needs Talos v1.12, and no
	// v1.12 release is known.
	_, err = releases.PlanKubernetes(compat.Machinery{}, releases.KubeRequest{
		Talos: v("v1.11.6"), Running: v("1.33.4"), Target: v("1.36.3"), Known: vs("1.34.5", "1.35.2", "1.36.3"), KnownTalos: vs("v1.11.6"),
	})
	refusal(t, "1.36.3", err, "R20", []string{"declare its newest patch under releases.talos"}, []string{".x"})
}

// TestATargetOfTheOtherKindIsRefusedR11: a Talos upgrade does not upgrade
// Kubernetes and a Kubernetes upgrade does not upgrade Talos (R11). A
// Kubernetes release given to the Talos upgrade, or a Talos release given to
// the Kubernetes upgrade, is refused as R11, naming the other command as
// its own operation; releases of the right kind pass.
func TestATargetOfTheOtherKindIsRefusedR11(t *testing.T) {
	n := releases.Notes{
		Versions:   []releases.Version{v("v1.12.6"), v("v1.13.9")},
		Targets:    []releases.Version{v("v1.12.6"), v("v1.13.9")},
		Kubernetes: []releases.Version{v("1.35.2"), v("1.36.3")},
	}
	refusal(t, "1.36.3", n.Allowed(v("v1.36.3")), "R11",
		[]string{"1.36.3 is a Kubernetes release, not a Talos one", "a Talos upgrade does not upgrade Kubernetes",
			"run /talos upgrade k8s 1.36.3 as its own operation"}, nil)
	refusal(t, "v1.13.9", n.AllowedKubernetes(v("1.13.9")), "R11",
		[]string{"v1.13.9 is a Talos release, not a Kubernetes one", "a Kubernetes upgrade does not upgrade Talos",
			"run /talos upgrade talos v1.13.9 as its own operation"}, nil)
	if err := n.Allowed(v("v1.13.9")); err != nil {
		t.Errorf("a known Talos release refused: %v", err)
	}
	if err := n.AllowedKubernetes(v("1.36.3")); err != nil {
		t.Errorf("a known Kubernetes release refused: %v", err)
	}
	// A version neither kind knows stays the known-release rule's (R10).
	refusal(t, "v1.20.1", n.Allowed(v("v1.20.1")), "R10", []string{"not a Talos release the bot knows"}, nil)
}
