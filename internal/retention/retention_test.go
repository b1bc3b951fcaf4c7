package retention

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

func kept(ds []Decision) string {
	var ids []string
	for _, d := range ds {
		if !d.Delete {
			ids = append(ids, d.ID)
		}
	}
	return strings.Join(ids, ",")
}

// hourlyItems returns n items one hour apart, the newest at end, named h0..h(n-1).
func hourlyItems(end time.Time, n int) []Item {
	var out []Item
	for i := range n {
		out = append(out, Item{ID: fmt.Sprintf("h%d", i), At: end.Add(-time.Duration(n-1-i) * time.Hour)})
	}
	return out
}

func TestKeepNewest(t *testing.T) {
	now := time.Date(2026, 3, 10, 0, 0, 0, 0, time.UTC)
	ds := Select(hourlyItems(now, 5), Policy{Keep: 2}, now, nil)
	if got := kept(ds); got != "h4,h3" {
		t.Fatalf("kept %s", got)
	}
}

func TestEmptyPolicyKeepsAll(t *testing.T) {
	now := time.Date(2026, 3, 10, 0, 0, 0, 0, time.UTC)
	if got := kept(Select(hourlyItems(now, 3), Policy{}, now, nil)); got != "h2,h1,h0" {
		t.Fatalf("kept %s", got)
	}
}

func TestMaxAgeNeverDeletesNewest(t *testing.T) {
	now := time.Date(2026, 3, 10, 0, 0, 0, 0, time.UTC)
	items := hourlyItems(now.Add(-30*24*time.Hour), 3) // all older than max age
	if got := kept(Select(items, Policy{MaxAge: 7 * 24 * time.Hour}, now, nil)); got != "h2" {
		t.Fatalf("kept %s, want only the newest", got)
	}
}

func TestGenerations(t *testing.T) {
	// One snapshot every 6 hours for 70 days.
	end := time.Date(2026, 3, 31, 18, 0, 0, 0, time.UTC)
	var items []Item
	for i := range 70 * 4 {
		at := end.Add(-time.Duration(i) * 6 * time.Hour)
		items = append(items, Item{ID: at.Format("20060102T15"), At: at})
	}
	ds := Select(items, Policy{Hourly: 2, Daily: 3, Weekly: 2, Monthly: 3}, end, nil)
	got := kept(ds)
	// hourly: the two newest hours (31st 18h, 12h); daily: 31st, 30th, 29th
	// (newest of each: 18h); weekly: the ISO week of 31 March (Tue) → 31st
	// 18h, and the week before (ends Sun 29th) → 29th 18h; monthly: March →
	// 31st 18h, February → 28th 18h, January → 31st 18h.
	want := "20260331T18,20260331T12,20260330T18,20260329T18,20260228T18,20260131T18"
	if got != want {
		t.Fatalf("kept %s\nwant %s", got, want)
	}
	for _, d := range ds {
		if d.ID == "20260228T18" && d.Reason != "monthly" {
			t.Fatalf("28 Feb kept as %q", d.Reason)
		}
	}
}

func TestProtectedSurvivesEveryRule(t *testing.T) {
	now := time.Date(2026, 3, 10, 0, 0, 0, 0, time.UTC)
	items := hourlyItems(now, 50)
	prot := map[string]bool{"h3": true}
	// A record-named snapshot survives many runs, each adding a new snapshot.
	for run := range 20 {
		items = append(items, Item{ID: fmt.Sprintf("n%d", run), At: now.Add(time.Duration(run+1) * time.Hour)})
		var next []Item
		for _, d := range Select(items, Policy{Keep: 1, MaxAge: time.Hour}, now.Add(time.Duration(run+1)*time.Hour), prot) {
			if !d.Delete {
				next = append(next, d.Item)
			} else if d.ID == "h3" {
				t.Fatalf("run %d deleted the protected snapshot", run)
			}
		}
		items = next
	}
	if got := kept(Select(items, Policy{Keep: 1}, now, prot)); got != "n19,h3" {
		t.Fatalf("kept %s", got)
	}
}
