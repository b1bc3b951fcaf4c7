package sim

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"

	clusterapi "github.com/siderolabs/talos/pkg/machinery/api/cluster"
	"github.com/siderolabs/talos/pkg/machinery/api/common"
	machineapi "github.com/siderolabs/talos/pkg/machinery/api/machine"
	storageapi "github.com/siderolabs/talos/pkg/machinery/api/storage"

	"github.com/talosbot/talosbot/sim/etcdsim"
)

// Node lifecycle states.
const (
	stateRunning   = "running"
	stateRebooting = "rebooting"
	stateReset     = "reset"
)

// inflightCounter counts in-flight unary calls and lets a reboot wait until there are none.
type inflightCounter struct {
	mu   sync.Mutex
	n    int
	zero chan struct{} // closed when n drops to 0
}

func (c *inflightCounter) add(delta int) {
	c.mu.Lock()
	defer c.mu.Unlock()

	if c.n == 0 && delta > 0 {
		c.zero = make(chan struct{})
	}

	c.n += delta

	if c.n == 0 && delta < 0 {
		close(c.zero)
	}
}

// wait returns when no call is in flight or after max.
func (c *inflightCounter) wait(max time.Duration) {
	c.mu.Lock()
	if c.n == 0 {
		c.mu.Unlock()

		return
	}

	ch := c.zero
	c.mu.Unlock()

	t := time.NewTimer(max)
	defer t.Stop()

	select {
	case <-ch:
	case <-t.C:
	}
}

type node struct {
	c    *Cluster
	info NodeInfo

	gate *gate

	backend   *grpc.Server
	bufLis    *bufconn.Listener
	localConn *grpc.ClientConn

	connMu  sync.Mutex
	remotes map[string]*grpc.ClientConn

	inflight inflightCounter
	events   *eventLog

	callMu sync.Mutex
	calls  map[string]int
	// recovery counts what EtcdRecover and Bootstrap accepted (under callMu).
	recovery RecoveryCounts

	logs *nodeLogs

	mu          sync.Mutex
	front       *grpc.Server
	state       string
	seq         seqLock
	stage       machineapi.MachineStatusEvent_MachineStage
	version     string
	prevVersion string
	bootID      string
	bootedAt    time.Time
	img         images
	config      []byte
	nextImage   string                     // installed (or staged) image the next boot switches to
	pulled      map[string]map[string]bool // containerd namespace → image refs pulled
	installing  bool                       // LifecycleService's own install/upgrade mutex
	wiped       bool
	fault       Fault
	etcdLeft    bool
	etcdSvc     etcdService   // the etcd service where it is not "the member runs from its data" (recover.go)
	returnCh    chan struct{} // closed to release a node held down by NeverReturn

	staticMu sync.Mutex // serialises the kubelet's work on the node's static pods

	pulledImages map[string]*pulledImage // imagegc.go: "namespace digest-ref" → pull time (under mu)

	cosi *cosiState // the node's COSI resources (cosi.go)

	land     *landing    // what the booted entry carries (landing.go), under mu
	fallback *abFallback // a boot that fails and falls back (abfallback.go), under mu
}

func newNode(c *Cluster, info NodeInfo) *node {
	n := &node{
		c:       c,
		info:    info,
		remotes: map[string]*grpc.ClientConn{},
		events:  newEventLog(c.ids, c.now),
		calls:   map[string]int{},
		state:   stateRunning,
		version: c.opts.TalosVersion,
		bootID:  newUUID(),
		pulled:  map[string]map[string]bool{},
	}
	n.bootedAt = c.now()
	n.logs = newNodeLogs(c.now)
	n.img = defaultImages(installerImage(info.Schematic, c.opts.TalosVersion), c.opts.KubernetesVersion)
	n.renderConfig()
	n.currentLandingLocked() // landing.go: the entry it booted with

	return n
}

func newUUID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80

	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

// renderConfig renders the node's first machine config from its images (an upgrade keeps
// the config; see switchVersion). Caller holds mu (or owns n).
func (n *node) renderConfig() {
	cfg, err := machineConfig(n.c.opts.Name, n.info.Role, "https://"+n.c.firstCPIP()+":6443", n.c.pkiCAPEM(), n.c.kubeCAPEM(), n.c.etcdCAPEM(), n.img)
	if err != nil {
		n.c.log.Error("render machine config", "node", n.info.Name, "err", err)

		return
	}

	n.config = cfg
}

func (c *Cluster) firstCPIP() string {
	for _, n := range c.nodes {
		if n.info.Role == RoleControlPlane {
			return n.info.IP
		}
	}

	return "127.0.0.1"
}

func (c *Cluster) pkiCAPEM() []byte {
	if c.pki == nil {
		return nil
	}

	return c.pki.caPEM
}

func (n *node) talosVersion() string {
	n.mu.Lock()
	defer n.mu.Unlock()

	return n.version
}

func (n *node) kubeletVersion() string {
	n.mu.Lock()
	defer n.mu.Unlock()

	return kubeletVersionOf(n.img.Kubelet)
}

// kubeletVersionOf is the version a kubelet image's binary reports: its tag without the
// variant suffix of Sidero's -fat and -slim kubelet images (the kubelet itself says
// "v1.36.3"; pkg/cluster/kubernetes/kubelet.go extractKubeletVersionSuffix).
func kubeletVersionOf(image string) string {
	tag := imageTag(image)

	for _, suffix := range []string{"-fat", "-slim"} {
		if v, ok := strings.CutSuffix(tag, suffix); ok {
			return v
		}
	}

	return tag
}

func (n *node) member() *etcdsim.Member {
	if n.info.Role != RoleControlPlane || n.c.etcd == nil {
		return nil
	}

	return n.c.etcd.Member(n.info.EtcdMember)
}

func (n *node) currentFault() Fault {
	n.mu.Lock()
	defer n.mu.Unlock()

	return n.fault
}

// startBackend starts the node's machined: typed services on an in-memory listener that only
// the node's own apid reaches.
func (n *node) startBackend() error {
	n.bufLis = bufconn.Listen(1 << 20)
	n.backend = grpc.NewServer(
		grpc.ChainUnaryInterceptor(n.unaryInterceptor),
		grpc.ChainStreamInterceptor(n.streamInterceptor),
	)

	md := &machined{n: n}
	machineapi.RegisterMachineServiceServer(n.backend, md)
	machineapi.RegisterImageServiceServer(n.backend, &imageService{n: n})
	machineapi.RegisterLifecycleServiceServer(n.backend, &lifecycleService{n: n})
	clusterapi.RegisterClusterServiceServer(n.backend, &clusterService{n: n})
	n.registerCOSI(n.backend)
	storageapi.RegisterStorageServiceServer(n.backend, &storageService{n: n})

	go func() { _ = n.backend.Serve(n.bufLis) }()

	conn, err := grpc.NewClient("passthrough:///machined-"+n.info.Name,
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return n.bufLis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.ForceCodec(rawCodec{})),
	)
	if err != nil {
		return fmt.Errorf("node %s: connect to machined: %w", n.info.Name, err)
	}

	n.localConn = conn

	return nil
}

// serviceAvailable gates ImageService and LifecycleService: they exist from Talos v1.13 (versions.go).
func (n *node) serviceAvailable(method string) error {
	if strings.HasPrefix(method, "/machine.ImageService/") || strings.HasPrefix(method, "/machine.LifecycleService/") {
		if !n.behaviour().lifecycleAPI {
			svc := strings.Split(strings.TrimPrefix(method, "/"), "/")[0]

			return status.Errorf(codes.Unimplemented, "unknown service %s", svc)
		}
	}

	return nil
}

// before runs for every call the node's machined serves: counts it and applies latency.
func (n *node) before(ctx context.Context, method string) error {
	n.callMu.Lock()
	n.calls[method]++
	n.callMu.Unlock()

	if err := n.serviceAvailable(method); err != nil {
		return err
	}

	if hook := n.c.opts.OnCall; hook != nil {
		if err := hook(ctx, n.info.Name, method); err != nil {
			return err
		}
	}

	if d := n.currentFault().Latency; d > 0 {
		t := time.NewTimer(d)
		defer t.Stop()

		select {
		case <-ctx.Done():
			return status.FromContextError(ctx.Err()).Err()
		case <-t.C:
		}
	}

	return nil
}

func (n *node) unaryInterceptor(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if err := n.before(ctx, info.FullMethod); err != nil {
		return nil, err
	}

	if err := authorize(ctx, info.FullMethod); err != nil {
		return nil, err
	}

	return handler(ctx, req)
}

func (n *node) streamInterceptor(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	if err := n.before(ss.Context(), info.FullMethod); err != nil {
		return err
	}

	if err := authorize(ss.Context(), info.FullMethod); err != nil {
		return err
	}

	return handler(srv, ss)
}

// serveFront starts the node's apid on its gate: from now on connections are answered.
func (n *node) serveFront() {
	n.mu.Lock()
	defer n.mu.Unlock()

	if n.front != nil {
		return
	}

	tlsCfg, err := n.apidTLS(n.fault.ApidCertificate) // n.mu is held
	if err != nil {
		n.c.log.Error("node TLS", "node", n.info.Name, "err", err)

		return
	}

	srv := grpc.NewServer(
		grpc.Creds(credentials.NewTLS(tlsCfg)),
		grpc.UnknownServiceHandler(n.proxyHandler),
		grpc.ForceServerCodec(rawCodec{}),
	)
	n.front = srv

	lis, err := n.gate.open()
	if err != nil {
		n.c.log.Error("node listener", "node", n.info.Name, "err", err)
		n.front = nil

		return
	}

	go func() { _ = srv.Serve(lis) }()
}

// stopFront makes the node unreachable: open connections are closed and new ones get no
// answer. Unary calls in flight get their reply out first (a node acks an upgrade before it
// reboots); streams such as Events are cut.
func (n *node) stopFront() {
	n.mu.Lock()
	srv := n.front
	n.front = nil
	n.mu.Unlock()

	if srv == nil {
		return
	}

	n.gate.shut()
	n.inflight.wait(2 * time.Second)

	done := make(chan struct{})

	go func() {
		srv.GracefulStop()
		close(done)
	}()

	t := time.NewTimer(100 * time.Millisecond)
	defer t.Stop()

	select {
	case <-done:
	case <-t.C:
		srv.Stop()
		<-done
	}
}

func (n *node) shutdown() {
	n.mu.Lock()
	if n.returnCh != nil {
		close(n.returnCh)
		n.returnCh = nil
	}
	n.mu.Unlock()

	n.stopFront()

	if n.gate != nil {
		n.gate.close()
	}

	n.connMu.Lock()
	for _, c := range n.remotes {
		_ = c.Close()
	}
	n.connMu.Unlock()

	if n.localConn != nil {
		_ = n.localConn.Close()
	}

	if n.backend != nil {
		n.backend.Stop()
	}

	n.events.reset()
}

// emitStage publishes a MachineStatusEvent. machined's MachineStatusPublisher controller
// publishes them, so they carry no actor id.
func (n *node) emitStage(stage machineapi.MachineStatusEvent_MachineStage, ready bool) {
	st := &machineapi.MachineStatusEvent_MachineStatus{Ready: ready}
	if !ready && stage == machineapi.MachineStatusEvent_BOOTING {
		st.UnmetConditions = []*machineapi.MachineStatusEvent_MachineStatus_UnmetCondition{
			{Name: "services", Reason: "some services are not healthy"},
		}
	}

	n.mu.Lock()
	n.stage = stage
	n.mu.Unlock()

	n.events.publish("", &machineapi.MachineStatusEvent{Stage: stage, Status: st})
}

// runBoot runs the boot sequence (the node just came up). note, when set, is the bootloader's
// fallback message, published as a boot SequenceEvent error.
func (n *node) runBoot(ctx context.Context, note string, startup time.Duration) {
	n.emitStage(machineapi.MachineStatusEvent_BOOTING, false)

	if note != "" {
		n.events.publish("", &machineapi.SequenceEvent{Sequence: seqBoot, Action: machineapi.SequenceEvent_NOOP,
			Error: &common.Error{Code: common.Code_FATAL, Message: note}})
	}

	if err := n.runSequence(ctx, "", seqBoot, false, machineapi.MachineStatusEvent_BOOTING, func() []phase { return bootPhases(startup) }); err != nil {
		n.c.log.Warn("boot sequence", "node", n.info.Name, "err", err)

		return
	}

	n.publishReadiness(ctx) // machinestatus.go: running, ready once every check passes
}

// sequenceRequest is what Upgrade, Reboot, Rollback and Reset hand to the background sequence.
type sequenceRequest struct {
	actor    string
	sequence string // seqUpgrade, seqStageUpgrade, seqReboot, seqReset
	takeover bool   // runtime.WithTakeover (Rollback)
	image    string // upgrade: the installer image
	rollback bool
	force    bool // reboot mode FORCE: only the reboot phase
	kexec    bool // upgrade reboot mode DEFAULT
	graceful bool // reset
	reboot   bool // reset: reboot afterwards instead of staying down
	// wipeLabels (reset): the system partitions to wipe (ResetRequest.SystemPartitionsToWipe);
	// empty wipes the whole system disk.
	wipeLabels []string
}

// startSequence runs a sequence in the background, as machined's API handlers do after they
// acknowledged the request.
func (n *node) startSequence(req sequenceRequest) {
	n.c.goBackground(func(ctx context.Context) { n.sequence(ctx, req) })
}

func (n *node) sequence(ctx context.Context, req sequenceRequest) {
	var (
		phases func() []phase
		stage  machineapi.MachineStatusEvent_MachineStage
	)

	switch req.sequence {
	case seqUpgrade:
		phases, stage = func() []phase { return n.upgradePhases(req) }, machineapi.MachineStatusEvent_UPGRADING
	case seqStageUpgrade:
		phases, stage = func() []phase {
			return slices.Concat([]phase{ph("cleanup", noop("stopAllPods")), ph("dbus", noop("stopDBus"))},
				stopAllPhases(req.kexec), []phase{n.rebootPhase()})
		}, machineapi.MachineStatusEvent_UPGRADING
	case seqReset:
		phases, stage = func() []phase { return n.resetPhases(req) }, machineapi.MachineStatusEvent_RESETTING
	default:
		phases, stage = func() []phase {
			if req.force {
				return []phase{n.rebootPhase()}
			}

			return slices.Concat([]phase{ph("cleanup", noop("stopAllPods")), ph("dbus", noop("stopDBus"))},
				stopAllPhases(true), []phase{n.rebootPhase()})
		}, machineapi.MachineStatusEvent_REBOOTING
	}

	err := n.runSequence(ctx, req.actor, req.sequence, req.takeover, stage, phases)

	switch {
	case errors.Is(err, errReboot):
		if req.sequence == seqReset && !req.reboot {
			n.mu.Lock()
			from := n.state
			n.state = stateReset
			n.mu.Unlock()

			n.transition(from, stateReset)

			return
		}

		n.reboot(ctx, req)
	case errors.Is(err, errLocked), errors.Is(err, context.Canceled), err == nil:
		// LOCKED and CANCELED are not fatal for machined.
		if err == nil && n.c.kube != nil {
			n.uncordonIfOwned(ctx)
		}
	default:
		// machined treats any other sequence error as fatal: it reverts the bootloader and
		// reboots after a 10 s countdown (internal/app/machined/main.go, handle).
		n.c.log.Warn("sequence failed; node reboots", "node", n.info.Name, "sequence", req.sequence, "err", err)

		t := time.NewTimer(fatalRebootDelay)
		defer t.Stop()

		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}

		n.events.publish(req.actor, &machineapi.RestartEvent{Cmd: 0x1234567})
		n.goDown(ctx)
		n.reboot(ctx, sequenceRequest{})
	}
}

// fatalRebootDelay is machined's countdown before it reboots after a fatal sequence error.
const fatalRebootDelay = 10 * time.Second

// reboot is the time the node is down and the boot into whatever the sequence installed.
// While it reboots the node refuses connections; held down by NeverReturn it does not answer.
func (n *node) reboot(ctx context.Context, req sequenceRequest) {
	n.gate.refusing(!n.currentFault().Unreachable)

	if !n.waitReturn(ctx) {
		return
	}

	note := n.switchVersion(req)
	if n.failBoot(ctx) { // abfallback.go
		return
	}

	n.comeUp(ctx, note)
}

// rebootPhase is the "reboot" phase: the Reboot task publishes a RestartEvent and the node goes down.
func (n *node) rebootPhase() phase {
	return ph("reboot", task{name: "reboot", run: func(ctx context.Context) error {
		if n.currentFault().NoReboot {
			// Fault noReboot: the request was acknowledged, the machine never restarts.
			return nil
		}

		n.events.publish(actorFrom(ctx), &machineapi.RestartEvent{Cmd: 0x1234567})
		n.goDown(context.WithoutCancel(ctx))

		return errReboot
	}})
}

type actorKey struct{}

func actorFrom(ctx context.Context) string {
	a, _ := ctx.Value(actorKey{}).(string)

	return a
}

// upgradePhases is Sequencer.Upgrade (metal mode).
func (n *node) upgradePhases(req sequenceRequest) []phase {
	out := []phase{}

	if n.c.kube != nil {
		out = append(out, ph("drain", task{name: "cordonAndDrainNode", run: func(ctx context.Context) error {
			return n.c.kube.cordonAndDrain(ctx, n.info.NodeName)
		}}))
	}

	out = append(out, ph("cleanup", noop("stopAllPods")), ph("dbus", noop("stopDBus")),
		ph("stopServices", noop("stopServicesForUpgrade")), ph("unmount", noop("unmountPodMounts")),
		ph("unmountBind", noop("unmountSystemDiskBindMounts")), ph("unmountSystem", noop("unmountEphemeralPartition")),
		ph("volumeFinalize", noop("teardownLifecycle")),
		ph("upgrade", task{name: "upgrade", run: func(context.Context) error {
			// The installer writes the new image to the inactive boot entry, once its
			// pre-flight passed (installer.go); its exit code fails the task.
			if err := n.installerTask(req.image); err != nil {
				return err
			}

			n.mu.Lock()
			n.nextImage = req.image
			n.mu.Unlock()

			return nil
		}}),
		ph("meta", noop("reloadMeta")))

	if req.kexec {
		out = append(out, ph("kexec", noop("kexecPrepare")))
	}

	return append(out, ph("stopEverything", noop("stopAllServices")), n.rebootPhase())
}

// resetPhases is Sequencer.Reset (metal mode, system disk wiped).
func (n *node) resetPhases(req sequenceRequest) []phase {
	out := []phase{}

	if req.graceful && n.c.kube != nil {
		out = append(out, ph("drain", task{name: "cordonAndDrainNode", run: func(ctx context.Context) error {
			// taskErrorHandler(logError, …): a failed drain is logged, not fatal.
			if err := n.c.kube.cordonAndDrain(ctx, n.info.NodeName); err != nil {
				n.c.log.Warn("reset: drain", "node", n.info.Name, "err", err)
			}

			return nil
		}}))
	}

	if req.graceful {
		out = append(out, ph("cleanup", noop("removeAllPods")))
	} else {
		out = append(out, ph("cleanup", noop("stopAllPods")))
	}

	out = append(out, ph("dbus", noop("stopDBus")))

	if req.graceful && n.info.Role == RoleControlPlane {
		out = append(out, ph("leave", task{name: "leaveEtcd", run: n.leaveEtcdTask}))
	}

	out = append(out, ph("preReset", noop("sendResetSignal")))
	out = append(out, stopAllPhases(false)...)
	if len(req.wipeLabels) > 0 {
		out = append(out, ph("forceCleanup", noop("forceCleanup")), ph("resetSpec", task{name: "resetSystemDiskSpec", run: func(context.Context) error {
			return n.wipePartitions(req.wipeLabels)
		}}))
	} else {
		out = append(out, ph("forceCleanup", noop("forceCleanup")), ph("reset", task{name: "resetSystemDisk", run: func(context.Context) error {
			n.mu.Lock()
			n.wiped = true
			n.mu.Unlock()

			return nil
		}}))
	}

	if req.reboot {
		return append(out, n.rebootPhase())
	}

	return append(out, ph("shutdown", task{name: "shutdown", run: func(ctx context.Context) error {
		n.goDown(context.WithoutCancel(ctx))

		return errReboot
	}}))
}

// leaveEtcdTask is LeaveEtcd: the member removes itself (retrying while the cluster is unhealthy).
func (n *node) leaveEtcdTask(ctx context.Context) error {
	m := n.member()
	if m == nil || n.leftEtcd() {
		return nil
	}

	if err := m.Leave(ctx); err != nil && !errors.Is(err, etcdsim.ErrRemoved) {
		return fmt.Errorf("failed to leave cluster: %w", err)
	}

	n.mu.Lock()
	n.etcdLeft = true
	n.mu.Unlock()

	return nil
}

// uncordonIfOwned is NodeApplyController.ApplyCordoned for a running node: only a node Talos
// cordoned (annotation talos.dev/cordoned) is uncordoned.
func (n *node) uncordonIfOwned(ctx context.Context) {
	if err := n.c.kube.uncordonOwned(ctx, n.info.NodeName); err != nil {
		n.c.log.Warn("kube: uncordon", "node", n.info.Name, "err", err)
	}
}

// goDown is the shutdown half of a reboot: Kubernetes NotReady, etcd member stopped,
// API unreachable, in-memory events gone.
func (n *node) goDown(ctx context.Context) {
	n.mu.Lock()
	from := n.state
	n.state = stateRebooting
	n.mu.Unlock()

	defer n.transition(from, stateRebooting)

	if n.c.kube != nil {
		if err := n.c.kube.setReady(ctx, n.info.NodeName, false, "KubeletNotReady", "node is rebooting"); err != nil {
			n.c.log.Warn("kube: mark node not ready", "node", n.info.Name, "err", err)
		}
	}

	if m := n.member(); m != nil && m.Running() {
		if err := m.Stop(); err != nil {
			n.c.log.Warn("stop etcd member", "node", n.info.Name, "err", err)
		}
	}

	n.stopEtcdJoin()
	n.stopFront()
	n.events.reset()
	n.logs.reset()
}

// waitReturn waits out the reboot delay (plus SlowReboot) and holds the node down while a
// NeverReturn fault is set. It reports false when the cluster is closing.
func (n *node) waitReturn(ctx context.Context) bool {
	f := n.currentFault()

	t := time.NewTimer(n.c.opts.RebootDelay + f.SlowReboot)
	defer t.Stop()

	select {
	case <-ctx.Done():
		return false
	case <-t.C:
	}

	for {
		n.mu.Lock()
		if !n.fault.NeverReturn {
			n.mu.Unlock()

			return true
		}

		if n.returnCh == nil {
			n.returnCh = make(chan struct{})
		}

		ch := n.returnCh
		n.mu.Unlock()

		// Held down: the machine is off, connections go unanswered.
		n.gate.refusing(false)

		select {
		case <-ctx.Done():
			return false
		case <-ch:
		}
	}
}

// switchVersion applies what the reboot changes: an installed or staged upgrade, a rollback,
// or (with BootFailure) the A/B fallback to the old version. It returns a note for the events.
// The machine config is not touched: Talos hands the running config to the installer and
// boots the new version from the same persisted config, so patches (extraArgs and the like)
// and machine.install.image stay as they were (docs/SIMULATOR.md, "Upgrade keeps the config").
func (n *node) switchVersion(req sequenceRequest) string {
	n.mu.Lock()
	defer n.mu.Unlock()

	n.collectImages(n.c.now()) // the GC of the boot that ends (imagegc.go)
	n.bootID = newUUID()
	n.bootedAt = n.c.now()

	image := n.nextImage
	n.nextImage = ""

	switch {
	case req.rollback:
		n.version, n.prevVersion = n.prevVersion, n.version
		n.swapLandingLocked()
	case image != "":
		target, ok := n.c.images.version(image)
		if !ok {
			return fmt.Sprintf("installer image %q has no Talos version the sim knows", image)
		}

		if n.fault.BootFailure {
			// The new image was written but does not boot: reboot runs the failed boot and
			// the fallback to the old entry (abfallback.go).
			n.fallback = &abFallback{from: n.version, to: target, image: image}

			return ""
		}

		if target != n.version {
			n.prevVersion = n.version
		}

		n.version = target
		n.installLandingLocked(image, target)
	}

	return ""
}

// comeUp is the boot half of a reboot.
func (n *node) comeUp(ctx context.Context, note string) {
	if m := n.member(); m != nil && !n.currentFault().EtcdStopped && n.etcdJoins(m) {
		// An empty data directory (EPHEMERAL wiped, data lost): the etcd service's join loop.
		n.startEtcdJoin()
	} else if m != nil && !n.leftEtcd() && !n.currentFault().EtcdStopped && n.currentFault().EtcdRejoinFailure {
		n.etcdExitsAtStart()
	} else if m != nil && !n.leftEtcd() && !n.currentFault().EtcdStopped {
		if err := m.Restart(ctx); err != nil {
			n.c.log.Warn("restart etcd member", "node", n.info.Name, "err", err)
		}
	}

	n.mu.Lock()
	from := n.state
	n.state = stateRunning
	unreachable := n.fault.Unreachable
	n.mu.Unlock()

	n.transition(from, stateRunning)

	n.logs.booted(n)

	if !unreachable {
		n.serveFront()
	}

	if n.c.kube != nil {
		if err := n.c.kube.booted(ctx, n.info.NodeName, n.kubeletVersion(), n.talosVersion()); err != nil {
			n.c.log.Warn("kube: node ready", "node", n.info.Name, "err", err)
		}

		n.uncordonIfOwned(ctx)
	}

	n.runBoot(ctx, note, n.c.opts.BootDuration)

	n.c.log.Info("node booted", "node", n.info.Name, "version", n.talosVersion())
}

func (n *node) leftEtcd() bool {
	n.mu.Lock()
	defer n.mu.Unlock()

	return n.etcdLeft
}

// serviceStates is what ServiceList reports for this node.
func (n *node) serviceStates(ctx context.Context) []*machineapi.ServiceInfo {
	ids := []string{"apid", "containerd", "cri", "etcd", "kubelet", "machined", "syslogd", "trustd", "udevd"}
	f := n.currentFault()

	var out []*machineapi.ServiceInfo

	for _, id := range ids {
		if (id == "etcd" || id == "trustd") && n.info.Role != RoleControlPlane {
			continue
		}

		state, healthy, msg := "Running", true, ""
		event, unknown := "Service started", false

		if id == "etcd" {
			m := n.member()
			svcState, svcMsg := n.etcdServiceOverride()

			switch {
			case svcState != "":
				// Still in (or failed in) its pre stage: no health check ran yet.
				state, healthy, event, unknown = svcState, false, svcMsg, true
			case n.leftEtcd() || m == nil || m.Removed():
				state, healthy, msg = "Finished", false, "etcd member left the cluster"
			case !m.Running():
				state, healthy, msg = "Failed", false, "etcd is not running"
			default:
				hctx, cancel := context.WithTimeout(ctx, time.Second)
				if err := m.Healthy(hctx); err != nil {
					healthy, msg = false, err.Error()
				}
				cancel()
			}
		}

		if id == "kubelet" && n.kubeletRestarting() {
			state, healthy, msg = "Finished", false, "restarting: the kubelet configuration changed"
		}

		if f.UnhealthyService == id || id == "kubelet" && f.holdsUnmet("services") {
			healthy, msg = false, "health check failed (simulated fault)"
		}

		ts := n.c.now()
		out = append(out, &machineapi.ServiceInfo{
			Id:    id,
			State: state,
			Events: &machineapi.ServiceEvents{Events: []*machineapi.ServiceEvent{
				{Msg: "Starting service", State: "Preparing", Ts: tsProto(ts)},
				{Msg: event, State: state, Ts: tsProto(ts)},
			}},
			Health: &machineapi.ServiceHealth{Unknown: unknown, Healthy: healthy, LastMessage: msg, LastChange: tsProto(ts)},
		})
	}

	return out
}
