package sim

import (
	"fmt"
	"slices"
	"strings"

	"github.com/blang/semver/v4"
)

// talosReleases is the sim's registry's list of Talos installer tags: every release of the
// release catalogue (releases_catalogue.go, v1.12.0–v1.14.1), the v1.9–v1.11 patch releases and
// the v1.14 pre-releases (git tags of siderolabs/talos), so that an installer for a version that
// was never released ("v1.99.0", "v1.13.99") is NotFound as factory.talos.dev and ghcr.io answer
// it, while an old release (a downgrade the installer's pre-flight refuses) exists. The older
// tags have no entry in the release catalogue: the sim never runs them, it only serves their
// installers.
func talosReleases() []string {
	out := []string{}

	for _, minor := range []struct {
		minor   int
		patches int // highest patch released
	}{{9, 6}, {10, 9}, {11, 6}} {
		for p := 0; p <= minor.patches; p++ {
			out = append(out, fmt.Sprintf("v1.%d.%d", minor.minor, p))
		}
	}

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

// ghcrInstaller is the installer Talos published with every release up to v1.13.
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
	case repo == ghcrInstaller && atLeast(v, 1, 14):
		// v1.14 stopped publishing it: hack/release.toml notes.defaultInstaller at v1.14.0-rc.1.
		return "", false
	case installerRepo(repo):
		return v, KnownTalosRelease(v)
	case slices.Contains(kubernetesRepos, repo):
		_, err := semver.ParseTolerant(v)

		return v, err == nil && strings.Count(v, ".") >= 2
	default:
		return "", false
	}
}
