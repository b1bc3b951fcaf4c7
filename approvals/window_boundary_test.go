package approvals

import (
	"testing"
	"time"

	"github.com/talosbot/talosbot/config"
)

// A maintenance window includes its start minute and excludes its end minute;
// a window whose end is before its start runs past midnight into the next day,
// and only the day it starts on is named. (Issue 34: both boundaries survived
// mutation.)
func TestInWindowBoundariesAndPastMidnight(t *testing.T) {
	sameDay := []config.Window{{Days: []string{"tue"}, Start: "20:00", End: "23:00", Timezone: "Europe/Berlin"}}
	offHour := []config.Window{{Days: []string{"wed"}, Start: "21:30", End: "22:15", Timezone: "UTC"}}
	pastMidnight := []config.Window{{Days: []string{"sat"}, Start: "22:00", End: "02:00", Timezone: "UTC"}}
	cases := []struct {
		name string
		ws   []config.Window
		at   string
		want bool
	}{
		{"same day: a minute before the start", sameDay, "2026-12-01T18:59:00Z", false}, // 19:59 CET
		{"same day: the start minute", sameDay, "2026-12-01T19:00:00Z", true},
		{"same day: the last minute", sameDay, "2026-12-01T21:59:59Z", true},
		{"same day: the end minute is outside", sameDay, "2026-12-01T22:00:00Z", false},
		{"same day: another day at the same time", sameDay, "2026-12-02T19:30:00Z", false},
		{"minutes: a minute before a half-past start", offHour, "2026-12-02T21:29:00Z", false},
		{"minutes: the half-past start", offHour, "2026-12-02T21:30:00Z", true},
		{"minutes: the last minute before a quarter-past end", offHour, "2026-12-02T22:14:00Z", true},
		{"minutes: the quarter-past end", offHour, "2026-12-02T22:15:00Z", false},
		{"past midnight: a minute before the start", pastMidnight, "2026-12-05T21:59:00Z", false}, // Saturday
		{"past midnight: the start minute", pastMidnight, "2026-12-05T22:00:00Z", true},
		{"past midnight: just before midnight", pastMidnight, "2026-12-05T23:59:00Z", true},
		{"past midnight: midnight, the next day", pastMidnight, "2026-12-06T00:00:00Z", true},
		{"past midnight: the last minute, the next day", pastMidnight, "2026-12-06T01:59:00Z", true},
		{"past midnight: the end minute is outside", pastMidnight, "2026-12-06T02:00:00Z", false},
		{"past midnight: the evening of a day not named", pastMidnight, "2026-12-06T22:30:00Z", false}, // Sunday
		{"past midnight: early on the named day itself", pastMidnight, "2026-12-05T01:00:00Z", false},  // Saturday 01:00 belongs to Friday's window
		{"past midnight: the morning after a day not named", pastMidnight, "2026-12-07T01:00:00Z", false},
	}
	for _, c := range cases {
		at, err := time.Parse(time.RFC3339, c.at)
		if err != nil {
			t.Fatal(err)
		}
		if got := InWindow(c.ws, at); got != c.want {
			t.Errorf("%s (%s): InWindow = %t, want %t", c.name, c.at, got, c.want)
		}
	}
}
