package render

import (
	"strings"
	"testing"
)

// The passed checks stay on one card line however many checks the plugins
// add: past the width the rest are counted and pointed to Details.
func TestNamesWithinKeepsOneLine(t *testing.T) {
	few := []string{"upgrade path", "node identity"}
	if got := namesWithin(few, riskWidth); got != "upgrade path, node identity" {
		t.Errorf("few names = %q, want them all", got)
	}
	many := []string{"upgrade path", "installer platform and schematic", "Kubernetes support", "drain forecast", "node identity", "target pre-flight", "something else"}
	got := namesWithin(many, riskWidth)
	if n := len([]rune(got)); n > riskWidth {
		t.Errorf("%d runes, want at most %d: %q", n, riskWidth, got)
	}
	if !strings.HasPrefix(got, "upgrade path, installer platform and schematic") || !strings.HasSuffix(got, " more (Details)") {
		t.Errorf("many names = %q, want the first named and the rest counted", got)
	}
	if got := namesWithin([]string{strings.Repeat("x", 200), "y"}, riskWidth); got != "2 checks (Details)" {
		t.Errorf("no name fits = %q", got)
	}
}
