package cluster

import (
	"fmt"

	"github.com/talosbot/talosbot/plugins/sdk"
)

// FollowupLines renders the bot's evidence about the Terraform changes it
// prepared as Git branches (Evidence.GitFollowups, from bot/gitbump) for
// the drift report and the plan guard: one line per change.
func FollowupLines(followups []sdk.GitFollowup) []string {
	var lines []string
	for _, f := range followups {
		what := fmt.Sprintf("branch %s (%s → %q, operation %s)", f.Branch, f.Variable, f.Value, f.OperationID)
		pull := ""
		if f.PullRequestURL != "" {
			pull = " Pull request: " + f.PullRequestURL
		}
		switch f.State {
		case sdk.GitFollowupMerged:
			lines = append(lines, fmt.Sprintf("📝 Git: %s is merged into %s.", what, f.Base))
		case sdk.GitFollowupOpen:
			lines = append(lines, fmt.Sprintf("📝 Git: %s is not merged into %s yet: merge it, then plan and apply.%s", what, f.Base, pull))
		case sdk.GitFollowupDeleted:
			lines = append(lines, fmt.Sprintf("⚠️ Git: %s was deleted without being merged; %s does not declare %q.", what, f.Base, f.Value))
		case sdk.GitFollowupUnchecked:
			lines = append(lines, fmt.Sprintf("⚠️ Git: could not check %s: %s", what, f.Error))
		default: // unset, or a state of a newer host: say so rather than invent a reason
			lines = append(lines, fmt.Sprintf("⚠️ Git: %s is in a state this plugin does not know (%d).", what, f.State))
		}
	}
	return lines
}
