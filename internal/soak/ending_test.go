package soak

import (
	"slices"
	"testing"
)

// TestEndingLinesParse: the ending check reads the engine's ending lines
// (bot/engine/endings.go, Ending.Lines) as they appear in a stopped run's
// message; a pattern that matched nothing would make the check vacuous.
func TestEndingLinesParse(t *testing.T) {
	t.Parallel()
	text := `upgrade of cp-3 failed; the roll stopped, no later node was touched. cp-3 is unchanged: it runs v1.11.6
Where every node was left:
• worker-1: partly done, at v1.12.6
• cp-1: done, at v1.13.9 — node 2/4 cp-1
• cp-2: not started, at v1.12.6
• cp-3: failed, version unknown (check it before going on) — hop 1/2 → v1.12.6: node 4/4 cp-3: v1.11.6 → v1.12.6: upgrade cp-3
• cp-4: already there, at v1.13.9
⚠️ the cluster is at mixed versions (v1.13.9, unknown, v1.12.6); finish or undo the change`
	var got []string
	for _, m := range endingLine.FindAllStringSubmatch(text, -1) {
		got = append(got, m[1]+"|"+m[2]+"|"+m[3])
	}
	want := []string{"worker-1|partly done|v1.12.6", "cp-1|done|v1.13.9", "cp-2|not started|v1.12.6", "cp-3|failed|", "cp-4|already there|v1.13.9"}
	if !slices.Equal(got, want) {
		t.Fatalf("parsed %q, want %q", got, want)
	}
}
