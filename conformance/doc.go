// Package conformance checks the simulator (sim) against the real Talos CLI: a talosctl built
// from Talos v1.13.9 runs each command a cluster operator or the bot relies on against a sim
// cluster (with a real kube-apiserver storing into the sim's etcd where the command needs
// Kubernetes), and each test checks what the command must print, not only its exit code.
//
// The tests need $TALOSBOT_TALOSCTL (the binary; .ci/run points it at ../shared/tools/talosctl)
// and, for the Kubernetes commands, kube-apiserver from `make tools`. Without talosctl they skip
// and say how to set it. See docs/SIMULATOR.md, section "Conformance".
package conformance
