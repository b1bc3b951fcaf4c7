package sdk

import "github.com/talosbot/talosbot/plugins/sdk/versions"

// ReleaseNotes reads the bot's release data (Evidence.Releases) as
// versions (pre-releases dropped). ok is false when the bot sent none: a
// plugin then knows no release and targets nothing (fail closed).
func ReleaseNotes(r *Releases) (n versions.Notes, ok bool) {
	if r == nil {
		return n, false
	}
	return versions.Notes{
		Versions:   versions.ParseAll(r.Versions),
		Targets:    versions.ParseAll(r.Targets),
		Kubernetes: versions.ParseAll(r.Kubernetes),
		Origin:     r.Origin,
		FactoryURL: r.FactoryURL,
		ListedOnly: r.ListedOnly,
	}, true
}
