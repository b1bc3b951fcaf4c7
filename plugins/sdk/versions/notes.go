package versions

import "strings"

// Settings.Extra keys by which the bot hands its release data to every
// plugin, built-in or external (the bot sets them on each request). They
// hold versions and a description, never secrets.
const (
	// NoteVersions is every known Talos release, comma-separated.
	NoteVersions = "releases.versions"
	// NoteTargets is the releases upgrades may target or pass through:
	// every known one (Image Factory and releases.talos), or the allow-list
	// with releases.listed_only.
	NoteTargets = "releases.targets"
	// NoteOrigin says where the list came from and its age.
	NoteOrigin = "releases.origin"
	// NoteKubernetes is releases.kubernetes, comma-separated.
	NoteKubernetes = "releases.kubernetes"
	// NoteFactory is releases.factory_url ("" when none).
	NoteFactory = "releases.factory_url"
	// NoteListedOnly is "true" with releases.listed_only: NoteTargets is
	// then the allow-list, and a target outside it must be refused.
	NoteListedOnly = "releases.listed_only"
)

// Notes is the bot's release data as a plugin receives it.
type Notes struct {
	Versions, Targets, Kubernetes []Version
	Origin, FactoryURL            string
	// ListedOnly is releases.listed_only: Targets is the allow-list.
	ListedOnly bool
}

// ReadNotes reads the release data from a request's Settings.Extra. ok is
// false when the bot sent none (an older bot, or no list at all): a plugin
// then falls back to Settings.known_talos_releases, and targets nothing it
// cannot confirm (fail closed).
func ReadNotes(extra map[string]string) (n Notes, ok bool) {
	if _, ok := extra[NoteVersions]; !ok {
		return n, false
	}
	split := func(s string) []string {
		if s == "" {
			return nil
		}
		return strings.Split(s, ",")
	}
	return Notes{
		Versions:   ParseAll(split(extra[NoteVersions])),
		Targets:    ParseAll(split(extra[NoteTargets])),
		Kubernetes: ParseAll(split(extra[NoteKubernetes])),
		Origin:     extra[NoteOrigin],
		FactoryURL: extra[NoteFactory],
		ListedOnly: extra[NoteListedOnly] == "true",
	}, true
}
