package releases

import (
	"slices"
	"time"

	"github.com/talosbot/talosbot/plugins/sdk"
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

// NotesOf is the release evidence the bot sends every request
// (sdk.Evidence.Releases): l's versions and targets, and the configured
// Kubernetes releases.
func NotesOf(l *List, kubernetes []string, now time.Time) *sdk.Releases {
	return &sdk.Releases{
		Versions: Tags(l.Versions), Targets: Tags(l.Targets()), Origin: l.Describe(now),
		Kubernetes: slices.Clone(kubernetes), FactoryURL: l.URL, ListedOnly: l.ListedOnly,
	}
}

// ReadNotes reads the release evidence. ok is false when the bot sent none.
func ReadNotes(r *sdk.Releases) (Notes, bool) {
	n, ok := sdk.ReleaseNotes(r)
	return Notes(n), ok
}

// RequestNotes are the releases a plugin plans against and checks targets
// with: the bot's release evidence, or, when the bot sent none, nothing
// known, so that every Talos and Kubernetes target is refused (fail
// closed). The bot sends the configured releases when it has no list
// (bot/releasenotice.Notes).
func RequestNotes(r *sdk.Releases) Notes {
	if n, ok := ReadNotes(r); ok {
		return n
	}
	return Notes{Origin: "none (the bot sent no release data)"}
}

// Known are the releases a plugin plans against (RequestNotes): the
// Talos releases upgrades may target or pass through, and the Kubernetes
// ones.
func Known(r *sdk.Releases) (talos, kubernetes []Version) {
	n := RequestNotes(r)
	return n.Targets, n.Kubernetes
}
