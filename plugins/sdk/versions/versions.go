// Package versions holds the version rules of the Talos lifecycle in their
// one home, for the built-in plugins, the bot and external plugin authors
// alike: release versions (MAJOR.MINOR.PATCH, no pre-releases), the
// adjacent-minor rule (one minor at a time: runbook R10 for Talos, R20 for
// Kubernetes) and the latest-patch rule (each stop at the newest known patch
// of its minor). It imports only the standard library.
package versions

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// Version is a released version MAJOR.MINOR.PATCH (Talos or Kubernetes).
// Pre-releases are not Versions: the bot rolls only releases.
type Version struct{ Major, Minor, Patch int }

// Parse reads "v1.13.9" or "1.36.3".
func Parse(s string) (Version, error) {
	parts := strings.Split(strings.TrimPrefix(strings.TrimSpace(s), "v"), ".")
	if len(parts) != 3 {
		return Version{}, fmt.Errorf("version %q is not MAJOR.MINOR.PATCH (e.g. v1.13.9 or 1.36.3)", s)
	}
	var v [3]int
	for i, p := range parts {
		n, err := strconv.Atoi(p)
		if err != nil || p[0] < '0' || p[0] > '9' || (len(p) > 1 && p[0] == '0') { // Atoi takes "+9"
			return Version{}, fmt.Errorf("version %q is not MAJOR.MINOR.PATCH (e.g. v1.13.9 or 1.36.3)", s)
		}
		v[i] = n
	}
	return Version{v[0], v[1], v[2]}, nil
}

// Tag is the Talos spelling, "v1.13.9".
func (v Version) Tag() string { return "v" + v.Plain() }

// Plain is the Kubernetes spelling, "1.36.3".
func (v Version) Plain() string { return fmt.Sprintf("%d.%d.%d", v.Major, v.Minor, v.Patch) }

// MinorTag is "v1.13"; MinorPlain is "1.36".
func (v Version) MinorTag() string   { return "v" + v.MinorPlain() }
func (v Version) MinorPlain() string { return fmt.Sprintf("%d.%d", v.Major, v.Minor) }

// IsZero reports an unknown version.
func (v Version) IsZero() bool { return v == Version{} }

// Compare returns -1, 0 or 1.
func (v Version) Compare(o Version) int {
	for _, d := range [3]int{v.Major - o.Major, v.Minor - o.Minor, v.Patch - o.Patch} {
		if d != 0 {
			if d < 0 {
				return -1
			}
			return 1
		}
	}
	return 0
}

// SameMinor reports whether v and o share MAJOR.MINOR.
func (v Version) SameMinor(o Version) bool { return v.Major == o.Major && v.Minor == o.Minor }

// ParseAll parses the releases in list and returns them ascending without
// duplicates, skipping what is not a release (a pre-release such as
// v1.14.0-beta.0, as Image Factory lists for its newest minor).
func ParseAll(list []string) []Version {
	out := make([]Version, 0, len(list))
	for _, s := range list {
		if v, err := Parse(s); err == nil {
			out = append(out, v)
		}
	}
	slices.SortFunc(out, Version.Compare)
	return slices.Compact(out)
}

// LatestPatch is the newest of known in minor's MAJOR.MINOR.
func LatestPatch(known []Version, minor Version) (Version, bool) {
	var best Version
	found := false
	for _, v := range known {
		if v.SameMinor(minor) && (!found || v.Compare(best) > 0) {
			best, found = v, true
		}
	}
	return best, found
}

// LatestPerMinor is the newest patch of each minor in known, ascending.
func LatestPerMinor(known []Version) []Version {
	var out []Version
	for _, v := range known {
		if n := len(out); n > 0 && out[n-1].SameMinor(v) {
			if v.Compare(out[n-1]) > 0 {
				out[n-1] = v
			}
			continue
		}
		out = append(out, v)
	}
	return out
}

// Tags spells vs the Talos way.
func Tags(vs []Version) []string {
	out := make([]string, len(vs))
	for i, v := range vs {
		out[i] = v.Tag()
	}
	return out
}

// SkipsMinor is the adjacent-minor rule in its one place (R10 for Talos, R20
// for Kubernetes): from → to changes the major version or skips a minor (a
// patch of the same minor or any release of the next one does not). Every
// check of a step, and every decision whether a path needs more than one
// hop, asks it.
func SkipsMinor(from, to Version) bool {
	if to.Major != from.Major || to.Minor > from.Minor+1 { // rule:R10
		return true
	}
	return false
}

// NextMinor is the first release of the minor after v's (v1.13.9 → v1.14.0):
// the next stop of a path one adjacent minor at a time.
func NextMinor(v Version) Version { return Version{v.Major, v.Minor + 1, 0} }

// IsLatestPatch is the latest-patch rule: v is the newest of known in its
// minor. It returns the newest known patch of v's minor (ok false when known
// has none of that minor).
func IsLatestPatch(known []Version, v Version) (newest Version, latest, ok bool) {
	newest, ok = LatestPatch(known, v)
	return newest, ok && newest.Compare(v) <= 0, ok
}
