package sim

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
	"sync"

	"github.com/distribution/reference"
	"github.com/siderolabs/talos/pkg/machinery/api/common"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// imageRegistry is the image registry the sim's nodes pull installers from. Any tag that is a Talos
// version ("…:v1.13.9") is an installer of that version; other references (a tag that is not a
// version, a digest) exist once Cluster.PublishImage registered them. Digests are the sha256 of
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

		return image{}, status.Errorf(codes.NotFound, "%s: not found", ref)
	}

	t, ok := named.(reference.Tagged)
	if !ok {
		return image{}, status.Errorf(codes.NotFound, "%s: not found", ref)
	}

	v, ok := r.versionOfTag(repo, t.Tag())
	if !ok {
		return image{}, status.Errorf(codes.NotFound, "%s: not found", ref)
	}

	tagged := repo + ":" + t.Tag()

	return image{name: tagged, pinned: repo + "@" + digestOf(tagged), version: v}, nil
}

func (r *imageRegistry) versionOfTag(repo, tag string) (string, bool) {
	if v, ok := r.byName[repo+":"+tag]; ok {
		return v, true
	}

	v := tag
	if !strings.HasPrefix(v, "v") {
		v = "v" + v
	}

	if _, _, ok := majorMinor(v); ok && strings.Count(v, ".") >= 2 {
		return v, true
	}

	return "", false
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
// ImagePullFailure fault.
func (n *node) pull(ns, ref string) (image, error) {
	img, err := n.c.images.resolve(ref)
	if err != nil {
		return image{}, err
	}

	if n.currentFault().ImagePullFailure {
		return image{}, pullError(ref)
	}

	n.mu.Lock()
	defer n.mu.Unlock()

	if n.pulled[ns] == nil {
		n.pulled[ns] = map[string]bool{}
	}

	n.pulled[ns][img.name] = true
	n.pulled[ns][img.pinned] = true

	return img, nil
}

// havePulled reports whether ref is in containerd namespace ns.
func (n *node) havePulled(ns, ref string) bool {
	named, err := reference.ParseDockerRef(ref)
	if err != nil {
		return false
	}

	n.mu.Lock()
	defer n.mu.Unlock()

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
