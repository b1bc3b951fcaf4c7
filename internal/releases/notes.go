package releases

import (
	"strconv"
	"strings"
	"time"
)

// Settings.Extra keys by which the bot hands the release data to plugins
// (bot/releasenotice.Hook sets them on every request). They hold versions
// and a description, never secrets.
const (
	// NoteVersions is every known Talos release, comma-separated.
	NoteVersions = "releases.versions"
	// NoteTargets is the releases upgrades may target or pass through:
	// every known one (factory and releases.talos), or the allow-list with
	// releases.listed_only. A target outside it is refused (Notes.Allowed).
	NoteTargets = "releases.targets"
	// NoteOrigin is List.Describe: where the list came from and its age.
	NoteOrigin = "releases.origin"
	// NoteKubernetes is releases.kubernetes, comma-separated.
	NoteKubernetes = "releases.kubernetes"
	// NoteFactory is releases.factory_url ("" when none), for the
	// schematic look-ups of R13/R14.
	NoteFactory = "releases.factory_url"
	// NoteListedOnly is "true" with releases.listed_only: NoteTargets is
	// then the allow-list, and a target outside it is refused (Allowed).
	NoteListedOnly = "releases.listed_only"
)

// Notes is the release data as a plugin receives it.
type Notes struct {
	Versions, Targets, Kubernetes []Version
	Origin, FactoryURL            string
	// ListedOnly is releases.listed_only: Targets is the allow-list.
	ListedOnly bool
}

// Allowed refuses (R10, a *Refusal) a Talos upgrade target that is not a
// known release (Targets), or outside the allow-list with
// releases.listed_only; the same rule as List.Allowed (CheckTarget).
func (n Notes) Allowed(v Version) error {
	return CheckTarget(KindTalos, v, n.Targets, n.Versions, n.ListedOnly)
}

// AllowedKubernetes refuses (R20, a *Refusal) a Kubernetes upgrade target
// that is not in releases.kubernetes (CheckTarget).
func (n Notes) AllowedKubernetes(v Version) error {
	return CheckTarget(KindKubernetes, v, n.Kubernetes, n.Kubernetes, false)
}

// NotesOf is what the bot puts in Settings.Extra.
func NotesOf(l *List, kubernetes []string, now time.Time) map[string]string {
	return map[string]string{
		NoteVersions:   strings.Join(Tags(l.Versions), ","),
		NoteTargets:    strings.Join(Tags(l.Targets()), ","),
		NoteOrigin:     l.Describe(now),
		NoteKubernetes: strings.Join(kubernetes, ","),
		NoteFactory:    l.URL,
		NoteListedOnly: strconv.FormatBool(l.ListedOnly),
	}
}

// ReadNotes reads Settings.Extra. ok is false when the bot sent no release
// data (an older bot, or no list at all): callers fall back to
// Settings.known_talos_releases.
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

// NotesOrConfigured are the releases a plugin plans against and checks
// targets with: the bot's release data (Settings.Extra, ReadNotes) when
// there is some, else the configured Talos releases
// (Settings.known_talos_releases) and no Kubernetes ones — so that a
// request without release data can target only declared Talos releases
// and no Kubernetes release at all (fail closed).
func NotesOrConfigured(extra map[string]string, configuredTalos []string) Notes {
	if n, ok := ReadNotes(extra); ok {
		return n
	}
	conf := ParseAll(configuredTalos)
	return Notes{Versions: conf, Targets: conf, Origin: "releases.talos (the bot sent no release data)"}
}

// Known are the releases a plugin plans against (NotesOrConfigured): the
// Talos releases upgrades may target or pass through, and the Kubernetes
// ones.
func Known(extra map[string]string, configuredTalos []string) (talos, kubernetes []Version) {
	n := NotesOrConfigured(extra, configuredTalos)
	return n.Targets, n.Kubernetes
}
