package cluster

import (
	"strings"
	"testing"

	"github.com/talosbot/talosbot/plugins/sdk"
)

// The bot's typed Git follow-up evidence is printed one line per change,
// saying what to do next for each state.
func TestFollowupLinesFromEvidence(t *testing.T) {
	f := func(st sdk.GitFollowupState) sdk.GitFollowup {
		return sdk.GitFollowup{Variable: "talos_version", Value: "v1.13.9", Branch: "talosbot/b", OperationID: "op1",
			Base: "main", State: st, PullRequestURL: "https://forge/pr/1", Error: "remote gone"}
	}
	lines := FollowupLines([]sdk.GitFollowup{
		f(sdk.GitFollowupOpen), f(sdk.GitFollowupMerged), f(sdk.GitFollowupDeleted), f(sdk.GitFollowupUnchecked),
	})
	want := []string{
		`branch talosbot/b (talos_version → "v1.13.9", operation op1) is not merged into main yet: merge it, then plan and apply. Pull request: https://forge/pr/1`,
		"is merged into main.",
		`was deleted without being merged; main does not declare "v1.13.9".`,
		"could not check branch talosbot/b (talos_version → \"v1.13.9\", operation op1): remote gone",
	}
	if len(lines) != len(want) {
		t.Fatalf("lines = %q", lines)
	}
	for i, w := range want {
		if !strings.Contains(lines[i], w) {
			t.Errorf("line %d = %q, want %q", i, lines[i], w)
		}
	}
	if got := FollowupLines([]sdk.GitFollowup{f(sdk.GitFollowupUnspecified)}); len(got) != 1 || strings.Contains(got[0], "could not check") ||
		!strings.Contains(got[0], "state this plugin does not know (0)") {
		t.Errorf("unknown state = %q, want it said, not an empty \"could not check\"", got)
	}
	if FollowupLines(nil) != nil {
		t.Error("no evidence must print nothing")
	}
}
