package render

import (
	"time"

	"github.com/talosbot/talosbot/bot/chat"
)

// Duration is chat.Duration: d in words ("14 days", never "336h0m0s").
func Duration(d time.Duration) string { return chat.Duration(d) }

// Ago says how long before now t was: "3 h ago".
func Ago(t, now time.Time) string {
	if now.Sub(t) < time.Minute {
		return "just now"
	}
	return chat.Duration(now.Sub(t)) + " ago"
}

// When is a moment both relative and absolute, with its date:
// "in 30 min, 2026-12-01 08:31 UTC" (or "30 min ago, …").
func When(t, now time.Time) string {
	abs := t.UTC().Format("2006-01-02 15:04 MST")
	if t.After(now) {
		return "in " + chat.Duration(t.Sub(now)) + ", " + abs
	}
	return Ago(t, now) + ", " + abs
}
