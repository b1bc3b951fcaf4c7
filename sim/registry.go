package sim

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/distribution/reference"
	"google.golang.org/grpc/status"
	"k8s.io/apimachinery/pkg/util/wait"
)

// pullTimeout is image.PullTimeout (internal/pkg/containers/image/image.go, v1.13.9): how long
// image.Pull retries a registry it cannot reach before it gives up.
const pullTimeout = 20 * time.Minute

// registryPoll is how often a pull held by RegistryUnreachable looks at the sim's clock and the
// fault (real time; the sim's clock may be a test's, moved by hand).
const registryPoll = 10 * time.Millisecond

// waitRegistry is image.Pull's retry loop against a registry the node cannot reach (the
// RegistryUnreachable fault): every attempt fails to resolve the reference, nothing is
// streamed back (there is no layer to report progress on), and after pullTimeout on the sim's
// clock the pull fails with go-retry's error set (the last attempt's error and "timeout").
// Cleared meanwhile, the next attempt reaches the registry and the pull goes on. The caller's
// context ends it early, as a cancelled RPC does.
func (n *node) waitRegistry(ctx context.Context, ref string) error {
	if !n.currentFault().RegistryUnreachable {
		return nil
	}

	named, err := reference.ParseDockerRef(ref)
	if err != nil {
		return nil //nolint:nilerr // resolve reports the bad reference
	}

	start := n.c.now()
	timedOut := false

	err = wait.PollUntilContextCancel(ctx, registryPoll, true, func(context.Context) (bool, error) {
		if !n.currentFault().RegistryUnreachable {
			return true, nil
		}

		if n.c.now().Sub(start) >= pullTimeout {
			timedOut = true

			return true, nil
		}

		return false, nil
	})
	if err != nil {
		return status.FromContextError(ctx.Err()).Err()
	}

	if timedOut {
		return fmt.Errorf("2 error(s) occurred:\n\t%s\n\ttimeout", unreachableError(named))
	}

	return nil
}

// unreachableError is one attempt's error against a registry whose address does not answer:
// containerd's resolver fails its HEAD request for the manifest (docker.io is served by
// registry-1.docker.io).
func unreachableError(named reference.Named) error {
	host := reference.Domain(named)
	if host == "docker.io" {
		host = "registry-1.docker.io"
	}

	tag := "latest"
	if t, ok := named.(reference.Tagged); ok {
		tag = t.Tag()
	}

	if d, ok := named.(reference.Digested); ok {
		tag = d.Digest().String()
	}

	url := fmt.Sprintf("https://%s/v2/%s/manifests/%s", host, reference.Path(named), tag)

	return fmt.Errorf("failed to pull image %q: failed to resolve reference %q: failed to do request: Head %q: dial tcp: lookup %s: i/o timeout",
		named.String(), named.String(), url, strings.TrimSuffix(host, "."))
}
