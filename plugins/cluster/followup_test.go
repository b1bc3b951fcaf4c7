package cluster

import (
	"strings"
	"testing"

	lifecyclev1 "github.com/talosbot/talosbot/plugins/sdk/proto/lifecycle/v1"
)

// The bot's typed Git follow-up evidence is printed one line per change,
// saying what to do next for each state.
func TestFollowupLinesFromEvidence(t *testing.T) {
	f := func(st lifecyclev1.GitFollowupState) *lifecyclev1.GitFollowup {
		return &lifecyclev1.GitFollowup{Variable: "talos_version", Value: "v1.13.9", Branch: "talosbot/b", OperationId: "op1",
			Base: "main", State: st, PullRequestUrl: "https://forge/pr/1", Error: "remote gone"}
	}
	lines := FollowupLines(&lifecyclev1.Settings{GitFollowups: []*lifecyclev1.GitFollowup{
		f(lifecyclev1.GitFollowupState_GIT_FOLLOWUP_STATE_OPEN), f(lifecyclev1.GitFollowupState_GIT_FOLLOWUP_STATE_MERGED),
		f(lifecyclev1.GitFollowupState_GIT_FOLLOWUP_STATE_DELETED), f(lifecyclev1.GitFollowupState_GIT_FOLLOWUP_STATE_UNCHECKED),
	}})
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
	if FollowupLines(&lifecyclev1.Settings{}) != nil {
		t.Error("no evidence must print nothing")
	}
}
