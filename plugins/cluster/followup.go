package cluster

import (
	"fmt"

	lifecyclev1 "github.com/talosbot/talosbot/plugins/sdk/proto/lifecycle/v1"
)

// FollowupLines renders the bot's evidence about the Terraform changes it
// prepared as Git branches (Settings.git_followups, from bot/gitbump) for
// the drift report and the plan guard: one line per change.
func FollowupLines(s *lifecyclev1.Settings) []string {
	var lines []string
	for _, f := range s.GetGitFollowups() {
		what := fmt.Sprintf("branch %s (%s → %q, operation %s)", f.GetBranch(), f.GetVariable(), f.GetValue(), f.GetOperationId())
		pull := ""
		if u := f.GetPullRequestUrl(); u != "" {
			pull = " Pull request: " + u
		}
		switch f.GetState() {
		case lifecyclev1.GitFollowupState_GIT_FOLLOWUP_STATE_MERGED:
			lines = append(lines, fmt.Sprintf("📝 Git: %s is merged into %s.", what, f.GetBase()))
		case lifecyclev1.GitFollowupState_GIT_FOLLOWUP_STATE_OPEN:
			lines = append(lines, fmt.Sprintf("📝 Git: %s is not merged into %s yet: merge it, then plan and apply.%s", what, f.GetBase(), pull))
		case lifecyclev1.GitFollowupState_GIT_FOLLOWUP_STATE_DELETED:
			lines = append(lines, fmt.Sprintf("⚠️ Git: %s was deleted without being merged; %s does not declare %q.", what, f.GetBase(), f.GetValue()))
		default:
			lines = append(lines, fmt.Sprintf("⚠️ Git: could not check %s: %s", what, f.GetError()))
		}
	}
	return lines
}
