// Package testenv gives integration tests a real kube-apiserver and finds the
// OpenTofu binary.
//
// The binaries come from tools/ (a separate Go module): `make tools` runs
// tools/build.sh, which builds them from the Go module proxy into
// $TALOSBOT_TOOLS_DIR (default $XDG_CACHE_HOME/talosbot/tools or
// ~/.cache/talosbot/tools) and writes an env file there. KubeAPIServerPath
// and TofuPath read $TALOSBOT_KUBE_APISERVER / $TALOSBOT_TOFU, then that
// env file, then PATH. Require skips a test whose tool is missing, except
// in CI (CI=true) or with TALOSBOT_REQUIRE_TOOLS=1, where it fails it.
//
// StartKube runs an embedded etcd and a kube-apiserver process on
// 127.0.0.1 (free ports, self-signed serving cert, RBAC, a static admin
// token in system:masters), installs namespaced Flux CRDs
// (Kustomization kustomize.toolkit.fluxcd.io/v1, HelmRelease
// helm.toolkit.fluxcd.io/v2; open schema, status subresource) and the
// flux-system namespace.
//
// There is no kube-controller-manager, scheduler or kubelet. What that means
// for tests:
//   - PodDisruptionBudget status (disruptionsAllowed) is never computed; the
//     eviction API answers 429 for any PDB whose status was not written.
//     Call SetPDBStatus to play the disruption controller.
//   - Pods stay Pending, and the eviction API ignores PDBs for Pending pods.
//     Call SetPodRunningReady to play the kubelet.
//   - A pod bound to a node (spec.nodeName set) that is deleted or evicted
//     with a grace period stays Terminating, as nobody confirms it is gone.
//   - No default service accounts: the ServiceAccount admission plugin is
//     disabled so pods can still be created.
//   - Flux controllers are absent: SetKustomizationReady and
//     SetHelmReleaseReady write the Ready condition they would write.
//   - No garbage collector: owner references do not cascade.
package testenv
