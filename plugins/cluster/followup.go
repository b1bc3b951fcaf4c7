package cluster

import (
	"strings"

	lifecyclev1 "github.com/talosbot/talosbot/plugins/proto/lifecycle/v1"
	"github.com/talosbot/talosbot/plugins/sdk"
)

// FollowupLines returns the host's lines about prepared Terraform changes
// (Settings.Extra[sdk.ExtraGitFollowup], written by bot/gitbump), for the
// drift report and the plan guard.
func FollowupLines(s *lifecyclev1.Settings) []string {
	v := strings.TrimSpace(s.GetExtra()[sdk.ExtraGitFollowup])
	if v == "" {
		return nil
	}
	return strings.Split(v, "\n")
}
