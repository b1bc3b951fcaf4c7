package releases

import (
	"strconv"
	"strings"
	"time"

	"github.com/talosbot/talosbot/plugins/sdk/versions"
)

// Settings.Extra keys by which the bot hands the release data to plugins
// (bot/releasenotice.Hook sets them): defined in the SDK
// (plugins/sdk/versions), which external plugins read them with.
const (
	NoteVersions   = versions.NoteVersions
	NoteTargets    = versions.NoteTargets
	NoteOrigin     = versions.NoteOrigin
	NoteKubernetes = versions.NoteKubernetes
	NoteFactory    = versions.NoteFactory
	NoteListedOnly = versions.NoteListedOnly
)

// Notes is the release data as a plugin receives it.
type Notes struct {
	Versions, Targets, Kubernetes []Version
	Origin, FactoryURL            string
	// ListedOnly is releases.listed_only: Targets is the allow-list.
	ListedOnly bool
}

// Allowed refuses (R10, a *Refusal) a Talos upgrade target that is not a
// known release (R11 when it is a known Kubernetes release: CheckKind) (Targets), or outside the allow-list with
// releases.listed_only; the same rule as List.Allowed (CheckTarget).
func (n Notes) Allowed(v Version) error {
	if err := CheckKind(KindTalos, v, n.Versions, n.Kubernetes); err != nil {
		return err
	}
	return CheckTarget(KindTalos, v, n.Targets, n.Versions, n.ListedOnly)
}

// AllowedKubernetes refuses (R20, a *Refusal) a Kubernetes upgrade target
// that is not in releases.kubernetes (CheckTarget); R11 when it is a known
// Talos release (CheckKind).
func (n Notes) AllowedKubernetes(v Version) error {
	if err := CheckKind(KindKubernetes, v, n.Kubernetes, n.Versions); err != nil {
		return err
	}
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
func ReadNotes(extra map[string]string) (Notes, bool) {
	n, ok := versions.ReadNotes(extra)
	return Notes(n), ok
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
