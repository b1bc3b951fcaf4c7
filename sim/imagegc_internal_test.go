package sim

import (
	"testing"
	"time"
)

// TestImageGCSchedule: the GC's schedule as image_gc.go runs it, tick by tick: an image is first
// seen unreferenced at the first 15-minute tick after its pull (or after the boot, as the
// controller's map starts empty), deleted 60 minutes after that; the kubelet's image and the
// k8s.io namespace are left alone.
func TestImageGCSchedule(t *testing.T) {
	t.Parallel()
	boot := time.Date(2026, 12, 3, 6, 0, 0, 0, time.UTC)
	installer := image{name: "ghcr.io/siderolabs/installer:v1.13.9", pinned: "ghcr.io/siderolabs/installer@sha256:aa"}
	kubelet := image{name: "ghcr.io/siderolabs/kubelet:v1.36.3", pinned: "ghcr.io/siderolabs/kubelet@sha256:bb"}

	newNode := func(pulledAt time.Duration) *node {
		n := &node{bootedAt: boot, pulled: map[string]map[string]bool{}, img: images{Kubelet: kubelet.name}}

		for _, ns := range []string{nsSystem, nsCRI} {
			n.pulled[ns] = map[string]bool{}

			for _, img := range []image{installer, kubelet} {
				n.pulled[ns][img.name], n.pulled[ns][img.pinned] = true, true
				n.imagePulled(ns, img, boot.Add(pulledAt))
			}
		}

		return n
	}

	for _, tc := range []struct {
		pulledAt, keptAt, goneAt time.Duration
	}{
		{pulledAt: time.Minute, keptAt: 74 * time.Minute, goneAt: 75 * time.Minute},      // first seen at 15
		{pulledAt: 15 * time.Minute, keptAt: 89 * time.Minute, goneAt: 90 * time.Minute}, // on a tick: seen at the next
		{pulledAt: 29 * time.Minute, keptAt: 89 * time.Minute, goneAt: 90 * time.Minute}, // 61 minutes after the pull
	} {
		n := newNode(tc.pulledAt)

		n.collectImages(boot.Add(tc.keptAt))

		if !n.pulled[nsSystem][installer.name] {
			t.Fatalf("pulled at +%s: gone at +%s, want kept", tc.pulledAt, tc.keptAt)
		}

		n.collectImages(boot.Add(tc.goneAt))

		if n.pulled[nsSystem][installer.name] || n.pulled[nsSystem][installer.pinned] {
			t.Fatalf("pulled at +%s: still there at +%s", tc.pulledAt, tc.goneAt)
		}

		if !n.pulled[nsSystem][kubelet.name] || !n.pulled[nsCRI][installer.name] {
			t.Fatalf("the GC removed the kubelet's image or one in k8s.io: %v", n.pulled)
		}
	}

	// A reboot before the deadline: the new boot's controller sees the image afresh, at its first
	// tick, and deletes it an hour after that.
	n := newNode(time.Minute)
	n.collectImages(boot.Add(70 * time.Minute)) // the boot that ends: not yet
	n.bootedAt = boot.Add(70 * time.Minute)

	n.collectImages(boot.Add(144 * time.Minute))

	if !n.pulled[nsSystem][installer.name] {
		t.Fatal("gone before the new boot's deadline (+70+15+60)")
	}

	n.collectImages(boot.Add(145 * time.Minute))

	if n.pulled[nsSystem][installer.name] {
		t.Fatal("still there after the new boot's deadline")
	}
}
