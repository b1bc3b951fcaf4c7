// Package certnotice warns before certificates expire. Once a day (by
// default; certificates.notice_schedule) it reads every cluster's
// certificates through the read-only `certs` plugin (plugins/certinfo)
// and, when one the bot depends on crosses a threshold
// (certificates.notice_days, default 30, 14, 7 and 1 days ahead) or has
// expired, posts one notice in the cluster's channel naming each such
// certificate, its expiry and the runbook step that renews it, with a
// button to list them all and one to snooze.
//
// A notice is never repeated within a threshold: the record of what was
// posted lives in the store (bucket cert_notices, keyed by cluster,
// certificate fingerprint and threshold), so a restart repeats nothing. A
// certificate that crossed several thresholds between two checks is
// announced once, at the nearest. Serving certificates Talos renews on its
// own (certexpiry.Cert.AutoRenewed) are exported but not announced.
//
// Every check also sets the gauge talosbot_certificate_expiry_seconds
// (seconds to expiry per cluster and certificate) for alerting. Only
// public facts leave the plugin: sources, subjects, issuers, serials,
// fingerprints and dates (internal/certexpiry); nothing here sees a key.
//
// Time is injected: Check does one round for a given instant and is what
// the tests drive; Run is the thin cron loop.
package certnotice

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/robfig/cron/v3"

	"github.com/talosbot/talosbot/bot/chat"
	"github.com/talosbot/talosbot/bot/notice"
	"github.com/talosbot/talosbot/config"
	"github.com/talosbot/talosbot/internal/certexpiry"
	"github.com/talosbot/talosbot/state"
)

// Bucket is the kv bucket of posted notices and snoozes.
const Bucket = "cert_notices"

// User is the identity of the check in posts and records.
const User = "talosbot-certs"

// DefaultSnooze is how long the snooze button silences a cluster's notices.
const DefaultSnooze = 7 * 24 * time.Hour

// Expired is the threshold of the notice for a certificate past its expiry.
const Expired = 0

// Inspector reads a cluster's certificates without changing anything.
type Inspector interface {
	Inspect(ctx context.Context, cluster string) (*certexpiry.Inventory, error)
}

// Action is a button that runs a command as whoever clicks it.
type Action = notice.Action

// Poster posts a message with buttons to a channel.
type Poster = notice.Poster

// Options wire the notifier.
type Options struct {
	Config    *config.Config
	Store     *state.Store
	Inspector Inspector
	Poster    Poster
	Now       func() time.Time
	Log       *slog.Logger
	// Registerer receives the expiry gauge (nil: not exported).
	Registerer prometheus.Registerer
}

// Notifier checks certificates and posts notices.
type Notifier struct {
	o      Options
	sched  cron.Schedule // nil: checks off
	expiry *prometheus.GaugeVec
}

// New builds the notifier from config.Certificates.
func New(o Options) (*Notifier, error) {
	if o.Config == nil || o.Store == nil || o.Inspector == nil || o.Poster == nil {
		return nil, errors.New("certnotice: Config, Store, Inspector and Poster are required")
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	n := &Notifier{o: o, expiry: prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "talosbot_certificate_expiry_seconds",
		Help: "Seconds until each certificate the bot can see expires (negative once expired), as of the last daily check.",
	}, []string{"cluster", "certificate", "kind", "subject"})}
	if o.Registerer != nil {
		if err := o.Registerer.Register(n.expiry); err != nil {
			return nil, fmt.Errorf("register the certificate expiry gauge: %w", err)
		}
	}
	if spec := o.Config.Certificates.NoticeSchedule; spec != config.ScheduleOff && spec != "" {
		s, err := cron.ParseStandard(spec)
		if err != nil {
			return nil, fmt.Errorf("certificates.notice_schedule: %q is not a cron expression: %w", spec, err)
		}
		n.sched = s
	}
	return n, nil
}

// Due is one certificate announced at one threshold.
type Due struct {
	Cert      certexpiry.Cert
	Threshold int // days; Expired once past
	DaysLeft  int
}

// Outcome is what Check did for one cluster.
type Outcome struct {
	Cluster string
	// Text is the notice posted (empty: none).
	Text string
	// Posted are the certificates it announced.
	Posted []Due
	// Skipped says why nothing was posted (snoozed, no channel, …).
	Skipped string
	Err     error
}

type record struct {
	At       time.Time `json:"at"`
	Channel  string    `json:"channel,omitempty"`
	Serial   string    `json:"serial"`
	NotAfter time.Time `json:"not_after"`
}

func noticeKey(cluster, fingerprint string, threshold int) string {
	return fmt.Sprintf("notice/%s/%s/%d", cluster, fingerprint, threshold)
}

// Threshold is the notice a certificate with daysLeft is due at: the
// nearest threshold it has reached (Expired once past), or false when it
// has reached none.
func Threshold(thresholds []int, daysLeft int) (int, bool) {
	if daysLeft < 0 {
		return Expired, true
	}
	best, ok := 0, false
	for _, t := range thresholds {
		if daysLeft < t && (!ok || t < best) {
			best, ok = t, true
		}
	}
	return best, ok
}

// readConcurrency bounds the clusters read at once by a check: each read
// is a plugin Plan of a few TLS handshakes, so a fleet is read in about one
// cluster's time without opening every cluster's connections at once.
const readConcurrency = 8

// Check runs one round at now: every cluster read side by side, then each
// posted in config order.
func (n *Notifier) Check(ctx context.Context, now time.Time) []Outcome {
	type read struct {
		in  *certexpiry.Inventory
		err error
	}
	reads := make([]read, len(n.o.Config.Clusters))
	sem := make(chan struct{}, readConcurrency)
	var wg sync.WaitGroup
	for i, cl := range n.o.Config.Clusters {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			in, err := n.o.Inspector.Inspect(ctx, cl.Name)
			reads[i] = read{in, err}
		})
	}
	wg.Wait()
	var out []Outcome
	for i, cl := range n.o.Config.Clusters {
		oc := Outcome{Cluster: cl.Name}
		in, err := reads[i].in, reads[i].err
		switch {
		case err != nil:
			oc.Err = fmt.Errorf("read the certificates of %s: %w", cl.Name, err)
			n.o.Log.Warn("certificate notices", "cluster", cl.Name, "err", oc.Err)
		default:
			n.export(cl.Name, in, now)
			if len(cl.Channels) == 0 {
				oc.Skipped = "no channel (clusters[].channels)"
				break
			}
			oc.Text, oc.Posted, oc.Skipped, oc.Err = n.checkCluster(ctx, now, cl, in)
		}
		out = append(out, oc)
	}
	return out
}

// export sets the gauge for the cluster's certificates, dropping those no
// longer seen (a renewed certificate replaces the old one).
func (n *Notifier) export(cluster string, in *certexpiry.Inventory, now time.Time) {
	n.expiry.DeletePartialMatch(prometheus.Labels{"cluster": cluster})
	for _, c := range in.Certs {
		n.expiry.WithLabelValues(cluster, c.Source, c.Kind, c.Subject).Set(c.Left(now).Seconds())
	}
}

func (n *Notifier) checkCluster(ctx context.Context, now time.Time, cl config.Cluster, in *certexpiry.Inventory) (string, []Due, string, error) {
	until, err := n.SnoozedUntil(ctx, cl.Name)
	if err != nil {
		return "", nil, "", err
	}
	if now.Before(until) {
		return "", nil, fmt.Sprintf("snoozed until %s", until.UTC().Format(time.RFC3339)), nil
	}
	thresholds := n.o.Config.Certificates.Thresholds()
	in.Sort()
	var due []Due
	if err := n.o.Store.View(ctx, func(tx *state.Tx) error {
		for _, c := range in.Certs {
			if c.AutoRenewed {
				continue
			}
			left := c.DaysLeft(now)
			t, ok := Threshold(thresholds, left)
			if !ok {
				continue
			}
			_, err := tx.GetKV(Bucket, noticeKey(cl.Name, c.Fingerprint, t))
			if err == nil {
				continue // posted at this threshold already
			}
			if !errors.Is(err, state.ErrNotFound) {
				return err
			}
			due = append(due, Due{Cert: c, Threshold: t, DaysLeft: left})
		}
		return nil
	}); err != nil {
		return "", nil, "", err
	}
	if len(due) == 0 {
		return "", nil, "", nil
	}
	channel := cl.Channels[0]
	text := noticeText(cl.Name, due)
	actions := []Action{
		{Label: "List certificates", Command: "/talos certs " + cl.Name},
		{Label: "Snooze 7d", Command: "/talos certs snooze " + cl.Name},
	}
	if err := n.o.Poster.Post(ctx, channel, text, actions); err != nil {
		return "", nil, "", fmt.Errorf("post the certificate notice to %s: %w", channel, err)
	}
	// Recorded after posting: a failed post is tried again next round; a
	// crash between the two posts it twice, which beats never.
	if err := n.o.Store.Update(ctx, func(tx *state.Tx) error {
		for _, d := range due {
			raw, err := json.Marshal(record{At: now.UTC(), Channel: channel, Serial: d.Cert.Serial, NotAfter: d.Cert.NotAfter})
			if err != nil {
				return err
			}
			if err := tx.PutKV(Bucket, noticeKey(cl.Name, d.Cert.Fingerprint, d.Threshold), raw); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		return text, due, "", fmt.Errorf("record the certificate notice: %w", err)
	}
	return text, due, "", nil
}

// noticeText names each certificate, when it expires, and how to renew it.
// Subjects and issuers come from the cluster: the chat adapters escape the
// whole text for their platform (chat.Message).
func noticeText(cluster string, due []Due) string {
	var b strings.Builder
	fmt.Fprintf(&b, "🔐 Certificates of %s expire soon:", cluster)
	for _, d := range due {
		when := d.Cert.NotAfter.UTC().Format("2006-01-02 15:04 UTC")
		switch d.Threshold {
		case Expired:
			fmt.Fprintf(&b, "\n• ❌ %s expired on %s (%d days ago)", d.Cert.Source, when, -d.DaysLeft)
		default:
			fmt.Fprintf(&b, "\n• ⚠️ %s expires on %s: %d days left (the %d-day notice)", d.Cert.Source, when, d.DaysLeft, d.Threshold)
		}
		fmt.Fprintf(&b, "\n  subject %s, issuer %s, serial %s", d.Cert.Subject, d.Cert.Issuer, d.Cert.Serial)
		if d.Cert.Kind == certexpiry.KindClient {
			b.WriteString("\n  the bot cannot act on this cluster once it expires")
		}
		fmt.Fprintf(&b, "\n  renew: %s", d.Cert.Renew)
	}
	return b.String()
}

// Snooze silences cluster's notices until until (audited, as by).
// Thresholds crossed meanwhile are announced when it ends (each once).
func (n *Notifier) Snooze(ctx context.Context, cluster, by string, until time.Time) error {
	if n.o.Config.Cluster(cluster) == nil {
		return fmt.Errorf("unknown cluster %s; %s", chat.Echo(cluster), n.o.Config.ClustersHint(cluster))
	}
	return Snoozes.Put(ctx, n.o.Store, cluster, by, n.o.Now(), until)
}

// SnoozedUntil is the end of cluster's snooze (zero: not snoozed).
func (n *Notifier) SnoozedUntil(ctx context.Context, cluster string) (time.Time, error) {
	return SnoozedUntil(ctx, n.o.Store, cluster)
}

// SnoozedUntil is the end of cluster's snooze in st (zero: not snoozed).
func SnoozedUntil(ctx context.Context, st *state.Store, cluster string) (time.Time, error) {
	return Snoozes.Until(ctx, st, cluster)
}

// Snoozes are the notices' snoozes (`/talos certs snooze`), at most 30
// days: a certificate a day from expiry must not be silenced past it by a
// typo.
var Snoozes = notice.Snoozes{Bucket: Bucket, Command: "certs snooze", Action: "certs.snoozed", Default: DefaultSnooze, Max: 30 * 24 * time.Hour}

// Next is when the next check is due after t (zero when checks are off).
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
