package cluster

import (
	"strings"

	lifecyclev1 "github.com/talosbot/talosbot/plugins/proto/lifecycle/v1"
	"github.com/talosbot/talosbot/plugins/sdk"
)

// ExtraGitFollowup is the Settings.Extra key under which the host reports
// the Terraform changes it prepared as Git branches and whether each was
// merged yet, one line per change (bot/gitbump writes it; defined once in
// plugins/sdk).
const ExtraGitFollowup = sdk.ExtraGitFollowup

// FollowupLines returns the host's lines about prepared Terraform changes,
// for the drift report and the plan guard.
func FollowupLines(s *lifecyclev1.Settings) []string {
	v := strings.TrimSpace(s.GetExtra()[ExtraGitFollowup])
	if v == "" {
		return nil
	}
	return strings.Split(v, "\n")
}
