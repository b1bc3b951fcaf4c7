// Package soak is the seeded chaos soak (issue 27 item 3): scenarios of the real
// `talosbot serve` against simulated clusters and the real kube-apiserver, each
// with a fault schedule drawn from a printed seed, and the invariants checked
// during and after each one. The schedule of a seed is the same on every run
// (SOAK_SEED=N SOAK_SCENARIOS=1 make soak replays it); see docs/SOAK.md.
package soak

import (
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/talosbot/talosbot/sim"
)

// FaultKind is one entry of the fault registry: one sim.Fault field (Name is its
// control-API key), who can carry it, and how a schedule draws its value. A new
// sim.Fault field needs one entry here; TestRegistryCoversEveryFault fails until
// it has one.
type FaultKind struct {
	// Name is the fault's json key in sim.Fault.
	Name string
	// Role limits the nodes it is drawn for: "" any node, or sim.RoleControlPlane.
	Role string
	// Scenarios limits the scenario kinds it is drawn in (nil: all), for a fault
	// that acts only with something a scenario has (static pods change only in a
	// Kubernetes upgrade).
	Scenarios []string
	// Draw returns the fault, its value drawn from r.
	Draw func(r *rand.Rand) sim.Fault
}

// Registry is every fault the soak draws from, one entry per sim.Fault field.
// Reboot delays are slowReboot (and each scenario's own reboot delay), apid
// unreachable is unreachable; the bot's SIGKILL is not a sim fault and is drawn
// on its own (KindSIGKILL).
func Registry() []FaultKind {
	return []FaultKind{
		{Name: "latency", Draw: func(r *rand.Rand) sim.Fault {
			return sim.Fault{Latency: time.Duration(50+r.IntN(400)) * time.Millisecond}
		}},
		{Name: "unreachable", Draw: func(*rand.Rand) sim.Fault { return sim.Fault{Unreachable: true} }},
		{Name: "unhealthyService", Draw: func(r *rand.Rand) sim.Fault {
			return sim.Fault{UnhealthyService: []string{"kubelet", "syslogd", "containerd"}[r.IntN(3)]}
		}},
		{Name: "etcdStopped", Role: sim.RoleControlPlane, Draw: func(*rand.Rand) sim.Fault { return sim.Fault{EtcdStopped: true} }},
		{Name: "noEtcdLeader", Role: sim.RoleControlPlane, Draw: func(*rand.Rand) sim.Fault { return sim.Fault{NoEtcdLeader: true} }},
		{Name: "etcdDataLost", Role: sim.RoleControlPlane, Draw: func(*rand.Rand) sim.Fault { return sim.Fault{EtcdDataLost: true} }},
		{Name: "imagePullFailure", Draw: func(*rand.Rand) sim.Fault { return sim.Fault{ImagePullFailure: true} }},
		{Name: "registryUnreachable", Draw: func(*rand.Rand) sim.Fault { return sim.Fault{RegistryUnreachable: true} }},
		{Name: "bootFailure", Draw: func(*rand.Rand) sim.Fault { return sim.Fault{BootFailure: true} }},
		{Name: "noReboot", Draw: func(*rand.Rand) sim.Fault { return sim.Fault{NoReboot: true} }},
		{Name: "landSchematic", Draw: func(r *rand.Rand) sim.Fault {
			// A schematic other than the declared one (a wrong image landed).
			var b [32]byte
			for i := range b {
				b[i] = byte(r.IntN(256))
			}
			return sim.Fault{LandSchematic: hex.EncodeToString(b[:])}
		}},
		{Name: "kernelArgsNotApplied", Draw: func(*rand.Rand) sim.Fault { return sim.Fault{KernelArgsNotApplied: true} }},
		{Name: "unmetConditions", Draw: func(r *rand.Rand) sim.Fault {
			return sim.Fault{UnmetConditions: []string{"time", "network", "services", "nodeReady"}[r.IntN(4)]}
		}},
		{Name: "neverReturn", Draw: func(*rand.Rand) sim.Fault { return sim.Fault{NeverReturn: true} }},
		{Name: "slowReboot", Draw: func(r *rand.Rand) sim.Fault {
			return sim.Fault{SlowReboot: time.Duration(1+r.IntN(6)) * time.Second}
		}},
		{Name: "etcdNoSpace", Role: sim.RoleControlPlane, Draw: func(*rand.Rand) sim.Fault { return sim.Fault{EtcdNoSpace: true} }},
		{Name: "etcdRejoinFailure", Role: sim.RoleControlPlane, Draw: func(*rand.Rand) sim.Fault { return sim.Fault{EtcdRejoinFailure: true} }},
		{Name: "apidCertificate", Draw: func(r *rand.Rand) sim.Fault {
			return sim.Fault{ApidCertificate: []string{"expired", "noSAN"}[r.IntN(2)]}
		}},
		{Name: "addressChanged", Draw: func(r *rand.Rand) sim.Fault {
			return sim.Fault{AddressChanged: fmt.Sprintf("10.99.0.%d", 1+r.IntN(250))}
		}},
		// Drawn in no scenario yet: a quota acts only when writes approach it, which is the
		// etcd maintenance commands' ground (defrag, alarms), not a roll's; drawing it in the
		// scenarios here would also change every seed's draw (the 200-scenario run's replays).
		{Name: "etcdQuotaBytes", Role: sim.RoleControlPlane, Scenarios: []string{}, Draw: func(r *rand.Rand) sim.Fault {
			return sim.Fault{EtcdQuotaBytes: int64(16+r.IntN(48)) << 20}
		}},
		{Name: "staticPodNotReady", Role: sim.RoleControlPlane, Scenarios: []string{KindK8sUpgrade}, Draw: func(r *rand.Rand) sim.Fault {
			return sim.Fault{StaticPodNotReady: sim.StaticPodComponents()[r.IntN(len(sim.StaticPodComponents()))]}
		}},
	}
}

// KindSIGKILL is the schedule's kill of the bot (SIGKILL, restart, /talos resume).
const KindSIGKILL = "sigkill"
