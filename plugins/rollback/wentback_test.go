package rollback

import "testing"

// A rollback has worked only when the node runs an older release than
// before: the same release (Talos kept or re-selected the current
// partition) or a newer one is a failure, for parseable versions and, by
// plain comparison, for ones that do not parse. (Issue 34: a rollback that
// "went back" to the same version survived mutation.)
func TestWentBackNeedsAnOlderRelease(t *testing.T) {
	for _, c := range []struct {
		before, after string
		ok            bool
	}{
		{"v1.13.9", "v1.12.6", true},
		{"v1.13.9", "v1.13.8", true},
		{"v1.13.9", "v1.13.9", false},
		{"v1.13.9", "v1.14.1", false},
		{"v1.14.0-rc.1", "v1.14.0-beta.0", true},
		{"v1.14.0", "v1.14.0-rc.1", true},
		{"custom-a", "custom-b", true},
		{"custom-a", "custom-a", false},
	} {
		err := wentBack(c.before, c.after)
		if (err == nil) != c.ok {
			t.Errorf("wentBack(%s, %s) = %v, want ok=%t", c.before, c.after, err, c.ok)
		}
	}
}
