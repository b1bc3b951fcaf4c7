package sim

import (
	"slices"
	"strings"

	"github.com/blang/semver/v4"
)

// talosReleases are the Talos versions whose installer images the sim's registry serves: every
// release of the sim's release catalogue (Releases, releases_catalogue.go: every v1.9–v1.14
// release, from Talos's own tags) and the v1.14 pre-releases, which the registries serve too, so
// an installer for a version that was never released ("v1.99.0", "v1.13.99") is NotFound as
// factory.talos.dev and ghcr.io answer it. A function, not a variable: the sim keeps no
// package-level mutable state.
func talosReleases() []string {
	out := []string{}

	for _, r := range Releases() {
		out = append(out, r.Version)
	}

	return append(out, "v1.14.0-alpha.0", "v1.14.0-alpha.1", "v1.14.0-alpha.2", "v1.14.0-beta.0", "v1.14.0-beta.1", "v1.14.0-rc.1")
}

// KnownTalosRelease reports whether the sim's registry has installers of Talos version v.
func KnownTalosRelease(v string) bool {
	return slices.Contains(talosReleases(), v)
}

// kubernetesRepos are the repositories of the Kubernetes images a node pulls (the machine
// config's kubelet and control-plane images, what `talosctl upgrade-k8s` pre-pulls). The sim
// serves any Kubernetes version tag of them: it has no list of Kubernetes releases, and the
// Kubernetes upgrade's own checks decide which versions are acceptable.
var kubernetesRepos = []string{
	"ghcr.io/siderolabs/kubelet",
	"registry.k8s.io/kube-apiserver",
	"registry.k8s.io/kube-controller-manager",
	"registry.k8s.io/kube-scheduler",
	"registry.k8s.io/kube-proxy",
}

// ghcrInstaller is the installer repository Sidero Labs published up to v1.13.
const ghcrInstaller = "ghcr.io/siderolabs/installer"

// installerRepo reports whether repo (a normalized repository name) is a Talos installer
// repository: ghcr.io/siderolabs/installer, or an Image Factory installer
// (factory.talos.dev/installer/<schematic>, factory.talos.dev/<platform>-installer/<schematic>).
func installerRepo(repo string) bool {
	if repo == ghcrInstaller {
		return true
	}

	parts := strings.Split(repo, "/")
	if len(parts) != 3 || parts[0] != "factory.talos.dev" || parts[2] == "" {
		return false
	}

	return parts[1] == "installer" || strings.HasSuffix(parts[1], "-installer")
}

// catalogueVersion is the version an image of repo:tag carries when the registry has it:
// installers of a catalogued Talos release, Kubernetes images of a version tag. Anything else
// (docker.io/library/nginx:v1.2.3, an installer of v1.99.0) the registry does not have.
func catalogueVersion(repo, tag string) (string, bool) {
	v := tag
	if !strings.HasPrefix(v, "v") {
		v = "v" + v
	}

	switch {
	case repo == ghcrInstaller:
		// From v1.14 only Image Factory installers are published (Release.GHCRInstaller).
		r, ok := LookupRelease(v)

		return v, ok && r.GHCRInstaller
	case installerRepo(repo):
		return v, KnownTalosRelease(v)
	case slices.Contains(kubernetesRepos, repo):
		_, err := semver.ParseTolerant(v)

		return v, err == nil && strings.Count(v, ".") >= 2
	default:
		return "", false
	}
}
