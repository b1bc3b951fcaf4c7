package sim

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"sync"

	"github.com/distribution/reference"
	"github.com/siderolabs/talos/pkg/machinery/api/common"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// imageRegistry is the image registry the sim's nodes pull installers from. An installer
// repository's tag that is a catalogued Talos release ("…/installer:v1.13.9") is an installer of
// that version, a Kubernetes image's version tag that Kubernetes image (images_catalogue.go);
// other references (a tag that is not a version, a digest) exist once Cluster.PublishImage
// registered them, and everything else is NotFound. Digests are the sha256 of
// the tagged reference, so a digest pins exactly one image.
type imageRegistry struct {
	mu       sync.Mutex
	byName   map[string]string // normalized name:tag → Talos version
	byDigest map[string]string // name@sha256:… → Talos version
}

func newRegistry() *imageRegistry {
	return &imageRegistry{byName: map[string]string{}, byDigest: map[string]string{}}
}

func digestOf(tagged string) string {
	s := sha256.Sum256([]byte(tagged))

	return "sha256:" + hex.EncodeToString(s[:])
}

// image is one resolved image.
type image struct {
	name    string // normalized name:tag (or name@digest when pulled by digest only)
	pinned  string // name@sha256:…
	version string
}

// resolve finds an image the registry has; a reference that does not parse is InvalidArgument,
// an unknown one NotFound (what a registry's 404 gives).
func (r *imageRegistry) resolve(ref string) (image, error) {
	named, err := reference.ParseDockerRef(ref)
	if err != nil {
		return image{}, status.Errorf(codes.InvalidArgument, "error parsing image reference %q: %v", ref, err)
	}

	r.mu.Lock()
	defer r.mu.Unlock()

	repo := named.Name()

	if c, ok := named.(reference.Canonical); ok {
		pinned := repo + "@" + c.Digest().String()
		if v, ok := r.byDigest[pinned]; ok {
			return image{name: named.String(), pinned: pinned, version: v}, nil
		}

		// name:tag@digest where the digest is that tag's.
		if t, ok := named.(reference.Tagged); ok && digestOf(repo+":"+t.Tag()) == c.Digest().String() {
			if v, ok := r.versionOfTag(repo, t.Tag()); ok {
				return image{name: named.String(), pinned: pinned, version: v}, nil
			}
		}

		return image{}, notInRegistry(ref, named)
	}

	t, ok := named.(reference.Tagged)
	if !ok {
		return image{}, notInRegistry(ref, named)
	}

	v, ok := r.versionOfTag(repo, t.Tag())
	if !ok {
		return image{}, notInRegistry(ref, named)
	}

	tagged := repo + ":" + t.Tag()

	return image{name: tagged, pinned: repo + "@" + digestOf(tagged), version: v}, nil
}

func (r *imageRegistry) versionOfTag(repo, tag string) (string, bool) {
	if v, ok := r.byName[repo+":"+tag]; ok {
		return v, true
	}

	return catalogueVersion(repo, tag) // images_catalogue.go
}

// version is the Talos version an installer reference boots (false: unknown image).
func (r *imageRegistry) version(ref string) (string, bool) {
	img, err := r.resolve(ref)
	if err != nil {
		return "", false
	}

	return img.version, true
}

// PublishImage makes an installer image of talosVersion available under ref (a tag that need not
// be a version, such as "…/installer:stable"), and returns its digest reference (name@sha256:…),
// which pulls the same image.
func (c *Cluster) PublishImage(ref, talosVersion string) (string, error) {
	if _, _, ok := majorMinor(talosVersion); !ok {
		return "", fmt.Errorf("sim: Talos version %q is not vX.Y.Z", talosVersion)
	}

	named, err := reference.ParseDockerRef(ref)
	if err != nil {
		return "", fmt.Errorf("sim: image reference %q: %w", ref, err)
	}

	t, ok := named.(reference.Tagged)
	if !ok {
		return "", fmt.Errorf("sim: image reference %q needs a tag (its digest is derived from it)", ref)
	}

	if _, digested := named.(reference.Canonical); digested {
		return "", fmt.Errorf("sim: publish %q without a digest: the sim derives it", ref)
	}

	tagged := named.Name() + ":" + t.Tag()
	pinned := named.Name() + "@" + digestOf(tagged)

	c.images.mu.Lock()
	c.images.byName[tagged] = talosVersion
	c.images.byDigest[pinned] = talosVersion
	c.images.mu.Unlock()

	return pinned, nil
}

// pull is containerd's pull into namespace ns through the registry, unless the node has an
// ImagePullFailure fault; with RegistryUnreachable it retries as image.Pull does (registry.go).
func (n *node) pull(ctx context.Context, ns, ref string) (image, error) {
	img, err := n.c.images.resolve(ref)
	if err != nil && status.Code(err) == codes.InvalidArgument {
		return image{}, err
	}

	// image.WithSkipIfAlreadyPulled (every caller passes it): an image containerd still has
	// is not fetched again, so neither the registry nor its faults are involved.
	if err == nil && n.havePulled(ns, ref) {
		return img, nil
	}

	if werr := n.waitRegistry(ctx, ref); werr != nil { // registry.go
		return image{}, werr
	}

	if err != nil {
		return image{}, err
	}

	if n.currentFault().ImagePullFailure {
		return image{}, pullError(ref)
	}

	now := n.c.now()

	n.mu.Lock()
	defer n.mu.Unlock()

	if n.pulled[ns] == nil {
		n.pulled[ns] = map[string]bool{}
	}

	n.pulled[ns][img.name] = true
	n.pulled[ns][img.pinned] = true
	n.imagePulled(ns, img, now) // imagegc.go

	return img, nil
}

// notInRegistry is what containerd's resolver gives for a reference the registry does not
// have (errdefs.ErrNotFound, "<ref>: not found"), wrapped as image.Pull wraps it
// (internal/pkg/containers/image/image.go: "failed to pull image %q: %w", with the reference
// normalized first, so both name docker.io/library/… for a short name).
func notInRegistry(ref string, named reference.Named) error {
	return status.Errorf(codes.NotFound, "failed to pull image %q: %s: not found", named.String(), named.String())
}

// havePulled reports whether ref is in containerd namespace ns.
func (n *node) havePulled(ns, ref string) bool {
	named, err := reference.ParseDockerRef(ref)
	if err != nil {
		return false
	}

	n.mu.Lock()
	defer n.mu.Unlock()

	n.collectImages(n.c.now()) // imagegc.go: what Talos's image GC removed by now is gone

	return n.pulled[ns][named.String()]
}

// containerd namespaces (constants.SystemContainerdNamespace, K8sContainerdNamespace).
const (
	nsSystem = "system"
	nsCRI    = "k8s.io"
)

func pullError(ref string) error {
	return status.Errorf(codes.NotFound, "error pulling image: failed to resolve reference %q: unexpected status from HEAD request: 503 Service Unavailable (simulated image pull failure)", ref)
}

// containerdNamespace is ctrhelper.ContainerdInstanceHelper's choice of namespace.
func containerdNamespace(inst *common.ContainerdInstance) (string, error) {
	if inst.GetDriver() != common.ContainerDriver_CONTAINERD && inst.GetDriver() != common.ContainerDriver_CRI {
		return "", status.Errorf(codes.InvalidArgument, "invalid containerd driver %s", inst.GetDriver())
	}

	var ns string

	switch inst.GetNamespace() {
	case common.ContainerdNamespace_NS_CRI:
		ns = nsCRI
	case common.ContainerdNamespace_NS_SYSTEM:
		ns = nsSystem
	default:
		return "", status.Errorf(codes.InvalidArgument, "invalid containerd namespace %s", inst.GetNamespace())
	}

	if inst.GetDriver() == common.ContainerDriver_CONTAINERD && inst.GetNamespace() == common.ContainerdNamespace_NS_CRI {
		return "", status.Errorf(codes.InvalidArgument, "cannot use CRI namespace with containerd driver")
	}

	return ns, nil
}
