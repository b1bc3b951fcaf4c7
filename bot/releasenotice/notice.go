// Package releasenotice posts new-release notices: once a day (by default;
// releases.notice_schedule) it compares what each cluster runs with the
// known Talos releases (internal/releases) and, when a newer patch or
// minor exists, posts to the cluster's channel: the release notes link,
// whether the running Kubernetes version is supported by it, and buttons
// to plan the upgrade and to snooze.
//
// Staging first (R6): a notice offers "plan on staging" (every staging
// cluster). A production cluster is offered its own upgrade only once a
// staging cluster runs that version — a second notice, posted once, when
// that happens. No notice is posted twice for one cluster, version and
// kind; the record of what was posted lives in the store, so a restart
// repeats nothing.
//
// The bot never talks to Talos itself: what a cluster runs, and which
// Kubernetes versions a Talos release supports (machinery's matrix), come
// through the Inspector, which the wiring implements with the read-only
// releases plugin. Time is injected: Check does one round for a given
// instant and is what the tests drive; Run is the thin cron loop.
package releasenotice

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/robfig/cron/v3"

	"github.com/talosbot/talosbot/bot/chat"
	"github.com/talosbot/talosbot/bot/notice"
	"github.com/talosbot/talosbot/config"
	"github.com/talosbot/talosbot/internal/releases"
	"github.com/talosbot/talosbot/plugins/sdk/versions"
	"github.com/talosbot/talosbot/state"
)

// Bucket is the kv bucket of posted notices and snoozes.
const Bucket = "release_notices"

// DefaultSnooze is how long the snooze button silences a cluster's notices.
const DefaultSnooze = 7 * 24 * time.Hour

// NotesURL is where a Talos release's notes are.
func NotesURL(v releases.Version) string {
	return "https://github.com/siderolabs/talos/releases/tag/" + v.Tag()
}

// Inspector reads a cluster without changing it (the releases plugin).
type Inspector interface {
	Inspect(ctx context.Context, cluster string, known []releases.Version) (*releases.Inspection, error)
}

// ReleaseList is releases.Source.
type ReleaseList interface {
	Talos(ctx context.Context) (*releases.List, error)
}

// Action is a button that runs a command as whoever clicks it, through the
// same grammar and policy as a typed command.
type Action = notice.Action

// Poster posts a message with buttons to a channel (the wiring mints the
// buttons with the engine's CommandButtons).
type Poster = notice.Poster

// Options wire the notifier.
type Options struct {
	Config    *config.Config
	Store     *state.Store
	Releases  ReleaseList
	Inspector Inspector
	Poster    Poster
	Now       func() time.Time
	Log       *slog.Logger
}

// Notifier checks for new releases and posts notices.
type Notifier struct {
	o     Options
	sched cron.Schedule // nil: notices off
}

// New builds the notifier from releases.notice_schedule.
func New(o Options) (*Notifier, error) {
	if o.Config == nil || o.Store == nil || o.Releases == nil || o.Inspector == nil || o.Poster == nil {
		return nil, errors.New("releasenotice: Config, Store, Releases, Inspector and Poster are required")
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	n := &Notifier{o: o}
	if spec := o.Config.Releases.NoticeSchedule; spec != config.ScheduleOff && spec != "" {
		s, err := cron.ParseStandard(spec)
		if err != nil {
			return nil, fmt.Errorf("releases.notice_schedule: %q is not a cron expression: %w", spec, err)
		}
		n.sched = s
	}
	return n, nil
}

// Kinds of notice.
const (
	// KindNew announces a release newer than the cluster runs.
	KindNew = "new"
	// KindPromote tells a production cluster that staging runs a release.
	KindPromote = "promote"
)

// Notice is one posted (or due) notice.
type Notice struct {
	Cluster, Channel string
	Version          releases.Version
	Kind             string
	Text             string
	Actions          []Action
	also             string // another key the posted notice stands for
}

// Outcome is what Check did for one cluster.
type Outcome struct {
	Cluster string
	Posted  []Notice
	// Skipped says why nothing was checked (snoozed, no channel, …).
	Skipped string
	Err     error
}

type record struct {
	At      time.Time `json:"at"`
	Channel string    `json:"channel,omitempty"`
}

func noticeKey(cluster string, v releases.Version, kind string) string {
	return "notice/" + cluster + "/" + v.Tag() + "/" + kind
}

// Snooze silences cluster's notices until until (audited, as by). Releases
// that appear meanwhile are announced when it ends (each once).
func (n *Notifier) Snooze(ctx context.Context, cluster, by string, until time.Time) error {
	if n.o.Config.Cluster(cluster) == nil {
		return fmt.Errorf("unknown cluster %s; %s", chat.Echo(cluster), n.o.Config.ClustersHint(cluster))
	}
	return Snoozes.Put(ctx, n.o.Store, cluster, by, n.o.Now(), until)
}

// SnoozedUntil is the end of cluster's snooze (zero: not snoozed).
func (n *Notifier) SnoozedUntil(ctx context.Context, cluster string) (time.Time, error) {
	return Snoozes.Until(ctx, n.o.Store, cluster)
}

// Snoozes are the notices' snoozes (`/talos releases snooze`), at most 90
// days so that a typo does not silence a cluster for years.
var Snoozes = notice.Snoozes{Bucket: Bucket, Command: "releases snooze", Action: "releases.snoozed", Default: DefaultSnooze, Max: 90 * 24 * time.Hour}

// candidates are the releases a cluster running running is told about:
// the newest patch of its minor, and the newest release of all when that
// is in a later minor.
func candidates(known []releases.Version, running releases.Version) []releases.Version {
	var out []releases.Version
	if lp, ok := releases.LatestPatch(known, running); ok && lp.Compare(running) > 0 {
		out = append(out, lp)
	}
	if len(known) > 0 {
		newest := known[len(known)-1]
		if newest.Compare(running) > 0 && !newest.SameMinor(running) {
			out = append(out, newest)
		}
	}
	return out
}

// Check runs one round at now: every cluster, in config order.
func (n *Notifier) Check(ctx context.Context, now time.Time) []Outcome {
	list, err := n.o.Releases.Talos(ctx)
	if err != nil {
		n.o.Log.Error("release notices: no release list", "err", err)
		return []Outcome{{Err: err}}
	}
	known := list.Versions
	// What staging runs decides whether production is offered a version.
	insp := map[string]*releases.Inspection{}
	inspErr := map[string]error{}
	for _, cl := range n.o.Config.Clusters {
		in, err := n.o.Inspector.Inspect(ctx, cl.Name, known)
		if err != nil {
			inspErr[cl.Name] = err
			continue
		}
		insp[cl.Name] = in
	}
	var out []Outcome
	for _, cl := range n.o.Config.Clusters {
		oc := Outcome{Cluster: cl.Name}
		switch {
		case inspErr[cl.Name] != nil:
			oc.Err = fmt.Errorf("read what %s runs: %w", cl.Name, inspErr[cl.Name])
			n.o.Log.Warn("release notices", "cluster", cl.Name, "err", oc.Err)
		case len(cl.Channels) == 0:
			oc.Skipped = "no channel (clusters[].channels)"
		default:
			oc.Posted, oc.Skipped, oc.Err = n.checkCluster(ctx, now, cl, list, insp)
		}
		out = append(out, oc)
	}
	return out
}

func (n *Notifier) checkCluster(ctx context.Context, now time.Time, cl config.Cluster, list *releases.List, insp map[string]*releases.Inspection) ([]Notice, string, error) {
	until, err := n.SnoozedUntil(ctx, cl.Name)
	if err != nil {
		return nil, "", err
	}
	if now.Before(until) {
		return nil, fmt.Sprintf("snoozed until %s", until.UTC().Format(time.RFC3339)), nil
	}
	in := insp[cl.Name]
	var due []Notice
	for _, v := range candidates(list.Versions, in.Talos) {
		if cl.Environment == config.EnvProduction && stagingRuns(n.o.Config, insp, v) {
			// Staging is there already: one notice that offers production,
			// which also stands for the "new" one.
			nt := n.notice(cl, v, KindPromote, list, in, insp, now)
			nt.also = noticeKey(cl.Name, v, KindNew)
			due = append(due, nt)
			continue
		}
		due = append(due, n.notice(cl, v, KindNew, list, in, insp, now))
	}
	var posted []Notice
	for _, nt := range due {
		key := noticeKey(cl.Name, nt.Version, nt.Kind)
		seen := false
		if err := n.o.Store.View(ctx, func(tx *state.Tx) error {
			_, err := tx.GetKV(Bucket, key)
			seen = err == nil
			if errors.Is(err, state.ErrNotFound) {
				return nil
			}
			return err
		}); err != nil {
			return posted, "", err
		}
		if seen {
			continue
		}
		if err := n.o.Poster.Post(ctx, nt.Channel, nt.Text, nt.Actions); err != nil {
			return posted, "", fmt.Errorf("post the %s notice to %s: %w", nt.Version.Tag(), nt.Channel, err)
		}
		// Recorded after posting: a failed post is tried again next round;
		// a crash between the two posts it twice, which beats never.
		raw, _ := json.Marshal(record{At: now.UTC(), Channel: nt.Channel})
		if err := n.o.Store.Update(ctx, func(tx *state.Tx) error {
			if nt.also != "" {
				if err := tx.PutKV(Bucket, nt.also, raw); err != nil {
					return err
				}
			}
			return tx.PutKV(Bucket, key, raw)
		}); err != nil {
			return posted, "", fmt.Errorf("record the %s notice: %w", nt.Version.Tag(), err)
		}
		posted = append(posted, nt)
	}
	return posted, "", nil
}

// stagingRuns reports whether some staging cluster runs v on every node.
func stagingRuns(cfg *config.Config, insp map[string]*releases.Inspection, v releases.Version) bool {
	for _, cl := range cfg.Clusters {
		if in := insp[cl.Name]; cl.Environment == config.EnvStaging && in != nil && in.Talos == v {
			return true
		}
	}
	return false
}

func stagingNames(cfg *config.Config) []string {
	var out []string
	for _, cl := range cfg.Clusters {
		if cl.Environment == config.EnvStaging {
			out = append(out, cl.Name)
		}
	}
	return out
}

func (n *Notifier) notice(cl config.Cluster, v releases.Version, kind string, list *releases.List, in *releases.Inspection, insp map[string]*releases.Inspection, now time.Time) Notice {
	nt := Notice{Cluster: cl.Name, Channel: cl.Channels[0], Version: v, Kind: kind}
	var b strings.Builder
	switch kind {
	case KindPromote:
		fmt.Fprintf(&b, "🚀 Talos %s runs on staging; %s (%s) runs %s and may follow.", v.Tag(), cl.Name, cl.Environment, in.Talos.Tag())
	default:
		what := "a newer patch"
		if !v.SameMinor(in.Talos) {
			what = "a newer minor release"
		}
		fmt.Fprintf(&b, "🆕 Talos %s is out (%s): %s runs %s.", v.Tag(), what, cl.Name, in.Talos.Tag())
	}
	fmt.Fprintf(&b, "\n• release notes: %s", NotesURL(v))
	rng, ok := in.Supports[v]
	switch {
	case in.Kubernetes.IsZero():
		fmt.Fprintf(&b, "\n• Kubernetes: the running version is unknown; Talos %s supports %s", v.MinorTag(), rangeText(rng, ok))
	case in.KubernetesOK(v):
		fmt.Fprintf(&b, "\n• Kubernetes %s is supported by Talos %s (%s)", in.Kubernetes.Plain(), v.MinorTag(), rng)
	default:
		fmt.Fprintf(&b, "\n• ⚠️ Kubernetes %s is not supported by Talos %s (%s): the plan will name the Kubernetes upgrade to do first", in.Kubernetes.Plain(), v.MinorTag(), rangeText(rng, ok))
	}
	if versions.SkipsMinor(in.Talos, v) {
		fmt.Fprintf(&b, "\n• path: one adjacent minor at a time, latest patch of each (`/talos releases %s` shows the hops)", cl.Name)
	}
	// The breaking changes on the way (releases.BreakingChanges); the
	// upgrade's target pre-flight checks the cluster for them.
	for _, l := range releases.CrossedLines(in.Talos, v) {
		fmt.Fprintf(&b, "\n• ⚠️ %s (`/talos releases %s` lists them; the upgrade's pre-flight checks the cluster)", l, cl.Name)
	}
	if err := list.Allowed(v); err != nil {
		fmt.Fprintf(&b, "\n• not in releases.talos (releases.listed_only): add it once reviewed")
	}
	fmt.Fprintf(&b, "\n• release data: %s", list.Describe(now))
	// Staging first: production is offered only once staging runs v.
	if cl.Environment == config.EnvProduction && kind == KindPromote {
		nt.Actions = append(nt.Actions, Action{Label: "Plan on " + cl.Name, Command: fmt.Sprintf("/talos upgrade talos %s %s", v.Tag(), cl.Name)})
	} else {
		for _, s := range stagingNames(n.o.Config) {
			if si := insp[s]; si != nil && si.Talos == v {
				continue // already there
			}
			nt.Actions = append(nt.Actions, Action{Label: "Plan on " + s, Command: fmt.Sprintf("/talos upgrade talos %s %s", v.Tag(), s)})
		}
		if cl.Environment == config.EnvProduction {
			b.WriteString("\n• production is offered once staging runs it (R6)")
		}
	}
	nt.Actions = append(nt.Actions, Action{Label: "Snooze 7d", Command: "/talos releases snooze " + cl.Name})
	nt.Text = b.String()
	return nt
}

func rangeText(r releases.KubeRange, ok bool) string {
	if !ok || r.Min.IsZero() {
		return "an unknown range"
	}
	return "Kubernetes " + r.String()
}

// Next is when the next check is due after t (zero when notices are off).
func (n *Notifier) Next(t time.Time) time.Time {
	if n.sched == nil {
		return time.Time{}
	}
	return n.sched.Next(t)
}

// Run checks at each scheduled time until ctx ends.
func (n *Notifier) Run(ctx context.Context) error {
	if n.sched == nil {
		return nil
	}
	notice.Loop(ctx, n.o.Now, n.Next, func(ctx context.Context, now time.Time) { n.Check(ctx, now) })
	return nil
}
