// Package conformance checks the simulator (sim) against the real Talos CLI: talosctl v1.13.9
// against nodes at v1.12 and v1.13 and talosctl v1.14.1 against nodes at v1.14 run each command a
// cluster operator or the bot relies on against a sim cluster (with a real kube-apiserver storing
// into the sim's etcd where the command needs Kubernetes), and each test checks what the command
// must print, not only its exit code.
//
// The tests need $TALOSBOT_TALOSCTL (v1.13.9; .ci/run points it at ../shared/tools/talosctl),
// $TALOSBOT_TALOSCTL_V114 (v1.14.1; ../shared/tools/talosctl-v1.14.1) and, for the Kubernetes
// commands, kube-apiserver from `make tools`. A test whose binary is not set skips and says how
// to set it. See docs/SIMULATOR.md, section "Conformance".
package conformance
