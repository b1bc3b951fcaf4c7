package snapname

import (
	"testing"
	"time"
)

func TestNewIsUniqueAndParses(t *testing.T) {
	at := time.Date(2026, 12, 2, 14, 30, 0, 250_000_000, time.UTC)
	seen := map[string]bool{}
	for range 100 {
		n := New(at, "cp-1")
		if seen[n] {
			t.Fatalf("%s made twice for the same instant", n)
		}
		seen[n] = true
		for _, ext := range []string{".db", ".db.age"} {
			name, got, enc, ok := Parse(n + ext)
			if !ok || name != n || !got.Equal(at) || enc != (ext == ".db.age") {
				t.Fatalf("Parse(%s) = %q %v %v %v", n+ext, name, got, enc, ok)
			}
		}
	}
}

func TestParse(t *testing.T) {
	for _, c := range []struct {
		file, name string
		at         time.Time
		ok         bool
	}{
		// The names written before the unique suffix still parse.
		{"20261202T143000Z-cp-1.db", "20261202T143000Z-cp-1", time.Date(2026, 12, 2, 14, 30, 0, 0, time.UTC), true},
		{"20261202T143000Z-node.example.com.db.age", "20261202T143000Z-node.example.com", time.Date(2026, 12, 2, 14, 30, 0, 0, time.UTC), true},
		{"20261202T143000.007Z-cp-1-0a1b2c3d.db", "20261202T143000.007Z-cp-1-0a1b2c3d", time.Date(2026, 12, 2, 14, 30, 0, 7_000_000, time.UTC), true},
		{"20261202T143000.007Z-cp-1-0a1b2c3d.db.part", "", time.Time{}, false},
		{"20261202T143000Z-cp-1.db.age.part", "", time.Time{}, false},
		{"notes.txt", "", time.Time{}, false},
		{"20261302T143000Z-cp-1.db", "", time.Time{}, false}, // month 13
		{".staging.lock", "", time.Time{}, false},
	} {
		name, at, _, ok := Parse(c.file)
		if ok != c.ok || name != c.name || !at.Equal(c.at) {
			t.Errorf("Parse(%s) = %q %v %v, want %q %v %v", c.file, name, at, ok, c.name, c.at, c.ok)
		}
	}
}

// New names sort in time order by name within a second too.
func TestNewSortsByTime(t *testing.T) {
	a := New(time.Date(2026, 12, 2, 14, 30, 0, 0, time.UTC), "cp-2")
	b := New(time.Date(2026, 12, 2, 14, 30, 0, 250_000_000, time.UTC), "cp-1")
	if !(a < b) {
		t.Fatalf("%s sorts after %s", a, b)
	}
}
