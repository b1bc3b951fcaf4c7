package cluster

import (
	"strings"

	"github.com/talosbot/talosbot/plugins/sdk"
)

// FollowupLines returns the host's lines about prepared Terraform changes
// (Settings.Extra[sdk.ExtraGitFollowup], written by bot/gitbump), for the
// drift report and the plan guard.
func FollowupLines(s *sdk.Settings) []string {
	v := strings.TrimSpace(s.Extra[sdk.ExtraGitFollowup])
	if v == "" {
		return nil
	}
	return strings.Split(v, "\n")
}
