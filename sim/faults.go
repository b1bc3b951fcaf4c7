package sim

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

// Fault is the set of faults active on one node. The zero value means healthy.
//
// On the control API a Fault is JSON with one key per field (its json tag), durations as Go
// duration strings ("250ms"). A new fault is one field here with its tag: MarshalJSON and
// UnmarshalJSON follow the tags, so the wire form cannot drift from the struct.
type Fault struct {
	// Latency delays every RPC the node serves.
	Latency time.Duration `json:"-"`
	// Unreachable closes the node's API listener: callers get codes.Unavailable, one-to-many
	// replies carry a per-node error.
	Unreachable bool `json:"unreachable,omitempty"`
	// UnhealthyService reports the named service (e.g. "kubelet", "etcd") as unhealthy.
	UnhealthyService string `json:"unhealthyService,omitempty"`
	// EtcdStopped stops the node's etcd member (control planes only).
	EtcdStopped bool `json:"etcdStopped,omitempty"`
	// NoEtcdLeader stops enough other etcd members that the cluster loses quorum, so the
	// remaining members (including this node's) have no leader.
	NoEtcdLeader bool `json:"noEtcdLeader,omitempty"`
	// EtcdDataLost stops the node's etcd member and deletes its data directory (a lost disk
	// or a corrupted database), control planes only. The node's etcd service then waits to
	// join (Preparing) as Talos's does with an empty data directory; it joins by itself while
	// the other members keep a quorum. Clearing the fault does not bring the data back. On a
	// majority (Cluster.LoseEtcdQuorum) it loses quorum for good: recover with EtcdRecover
	// and Bootstrap{RecoverEtcd}.
	EtcdDataLost bool `json:"etcdDataLost,omitempty"`
	// ImagePullFailure makes image pulls (ImageService.Pull, upgrades) fail.
	ImagePullFailure bool `json:"imagePullFailure,omitempty"`
	// RegistryUnreachable makes the node's registries unreachable: a pull of an image the node
	// does not have retries, silently, until the fault is cleared or 20 minutes pass on the
	// sim's clock (image.Pull's PullTimeout), then fails (registry.go).
	RegistryUnreachable bool `json:"registryUnreachable,omitempty"`
	// BootFailure makes the next boot into a new version fail as Talos's A/B fallback goes
	// (abfallback.go): the new version boots, its boot sequence fails, machined reverts the
	// bootloader, counts down 10 s and reboots into the old version.
	BootFailure bool `json:"bootFailure,omitempty"`
	// NoReboot acknowledges reboot requests but never reboots: the node keeps its boot id and
	// version, an installed upgrade waits as the default boot entry.
	NoReboot bool `json:"noReboot,omitempty"`
	// LandSchematic is the schematic id the next installed image boots with instead of its
	// installer's (landing.go).
	LandSchematic string `json:"landSchematic,omitempty"`
	// KernelArgsNotApplied installs the next image without the machine config's
	// machine.install.extraKernelArgs (as LifecycleService.Upgrade does, siderolabs/talos#13967).
	KernelArgsNotApplied bool `json:"kernelArgsNotApplied,omitempty"`
	// UnmetConditions keeps MachineStatus readiness checks unmet, comma separated: time,
	// network, services (kubelet unhealthy), staticPods, nodeReady (machinestatus.go).
	UnmetConditions string `json:"unmetConditions,omitempty"`
	// NeverReturn keeps a node that goes down for a reboot down until the fault is cleared.
	NeverReturn bool `json:"neverReturn,omitempty"`
	// SlowReboot adds to the reboot delay.
	SlowReboot time.Duration `json:"-"`
	// StaticPodNotReady names a control-plane component ("kube-apiserver",
	// "kube-controller-manager", "kube-scheduler") whose static pod on this node never becomes
	// Ready after a config change (with Options.Kube and StaticPods). Clearing it makes the pod Ready.
	StaticPodNotReady string `json:"staticPodNotReady,omitempty"`
	// EtcdNoSpace raises etcd's NOSPACE alarm for the node's member (control planes): the
	// cluster refuses writes until the alarm is disarmed; clearing the fault disarms it.
	EtcdNoSpace bool `json:"etcdNoSpace,omitempty"`
	// EtcdQuotaBytes restarts the node's etcd member with --quota-backend-bytes set to this
	// (cluster.etcd.extraArgs; control planes, 0: etcd's default 2 GiB): a write through the member
	// that would take the database file past it is refused and etcd raises NOSPACE (sim/etcd_quota.go).
	EtcdQuotaBytes int64 `json:"etcdQuotaBytes,omitempty"`
	// EtcdRejoinFailure: at the node's next boot its etcd process exits at start, and Talos's
	// service runner restarts it forever (control planes). Clearing the fault lets it start.
	EtcdRejoinFailure bool `json:"etcdRejoinFailure,omitempty"`
	// ApidCertificate replaces the node's apid certificate: "expired" (its validity ended) or
	// "noSAN" (it does not name the node's address). Clients and other nodes' apid fail TLS.
	ApidCertificate string `json:"apidCertificate,omitempty"`
	// AddressChanged is the node's new address (a DHCP lease that changed): its API no longer
	// answers at the inventory address, a control plane's etcd member is cut off, the
	// Kubernetes Node's InternalIP is the new address (addressfault.go). Clearing restores it.
	AddressChanged string `json:"addressChanged,omitempty"`
}

// faultDurations are Fault's duration fields on the wire, as strings.
type faultDurations struct {
	Latency    string `json:"latency,omitempty"`
	SlowReboot string `json:"slowReboot,omitempty"`
}

// faultWire is a Fault on the control API: every tagged field as it is, the durations as
// strings (Fault tags its durations "-", so only these carry the keys).
type faultWire struct {
	faultFields
	faultDurations
}

// faultFields is Fault without its methods, so that encoding it does not recurse.
type faultFields Fault

// MarshalJSON implements json.Marshaler.
func (f Fault) MarshalJSON() ([]byte, error) {
	w := faultWire{faultFields: faultFields(f)}
	if f.Latency > 0 {
		w.faultDurations.Latency = f.Latency.String()
	}

	if f.SlowReboot > 0 {
		w.faultDurations.SlowReboot = f.SlowReboot.String()
	}

	return json.Marshal(w)
}

// faultKeys lists the control API's keys, for the error that names them.
func faultKeys() []string {
	var keys []string

	for _, t := range []reflect.Type{reflect.TypeFor[faultDurations](), reflect.TypeFor[Fault]()} {
		for i := range t.NumField() {
			if k, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ","); k != "" && k != "-" {
				keys = append(keys, k)
			}
		}
	}

	return keys
}

// UnmarshalJSON implements json.Unmarshaler. An unknown key is an error that names the known
// ones: a typo never injects nothing silently.
func (f *Fault) UnmarshalJSON(b []byte) error {
	var w faultWire

	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()

	if err := dec.Decode(&w); err != nil {
		return fmt.Errorf("fault: %w (fields: %s)", err, strings.Join(faultKeys(), ", "))
	}

	*f = Fault(w.faultFields)

	var err error

	if w.faultDurations.Latency != "" {
		if f.Latency, err = time.ParseDuration(w.faultDurations.Latency); err != nil {
			return fmt.Errorf("fault latency %q: %w (use e.g. \"250ms\")", w.faultDurations.Latency, err)
		}
	}

	if w.faultDurations.SlowReboot != "" {
		if f.SlowReboot, err = time.ParseDuration(w.faultDurations.SlowReboot); err != nil {
			return fmt.Errorf("fault slowReboot %q: %w (use e.g. \"5s\")", w.faultDurations.SlowReboot, err)
		}
	}

	return nil
}

// Inject replaces the faults active on a node (name or IP) and applies them now.
func (c *Cluster) Inject(ctx context.Context, nodeName string, f Fault) error {
	n, err := c.node(nodeName)
	if err != nil {
		return err
	}

	if err := checkRoleFaults(n, f); err != nil {
		return err
	}

	if err := checkAddressFault(n, f); err != nil {
		return err
	}

	if (f.EtcdStopped || f.NoEtcdLeader || f.EtcdDataLost) && n.info.Role != RoleControlPlane {
		return fmt.Errorf("sim: etcd faults need a control-plane node; %s is a worker", n.info.Name)
	}

	if f.StaticPodNotReady != "" {
		if n.info.Role != RoleControlPlane {
			return fmt.Errorf("sim: staticPodNotReady needs a control-plane node; %s is a worker", n.info.Name)
		}

		if !slices.Contains(StaticPodComponents(), f.StaticPodNotReady) {
			return fmt.Errorf("sim: staticPodNotReady %q is not a component; use one of %s", f.StaticPodNotReady, strings.Join(StaticPodComponents(), ", "))
		}
	}

	if err := landingFaultError(f); err != nil {
		return err
	}

	c.faultMu.Lock()
	defer c.faultMu.Unlock()

	n.mu.Lock()
	old := n.fault
	n.fault = f
	running := n.state == stateRunning

	if old.NeverReturn && !f.NeverReturn && n.returnCh != nil {
		close(n.returnCh)
		n.returnCh = nil
	}
	n.mu.Unlock()

	var errs []error

	switch {
	case f.Unreachable && !old.Unreachable:
		n.stopFront()
		n.gate.refusing(false)
	case !f.Unreachable && old.Unreachable && running:
		n.serveFront()
	}

	if m := n.member(); m != nil {
		switch {
		case f.EtcdStopped && !old.EtcdStopped:
			errs = append(errs, m.Stop())
		case !f.EtcdStopped && old.EtcdStopped && running && !n.leftEtcd() && !m.Removed():
			errs = append(errs, m.Restart(ctx))
		}

		if f.EtcdDataLost && !old.EtcdDataLost {
			errs = append(errs, n.loseEtcdData())
		}
	}

	switch {
	case f.NoEtcdLeader && !old.NoEtcdLeader:
		errs = append(errs, c.breakQuorum(ctx, n))
	case !f.NoEtcdLeader && old.NoEtcdLeader:
		errs = append(errs, c.restoreQuorum(ctx, n))
	}

	errs = append(errs, n.applyRoleFaults(ctx, old, f, running)...)
	errs = append(errs, n.applyAddressFault(ctx, old, f, running)...)

	// Set, the fault acts on the next config change; cleared, the stuck pod becomes Ready.
	if old.StaticPodNotReady != "" && f.StaticPodNotReady != old.StaticPodNotReady && n.hasStaticPods() {
		n.markStaticPods(ctx)
	}

	n.readinessChanged(old, f) // machinestatus.go

	c.log.Info("fault set", "node", n.info.Name, "fault", fmt.Sprintf("%+v", f))

	return errors.Join(errs...)
}

// Clear removes every fault from a node and undoes their effects.
func (c *Cluster) Clear(ctx context.Context, nodeName string) error {
	return c.Inject(ctx, nodeName, Fault{})
}

// ClearAll clears the faults of every node.
func (c *Cluster) ClearAll(ctx context.Context) error {
	var errs []error

	for _, n := range c.nodes {
		errs = append(errs, c.Clear(ctx, n.info.Name))
	}

	return errors.Join(errs...)
}

// Faults returns the faults active per node (only nodes with faults).
func (c *Cluster) Faults() map[string]Fault {
	out := map[string]Fault{}

	for _, n := range c.nodes {
		if f := n.currentFault(); f != (Fault{}) {
			out[n.info.Name] = f
		}
	}

	return out
}

// breakQuorum stops running members other than n's until fewer than a quorum run.
func (c *Cluster) breakQuorum(ctx context.Context, n *node) error {
	members := c.etcd.Members()
	quorum := len(members)/2 + 1

	running := 0

	for _, m := range members {
		if m.Running() {
			running++
		}
	}

	var stopped []string

	for _, m := range members {
		if running < quorum {
			break
		}

		if m.Name() == n.info.EtcdMember || !m.Running() {
			continue
		}

		if err := m.Stop(); err != nil {
			return fmt.Errorf("stop etcd member %s: %w", m.Name(), err)
		}

		stopped = append(stopped, m.Name())
		running--
	}

	if running >= quorum {
		// Single-member cluster: the only way to lose the leader is to stop this member too.
		if m := n.member(); m != nil && m.Running() {
			if err := m.Stop(); err != nil {
				return fmt.Errorf("stop etcd member %s: %w", m.Name(), err)
			}

			stopped = append(stopped, m.Name())
		}
	}

	c.leaderless[n.info.Name] = stopped

	// The fault is in place once the members still running know they have no
	// leader: until raft's election timeout passes they keep the old one and
	// answer as if nothing happened, so a caller that reads etcd at once would
	// race the survivor stepping down (a gate test failed on exactly that on a
	// loaded machine). Wait for it, under the caller's deadline.
	// Bounded: a member that comes back meanwhile (a node booting) can give
	// the cluster its quorum again, and then the fault cannot hold.
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()

	err := wait.PollUntilContextCancel(ctx, 20*time.Millisecond, true, func(context.Context) (bool, error) {
		for _, m := range c.etcd.Members() {
			if m.Running() && m.KnowsLeader() {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		return fmt.Errorf("etcd members still follow a leader after stopping %v: %w", stopped, err)
	}

	return nil
}

// restoreQuorum restarts the members breakQuorum stopped, together (each needs the others).
func (c *Cluster) restoreQuorum(ctx context.Context, n *node) error {
	names := c.leaderless[n.info.Name]
	delete(c.leaderless, n.info.Name)

	errs := make([]error, len(names))

	var wg sync.WaitGroup

	for i, name := range names {
		m := c.etcd.Member(name)
		if m == nil {
			continue
		}

		wg.Go(func() { errs[i] = m.Restart(ctx) })
	}

	wg.Wait()

	return errors.Join(errs...)
}

// Calls returns how many calls a node served whose full gRPC method name ends in method:
// "Upgrade" counts MachineService and LifecycleService upgrades, "/machine.MachineService/Upgrade"
// only the legacy one. Calls that never reached the node (it was down) are not counted.
func (c *Cluster) Calls(nodeName, method string) int {
	n, err := c.node(nodeName)
	if err != nil {
		return 0
	}

	n.callMu.Lock()
	defer n.callMu.Unlock()

	total := 0

	for full, k := range n.calls {
		if full == method || strings.HasSuffix(full, "/"+strings.TrimPrefix(method, "/")) {
			total += k
		}
	}

	return total
}

// CallCounts returns every node's calls by full method name.
func (c *Cluster) CallCounts() map[string]map[string]int {
	out := map[string]map[string]int{}

	for _, n := range c.nodes {
		n.callMu.Lock()

		m := make(map[string]int, len(n.calls))
		for k, v := range n.calls {
			m[k] = v
		}

		n.callMu.Unlock()

		out[n.info.Name] = m
	}

	return out
}

// ServeControl serves the fault control API on a loopback address ("127.0.0.1:0" picks a port)
// until Close, and returns the address it listens on.
//
//	POST   /faults   {"node":"cp-1","fault":{"unreachable":true,"latency":"200ms"}}
//	DELETE /faults[?node=cp-1]   clear one node (or all)
//	GET    /faults   active faults by node
//	GET    /calls    call counts by node and full method
//	GET    /nodes    the node list
//	POST   /etcd/lose-quorum   LoseEtcdQuorum: {"lost":["cp-2","cp-3"]}
//	GET    /etcd     EtcdView: each control plane's etcd service and member, leader, voters
func (c *Cluster) ServeControl(addr string) (string, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return "", fmt.Errorf("control address %q: %w (use e.g. 127.0.0.1:7070)", addr, err)
	}

	if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		return "", fmt.Errorf("control address %q is not loopback: the control API has no authentication, bind it to 127.0.0.1", addr)
	}

	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return "", fmt.Errorf("listen on %s: %w", addr, err)
	}

	srv := &http.Server{Handler: c.controlHandler(), ReadHeaderTimeout: 5 * time.Second}

	c.ctlMu.Lock()
	c.ctlSrv = append(c.ctlSrv, srv)
	c.ctlMu.Unlock()

	go func() { _ = srv.Serve(lis) }()

	return lis.Addr().String(), nil
}

func (c *Cluster) controlHandler() http.Handler {
	mux := http.NewServeMux()

	writeJSON := func(w http.ResponseWriter, v any) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(v)
	}

	fail := func(w http.ResponseWriter, code int, err error) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		_ = json.NewEncoder(w).Encode(map[string]string{"error": err.Error()})
	}

	mux.HandleFunc("POST /faults", func(w http.ResponseWriter, r *http.Request) {
		var body struct {
			Node  string `json:"node"`
			Fault Fault  `json:"fault"`
		}

		if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<16)).Decode(&body); err != nil {
			fail(w, http.StatusBadRequest, fmt.Errorf("decode body: %w; want {\"node\":\"cp-1\",\"fault\":{...}}", err))

			return
		}

		if _, err := c.node(body.Node); err != nil {
			fail(w, http.StatusNotFound, err)

			return
		}

		if err := c.Inject(r.Context(), body.Node, body.Fault); err != nil {
			fail(w, http.StatusInternalServerError, err)

			return
		}

		writeJSON(w, c.Faults())
	})

	mux.HandleFunc("DELETE /faults", func(w http.ResponseWriter, r *http.Request) {
		var err error

		if name := r.URL.Query().Get("node"); name != "" {
			if _, nerr := c.node(name); nerr != nil {
				fail(w, http.StatusNotFound, nerr)

				return
			}

			err = c.Clear(r.Context(), name)
		} else {
			err = c.ClearAll(r.Context())
		}

		if err != nil {
			fail(w, http.StatusInternalServerError, err)

			return
		}

		writeJSON(w, c.Faults())
	})

	mux.HandleFunc("POST /etcd/lose-quorum", func(w http.ResponseWriter, r *http.Request) {
		lost, err := c.LoseEtcdQuorum(r.Context())
		if err != nil {
			fail(w, http.StatusInternalServerError, err)

			return
		}

		writeJSON(w, map[string][]string{"lost": lost})
	})

	mux.HandleFunc("GET /etcd", func(w http.ResponseWriter, r *http.Request) { writeJSON(w, c.EtcdView(r.Context())) })
	mux.HandleFunc("GET /faults", func(w http.ResponseWriter, _ *http.Request) { writeJSON(w, c.Faults()) })
	mux.HandleFunc("GET /calls", func(w http.ResponseWriter, _ *http.Request) { writeJSON(w, c.CallCounts()) })
	mux.HandleFunc("GET /nodes", func(w http.ResponseWriter, _ *http.Request) { writeJSON(w, c.Nodes()) })

	return mux
}
