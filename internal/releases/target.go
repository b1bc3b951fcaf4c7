package releases

import (
	"fmt"
	"slices"
)

// Kind is which releases a target is checked against.
type Kind int

// The two kinds of release an upgrade targets.
const (
	KindTalos Kind = iota
	KindKubernetes
)

// name is "Talos" or "Kubernetes".
func (k Kind) name() string {
	if k == KindKubernetes {
		return "Kubernetes"
	}
	return "Talos"
}

// key is the config list that declares a release of this kind.
func (k Kind) key() string {
	if k == KindKubernetes {
		return "releases.kubernetes"
	}
	return "releases.talos"
}

// rule is the runbook rule a refusal cites (R10 Talos, R20 Kubernetes).
func (k Kind) rule() string {
	if k == KindKubernetes {
		return "R20"
	}
	return "R10"
}

// spell writes a version as this kind is written: "v1.13.9", "1.36.3".
func (k Kind) spell(v Version) string {
	if k == KindKubernetes {
		return v.Plain()
	}
	return v.Tag()
}

// spellMinor writes v's minor: "v1.13", "1.36".
func (k Kind) spellMinor(v Version) string {
	if k == KindKubernetes {
		return v.MinorPlain()
	}
	return v.MinorTag()
}

// other is the kind of the other upgrade and command names the command
// that upgrades this kind.
func (k Kind) other() Kind {
	if k == KindKubernetes {
		return KindTalos
	}
	return KindKubernetes
}

func (k Kind) command() string {
	if k == KindKubernetes {
		return "/talos upgrade k8s"
	}
	return "/talos upgrade talos"
}

// CheckKind is rule R11 in its one place: a Talos upgrade does not upgrade
// Kubernetes, and a Kubernetes upgrade does not upgrade Talos. A target that
// is a known release of the other kind only (a Kubernetes version given to
// the Talos upgrade, or the reverse) is refused naming the other command, the
// separate operation, instead of being refused as an unknown release.
// own are the known releases of kind k, other those of the other kind.
func CheckKind(k Kind, target Version, own, other []Version) error {
	if slices.Contains(own, target) || !slices.Contains(other, target) { // rule:R11
		return nil
	}
	o := k.other()
	return &Refusal{Rule: "R11",
		Reason: fmt.Sprintf("%s is a %s release, not a %s one: a %s upgrade does not upgrade %s", o.spell(target), o.name(), k.name(), k.name(), o.name()),
		Fix:    fmt.Sprintf("run %s %s as its own operation, or give a %s release to %s", o.command(), o.spell(target), k.name(), k.command())}
}

// CheckTarget is the only-real-releases rule in its one place: an upgrade
// target must be a release the bot knows (targets: Image Factory's list or
// its cache together with releases.talos, or releases.kubernetes), else it
// is refused (a *Refusal), as is every target when nothing is known. A
// version that does not exist would otherwise be rolled to and reported
// as running. The refusal names the nearest known release — the newest
// patch of the target's minor, else the newest known release — and never a
// version the bot does not know (no "v1.14.x", no "v9.9").
//
// versions are every release known (they differ from targets only with
// releases.listed_only, which narrows targets to releases.talos: a target
// in versions but not in targets is refused as unlisted, not as unknown).
func CheckTarget(k Kind, target Version, targets, versions []Version, listedOnly bool) error {
	if slices.Contains(targets, target) { // rule:known-release
		return nil
	}
	t := k.spell(target)
	if len(targets) == 0 {
		fix := fmt.Sprintf("declare the %s releases you use under %s in the config", k.name(), k.key())
		if k == KindTalos {
			fix += ", or wait until the bot has read Image Factory (releases.factory_url; `/talos releases` shows the list)"
		}
		return &Refusal{Rule: k.rule(),
			Reason: fmt.Sprintf("no %s release is known, so %s cannot be checked against a real release: every %s target is refused", k.name(), t, k.name()),
			Fix:    fix + ", then plan again"}
	}
	nearest := fmt.Sprintf("the newest known %s release is %s", k.name(), k.spell(targets[len(targets)-1]))
	if lp, ok := LatestPatch(targets, target); ok {
		nearest = fmt.Sprintf("the newest %s patch is %s", k.spellMinor(target), k.spell(lp))
	}
	if listedOnly && slices.Contains(versions, target) {
		return &Refusal{Rule: k.rule(),
			Reason: fmt.Sprintf("%s is not in %s, and releases.listed_only allows only listed versions", t, k.key()),
			Fix:    fmt.Sprintf("add %s to %s once it is reviewed, or pick a listed one (%s)", t, k.key(), nearest)}
	}
	declare := fmt.Sprintf("declare it under %s in the config if it is a real release the list does not have yet", k.key())
	if k == KindTalos {
		declare = fmt.Sprintf("declare a release under %s in the config if the Image Factory list is out of date", k.key())
	}
	return &Refusal{Rule: k.rule(),
		Reason: fmt.Sprintf("%s is not a %s release the bot knows", t, k.name()),
		Fix:    fmt.Sprintf("%s (%s)", nearest, declare)}
}
