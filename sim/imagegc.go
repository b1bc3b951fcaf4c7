package sim

import (
	"strings"
	"time"
)

// Talos's CRI image garbage collector (internal/app/machined/pkg/controllers/cri/image_gc.go,
// v1.13.9): ImageCleanupInterval and ImageGCGracePeriod.
const (
	imageCleanupInterval = 15 * time.Minute
	imageGCGracePeriod   = 4 * imageCleanupInterval
)

// pulledImage is one image in a containerd namespace: the names it is stored under (the tag
// and the digest reference) and when containerd created it.
type pulledImage struct {
	names    []string
	pulledAt time.Time
}

// imagePulled records a pull on the sim's clock. An image containerd still has keeps its
// creation time: the pull skipped it (WithSkipIfAlreadyPulled), so its GC age goes on. Caller
// holds n.mu.
func (n *node) imagePulled(ns string, img image, now time.Time) {
	if n.pulledImages == nil {
		n.pulledImages = map[string]*pulledImage{}
	}

	key := ns + " " + img.pinned
	if _, ok := n.pulledImages[key]; ok {
		return
	}

	n.pulledImages[key] = &pulledImage{names: []string{img.name, img.pinned}, pulledAt: now}
}

// collectImages removes what Talos's image GC has removed by now, computed from its schedule
// rather than run by a ticker, so that a test's clock (Options.Now) drives it:
//
//   - the controller ticks every imageCleanupInterval from the boot (its time.Ticker starts
//     with machined), only in the system namespace (constants.SystemContainerdNamespace);
//   - an image nothing expects (the CRI instance keeps the kubelet's and etcd's images; the
//     system instance keeps none) is first seen unreferenced at the first tick after it was
//     pulled, or after the boot (the controller's map is in memory);
//   - it is deleted at the first tick where min(age since pulled, age since first seen) is at
//     least imageGCGracePeriod: first seen + 60 minutes, itself a tick. So an installer pulled
//     and left alone is gone 60 to 75 minutes later.
//
// Caller holds n.mu.
func (n *node) collectImages(now time.Time) {
	for key, img := range n.pulledImages {
		ns, _, _ := strings.Cut(key, " ")
		if ns != nsSystem || n.gcExpected(img) {
			continue
		}

		since := img.pulledAt
		if since.Before(n.bootedAt) {
			since = n.bootedAt
		}

		ticks := since.Sub(n.bootedAt)/imageCleanupInterval + 1
		firstSeen := n.bootedAt.Add(ticks * imageCleanupInterval)

		if now.Before(firstSeen.Add(imageGCGracePeriod)) {
			continue
		}

		for _, name := range img.names {
			delete(n.pulled[ns], name)
		}

		delete(n.pulledImages, key)
	}
}

// gcExpected: the CRI instance's GC keeps the images its kubelet and etcd specs name
// (buildExpectedImages); the sim keeps one set of namespaces for both instances, so the
// kubelet's image is kept wherever it is.
func (n *node) gcExpected(img *pulledImage) bool {
	for _, name := range img.names {
		if name == n.img.Kubelet {
			return true
		}
	}

	return false
}
