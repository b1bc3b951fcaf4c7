package sim

import (
	"slices"
	"strings"
)

// Release is one real Talos release the simulator knows: its tag, the day it was tagged and the
// defaults its machinery constants name (pkg/machinery/constants/constants.go at the tag:
// DefaultKubernetesVersion, DefaultEtcdVersion). A node running it reports that etcd version.
type Release struct {
	// Version is the tag, "v1.13.9".
	Version string
	// Date is the tag's commit date (YYYY-MM-DD); "" where the tag is not in the repository
	// mirror the catalogue was read from.
	Date string
	// Kubernetes is DefaultKubernetesVersion at the tag, without "v" ("1.36.3").
	Kubernetes string
	// Etcd is DefaultEtcdVersion at the tag, without "v" ("3.6.12").
	Etcd string
	// GHCRInstaller: ghcr.io/siderolabs/installer:<tag> was published with the release. From
	// v1.14 only Image Factory installers are (hack/release.toml notes.defaultInstaller,
	// v1.14.0-rc.1).
	GHCRInstaller bool
}

// releaseCatalogue is every v1.9–v1.14 release tagged when this was written, read from
// github.com/siderolabs/talos (git tags, `git log -1 --format=%cs TAG`, and
// pkg/machinery/constants/constants.go at each tag). v1.14.1 is read from the Go module
// github.com/siderolabs/talos@v1.14.1 (tagged 2026-09-15, hack/release.toml names v1.14.0 as its
// previous release). The v1.14.0 tag itself is not in the mirror (it ends at v1.14.0-rc.1, whose
// defaults are Kubernetes 1.37.0-rc.0 and etcd 3.7.1): its date is left empty and its defaults
// are v1.14.1's, whose etcd is rc.1's. Pre-releases are not releases and are not listed.
var releaseCatalogue = []Release{
	{"v1.9.0", "2024-12-17", "1.32.0", "3.5.17", true},
	{"v1.9.1", "2024-12-26", "1.32.0", "3.5.17", true},
	{"v1.9.2", "2025-01-16", "1.32.0", "3.5.17", true},
	{"v1.9.3", "2025-01-28", "1.32.1", "3.5.18", true},
	{"v1.9.4", "2025-02-13", "1.32.2", "3.5.18", true},
	{"v1.9.5", "2025-03-12", "1.32.3", "3.5.19", true},
	{"v1.9.6", "2025-05-05", "1.32.4", "3.5.21", true},
	{"v1.10.0", "2025-04-30", "1.33.0", "3.5.21", true},
	{"v1.10.1", "2025-05-07", "1.33.0", "3.5.21", true},
	{"v1.10.2", "2025-05-16", "1.33.0", "3.5.21", true},
	{"v1.10.3", "2025-05-29", "1.33.1", "3.5.21", true},
	{"v1.10.4", "2025-06-11", "1.33.1", "3.5.21", true},
	{"v1.10.5", "2025-07-03", "1.33.2", "3.5.21", true},
	{"v1.10.6", "2025-07-31", "1.33.3", "3.5.21", true},
	{"v1.10.7", "2025-08-26", "1.33.4", "3.5.21", true},
	{"v1.10.8", "2025-11-18", "1.33.6", "3.5.21", true},
	{"v1.10.9", "2025-12-23", "1.33.6", "3.5.26", true},
	{"v1.11.0", "2025-09-01", "1.34.0", "3.6.4", true},
	{"v1.11.1", "2025-09-08", "1.34.0", "3.6.4", true},
	{"v1.11.2", "2025-09-25", "1.34.1", "3.6.4", true},
	{"v1.11.3", "2025-10-15", "1.34.1", "3.6.5", true},
	{"v1.11.4", "2025-11-06", "1.34.1", "3.6.5", true},
	{"v1.11.5", "2025-11-06", "1.34.1", "3.6.5", true},
	{"v1.11.6", "2025-12-16", "1.34.1", "3.6.5", true},
	{"v1.12.0", "2025-12-22", "1.35.0", "3.6.7", true},
	{"v1.12.1", "2026-01-05", "1.35.0", "3.6.7", true},
	{"v1.12.2", "2026-01-21", "1.35.0", "3.6.7", true},
	{"v1.12.3", "2026-02-07", "1.35.0", "3.6.7", true},
	{"v1.12.4", "2026-02-12", "1.35.0", "3.6.7", true},
	{"v1.12.5", "2026-03-06", "1.35.2", "3.6.8", true},
	{"v1.12.6", "2026-03-19", "1.35.2", "3.6.8", true},
	{"v1.12.7", "2026-04-24", "1.35.4", "3.6.9", true},
	{"v1.12.8", "2026-05-22", "1.35.4", "3.6.11", true},
	{"v1.12.9", "2026-06-19", "1.35.4", "3.6.11", true},
	{"v1.12.10", "2026-07-16", "1.35.4", "3.6.11", true},
	{"v1.12.11", "2026-08-05", "1.35.4", "3.6.11", true},
	{"v1.13.0", "2026-04-27", "1.36.0", "3.6.9", true},
	{"v1.13.1", "2026-05-12", "1.36.0", "3.6.11", true},
	{"v1.13.2", "2026-05-12", "1.36.0", "3.6.11", true},
	{"v1.13.3", "2026-05-25", "1.36.1", "3.6.11", true},
	{"v1.13.4", "2026-06-09", "1.36.1", "3.6.12", true},
	{"v1.13.5", "2026-06-22", "1.36.2", "3.6.12", true},
	{"v1.13.6", "2026-07-09", "1.36.2", "3.6.12", true},
	{"v1.13.7", "2026-07-21", "1.36.2", "3.6.12", true},
	{"v1.13.8", "2026-08-04", "1.36.2", "3.6.12", true},
	{"v1.13.9", "2026-08-18", "1.36.3", "3.6.12", true},
	{"v1.14.0", "", "1.37.0", "3.7.1", false},
	{"v1.14.1", "2026-09-15", "1.37.0", "3.7.1", false},
}

// Releases returns the real Talos releases the simulator knows, oldest first, as a new slice
// (callers may keep or change it). Other packages read it to tell a real release from a made-up
// one, for example to refuse pulling an installer whose tag is no release.
func Releases() []Release {
	return slices.Clone(releaseCatalogue)
}

// LookupRelease returns the catalogue's entry for version ("v1.14.1"; a missing "v" is added).
func LookupRelease(version string) (Release, bool) {
	if !strings.HasPrefix(version, "v") {
		version = "v" + version
	}

	for _, r := range releaseCatalogue {
		if r.Version == version {
			return r, true
		}
	}

	return Release{}, false
}
