package cluster

import (
	"strings"

	"github.com/talosbot/talosbot/plugins/sdk"
	lifecyclev1 "github.com/talosbot/talosbot/plugins/sdk/proto/lifecycle/v1"
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
