// Package releases knows the Talos and Kubernetes releases: where the list
// of Talos versions comes from (Image Factory, its cached copy in the
// store, the configured releases.talos), and how to get from the running
// version to a target one adjacent minor at a time (R10, R20).
//
// It links no Talos library, so the bot process may use it: the support
// matrix comes in through the Matrix interface, which package
// releases/compat implements with machinery's compatibility tables for
// the plugins (and the tests).
package releases

import "github.com/talosbot/talosbot/plugins/sdk/versions"

// Version is a released version MAJOR.MINOR.PATCH (Talos or Kubernetes);
// it and the version rules live in the SDK (plugins/sdk/versions), their
// one home, so that external plugins use the same rules.
type Version = versions.Version

// Parse reads "v1.13.9" or "1.36.3".
func Parse(s string) (Version, error) { return versions.Parse(s) }

// ParseAll parses the releases in list, ascending, without duplicates or pre-releases.
func ParseAll(list []string) []Version { return versions.ParseAll(list) }

// LatestPatch is the newest of known in minor's MAJOR.MINOR.
func LatestPatch(known []Version, minor Version) (Version, bool) {
	return versions.LatestPatch(known, minor)
}

// LatestPerMinor is the newest patch of each minor in known, ascending.
func LatestPerMinor(known []Version) []Version { return versions.LatestPerMinor(known) }

// Tags spells vs the Talos way.
func Tags(vs []Version) []string { return versions.Tags(vs) }
