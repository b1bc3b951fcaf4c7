// Package retention decides which snapshots a retention policy deletes. It
// is pure: callers list what they hold (local files or off-site objects),
// delete what Select returns, and so apply one rule in both places.
//
// Two things are never deleted, whatever the policy says: the newest
// snapshot (the last known good one) and any snapshot an operation record
// still names (the caller passes those ids in, already limited to the soak
// period: see docs/BACKUPS.md).
package retention

import (
	"fmt"
	"sort"
	"strings"
	"time"
)

// Policy keeps every snapshot that any of its rules keeps (the union, as
// restic's forget does). Keep keeps the newest Keep; Hourly/Daily/Weekly/
// Monthly keep the newest snapshot of each of the newest N hours, days, ISO
// weeks and months that hold one. MaxAge deletes snapshots older than it even
// when a count rule keeps them. All zero keeps everything.
type Policy struct {
	Keep, Hourly, Daily, Weekly, Monthly int
	MaxAge                               time.Duration
}

// Empty reports whether the policy deletes nothing.
func (p Policy) Empty() bool { return !p.counts() && p.MaxAge <= 0 }

func (p Policy) counts() bool {
	return p.Keep > 0 || p.Hourly > 0 || p.Daily > 0 || p.Weekly > 0 || p.Monthly > 0
}

// String describes the policy for a plan summary.
func (p Policy) String() string {
	if p.Empty() {
		return "all (no retention configured)"
	}
	var parts []string
	for _, r := range []struct {
		n    int
		what string
	}{{p.Keep, "newest"}, {p.Hourly, "hourly"}, {p.Daily, "daily"}, {p.Weekly, "weekly"}, {p.Monthly, "monthly"}} {
		if r.n > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", r.n, r.what))
		}
	}
	if p.MaxAge > 0 {
		parts = append(parts, "none older than "+p.MaxAge.String())
	}
	return strings.Join(parts, ", ")
}

// Item is one snapshot: its id and when it was taken.
type Item struct {
	ID string
	At time.Time
}

// Decision is why an item is kept or deleted.
type Decision struct {
	Item
	Delete bool
	// Reason is a short human reason: "newest", "named by a record",
	// "daily", "older than 720h0m0s", "beyond the policy".
	Reason string
}

// Select decides every item. protected holds ids that are never deleted.
// Items come back newest first.
func Select(items []Item, p Policy, now time.Time, protected map[string]bool) []Decision {
	sorted := append([]Item(nil), items...)
	sort.Slice(sorted, func(i, j int) bool {
		if !sorted[i].At.Equal(sorted[j].At) {
			return sorted[i].At.After(sorted[j].At)
		}
		return sorted[i].ID > sorted[j].ID
	})
	keptBy := make([]string, len(sorted))
	if p.counts() {
		for i := range sorted {
			if i < p.Keep {
				keptBy[i] = "newest"
			}
		}
		for _, g := range []struct {
			n    int
			name string
			key  func(time.Time) string
		}{
			{p.Hourly, "hourly", func(t time.Time) string { return t.UTC().Format("2006010215") }},
			{p.Daily, "daily", func(t time.Time) string { return t.UTC().Format("20060102") }},
			{p.Weekly, "weekly", func(t time.Time) string { y, w := t.UTC().ISOWeek(); return fmt.Sprintf("%d-%d", y, w) }},
			{p.Monthly, "monthly", func(t time.Time) string { return t.UTC().Format("200601") }},
		} {
			if g.n <= 0 {
				continue
			}
			seen := map[string]bool{}
			for i, it := range sorted {
				k := g.key(it.At)
				if seen[k] {
					continue
				}
				if len(seen) == g.n {
					break
				}
				seen[k] = true
				if keptBy[i] == "" {
					keptBy[i] = g.name
				}
			}
		}
	}
	out := make([]Decision, len(sorted))
	for i, it := range sorted {
		d := Decision{Item: it}
		switch {
		case i == 0:
			d.Reason = "newest"
		case protected[it.ID]:
			d.Reason = "named by a record"
		case p.MaxAge > 0 && now.Sub(it.At) > p.MaxAge:
			d.Delete, d.Reason = true, "older than "+p.MaxAge.String()
		case p.Empty():
			d.Reason = "no retention configured"
		case !p.counts():
			d.Reason = "younger than " + p.MaxAge.String()
		case keptBy[i] != "":
			d.Reason = keptBy[i]
		default:
			d.Delete, d.Reason = true, "beyond the policy"
		}
		out[i] = d
	}
	return out
}
