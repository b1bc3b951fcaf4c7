package gate

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	clusterapi "github.com/siderolabs/talos/pkg/machinery/api/cluster"
	machineapi "github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/client"
	"github.com/talosbot/talosbot/plugins/cluster"
	"github.com/talosbot/talosbot/plugins/cluster/etcd"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/emptypb"
)

// probeTalosVersion asks every node for its version, one call per node so a
// single dead node cannot hide the answers of the others.
func probeTalosVersion(ctx context.Context, g *gateRun) ProbeResult {
	type answer struct {
		node cluster.Node
		tag  string
		err  error
	}
	answers := make([]answer, len(g.inv.Nodes))
	var wg sync.WaitGroup
	for i, n := range g.inv.Nodes {
		wg.Go(func() {
			resp, err := g.c.Machine.Version(client.WithNode(ctx, n.Address), &emptypb.Empty{})
			a := answer{node: n, err: err}
			if err == nil {
				if len(resp.GetMessages()) == 0 {
					a.err = errors.New("empty version reply")
				} else {
					a.tag = resp.GetMessages()[0].GetVersion().GetTag()
				}
			}
			answers[i] = a
		})
	}
	wg.Wait()

	var fails []cluster.NodeFailure
	byTag := map[string][]string{}
	for _, a := range answers {
		if a.err != nil {
			fails = append(fails, cluster.FailureOf(a.node.Name, a.err))
			continue
		}
		byTag[a.tag] = append(byTag[a.tag], a.node.Name)
	}
	skew := renderSkew(byTag)
	if len(fails) > 0 {
		detail, unreachable := cluster.DescribeFailures(fails)
		if len(byTag) > 0 {
			detail += "; answered: " + skew
		}
		return ProbeResult{Status: StatusFail, Detail: detail, Unreachable: unreachable}
	}
	if len(byTag) > 1 {
		return ProbeResult{Status: StatusWarn, Detail: "version skew: " + skew}
	}
	for tag := range byTag {
		return ProbeResult{Status: StatusOK, Detail: fmt.Sprintf("%s on all %d nodes", tag, len(answers))}
	}
	return ProbeResult{Status: StatusFail, Detail: "the inventory has no nodes"}
}

// renderSkew lists versions, newest count first: "v1.12.6 on cp-1, cp-2; v1.13.9 on worker-1".
func renderSkew(byTag map[string][]string) string {
	tags := make([]string, 0, len(byTag))
	for t := range byTag {
		tags = append(tags, t)
	}
	sort.Strings(tags)
	parts := make([]string, len(tags))
	for i, t := range tags {
		parts[i] = t + " on " + strings.Join(byTag[t], ", ")
	}
	return strings.Join(parts, "; ")
}

// probeClusterHealth is `talosctl health` (server-side, its default): Talos's
// ClusterService.HealthCheck on one control plane — the first that answers;
// a worker is never asked, as machined refuses the check there — given the
// inventory's control planes and workers as IP literals (the server parses
// them with netip, as cluster.IPsToNodeInfos does), so that it checks the
// inventory rather than whatever the cluster discovers. The server runs
// check.DefaultClusterChecks in order; its lines are kept in Checks.
func probeClusterHealth(ctx context.Context, g *gateRun) ProbeResult {
	info, err := clusterInfo(ctx, g)
	if err != nil {
		return ProbeResult{Status: StatusFail, Detail: err.Error()}
	}
	wait := g.opts.HealthCheckWait
	if dl, ok := ctx.Deadline(); ok {
		// The server gets most of the probe's time to wait for its checks,
		// and leaves the rest to report why it is still waiting.
		if left := time.Until(dl) * 3 / 4; wait <= 0 || wait > left {
			wait = left
		}
	}
	var fails []cluster.NodeFailure
	for _, cp := range g.inv.ControlPlanes() {
		r, reached := healthCheckOn(ctx, g, cp, info, wait)
		if reached {
			if len(fails) > 0 {
				// Earlier control planes did not answer: the check itself
				// may pass, but a node is down.
				d, unreachable := cluster.DescribeFailures(fails)
				r.Status = StatusFail
				r.Detail = d + "; " + r.Detail
				r.Unreachable = append(r.Unreachable, unreachable...)
			}
			return r
		}
		fails = append(fails, cluster.NodeFailure{Node: cp.Name, Msg: r.Detail, Unreachable: true})
	}
	d, unreachable := cluster.DescribeFailures(fails)
	return ProbeResult{Status: StatusFail, Detail: "no control plane answered: " + d, Unreachable: unreachable}
}

// Resolver turns an inventory address that is a host name into IPs
// (net.DefaultResolver satisfies it).
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// clusterInfo is the node list of the health check: the inventory's control
// planes and workers, each as an IP literal. An address that is a name is
// resolved; one that does not resolve fails the probe, by node.
func clusterInfo(ctx context.Context, g *gateRun) (*clusterapi.ClusterInfo, error) {
	ips := func(nodes []cluster.Node) ([]string, error) {
		out := make([]string, 0, len(nodes))
		for _, n := range nodes {
			ip, err := IPLiteral(ctx, g.opts.Resolver, n.Address)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", n.Name, err)
			}
			out = append(out, ip)
		}
		return out, nil
	}
	cps, err := ips(g.inv.ControlPlanes())
	if err != nil {
		return nil, err
	}
	workers, err := ips(g.inv.Workers())
	if err != nil {
		return nil, err
	}
	return &clusterapi.ClusterInfo{ControlPlaneNodes: cps, WorkerNodes: workers}, nil
}

// IPLiteral returns address as Talos's health check takes it: an IP
// literal, resolving a host name (the first address) with r (nil:
// net.DefaultResolver).
func IPLiteral(ctx context.Context, r Resolver, address string) (string, error) {
	if ip, err := netip.ParseAddr(address); err == nil {
		return ip.String(), nil
	}
	if r == nil {
		r = net.DefaultResolver
	}
	addrs, err := r.LookupNetIP(ctx, "ip", address)
	if err != nil || len(addrs) == 0 {
		return "", fmt.Errorf("address %q is not an IP and does not resolve to one (%v); Talos's health check takes IP literals: put the node's IP in the inventory", address, err)
	}
	return addrs[0].Unmap().String(), nil
}

// healthCheckOn runs the check on one control plane and reads its stream as
// talosctl health does: every message is a line; a message whose metadata
// carries an error ends the check with it. reached is false only when the
// node itself could not be reached (so the next control plane is tried).
func healthCheckOn(ctx context.Context, g *gateRun, cp cluster.Node, info *clusterapi.ClusterInfo, wait time.Duration) (ProbeResult, bool) {
	stream, err := g.c.Health.HealthCheck(client.WithNode(ctx, cp.Address),
		&clusterapi.HealthCheckRequest{WaitTimeout: durationpb.New(wait), ClusterInfo: info})
	if err != nil {
		st := status.Convert(err)
		return ProbeResult{Status: StatusFail, Detail: cluster.ShortErr(st.Message())}, !cluster.UnreachableCode(st.Code())
	}
	var lines checkLines
	fail := func(detail string) (ProbeResult, bool) {
		if last := lines.lastPending(); last != "" {
			detail = last
		}
		return ProbeResult{Status: StatusFail, Detail: fmt.Sprintf("%s (run on %s)", detail, cp.Name), Checks: lines.final()}, true
	}
	for {
		msg, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			ok, skipped := lines.counts()
			detail := fmt.Sprintf("%d checks passed on %s", ok, cp.Name)
			if len(skipped) > 0 {
				detail += fmt.Sprintf(", %d skipped by Talos (%s)", len(skipped), strings.Join(skipped, ", "))
			}
			return ProbeResult{Status: StatusOK, Detail: detail, Checks: lines.final()}, true
		}
		if err != nil {
			st := status.Convert(err)
			if lines.n == 0 && cluster.UnreachableCode(st.Code()) && ctx.Err() == nil {
				return ProbeResult{Status: StatusFail, Detail: cluster.ShortErr(st.Message())}, false
			}
			return fail(cluster.ShortErr(st.Message()))
		}
		if e := msg.GetMetadata().GetError(); e != "" {
			return fail("healthcheck error: " + e)
		}
		lines.add(msg.GetMessage())
	}
}

// checkLines keeps the server's lines the way a reader of `talosctl health`
// sees them settle: the "discovered nodes" line, then the latest line of
// each check ("waiting for <check>: <result>"), in the order Talos ran them.
type checkLines struct {
	n     int
	order []string          // check descriptions, first seen first
	last  map[string]string // description → latest line
	other []string          // lines that are not a check's
}

func (c *checkLines) add(line string) {
	c.n++
	line = strings.TrimSpace(line)
	if line == "" {
		return
	}
	desc, ok := checkOf(line)
	if !ok {
		c.other = append(c.other, line)
		return
	}
	if c.last == nil {
		c.last = map[string]string{}
	}
	if _, seen := c.last[desc]; !seen {
		c.order = append(c.order, desc)
	}
	c.last[desc] = line
}

// checkOf splits "waiting for <desc>: <result>" (check.Wait's reporter).
func checkOf(line string) (string, bool) {
	rest, ok := strings.CutPrefix(line, "waiting for ")
	if !ok {
		return "", false
	}
	desc, _, ok := strings.Cut(rest, ": ")
	return desc, ok
}

// result is what follows the description: "OK", "SKIP", "..." or an error.
func result(line string) string {
	_, r, _ := strings.Cut(strings.TrimPrefix(line, "waiting for "), ": ")
	return r
}

func (c *checkLines) final() []string {
	out := append([]string(nil), c.other...)
	for _, d := range c.order {
		out = append(out, c.last[d])
	}
	return out
}

// lastPending is the latest line of the check that had not passed when the
// stream ended: why the server was still waiting.
func (c *checkLines) lastPending() string {
	for i := len(c.order) - 1; i >= 0; i-- {
		if l := c.last[c.order[i]]; result(l) != "OK" && result(l) != "SKIP" {
			return l
		}
	}
	return ""
}

// counts returns how many checks passed and which ones Talos skipped
// (conditions.ErrSkipAssertion: e.g. no kube-proxy DaemonSet).
func (c *checkLines) counts() (ok int, skipped []string) {
	for _, d := range c.order {
		switch result(c.last[d]) {
		case "OK":
			ok++
		case "SKIP":
			skipped = append(skipped, d)
		}
	}
	return ok, skipped
}

// isHealthy says whether a Talos service is fine. etcd must also be Running.
func isHealthy(svc *machineapi.ServiceInfo) (bool, string) {
	h := svc.GetHealth()
	switch {
	case svc.GetId() == "etcd" && svc.GetState() != "Running":
		return false, fmt.Sprintf("etcd %s (%s)", svc.GetState(), h.GetLastMessage())
	case svc.GetState() == "Failed":
		return false, fmt.Sprintf("%s Failed (%s)", svc.GetId(), h.GetLastMessage())
	case h != nil && !h.GetUnknown() && !h.GetHealthy():
		return false, fmt.Sprintf("%s unhealthy (%s)", svc.GetId(), h.GetLastMessage())
	}
	return true, ""
}

// probeServices checks the services (etcd above all) on every control plane.
func probeServices(ctx context.Context, g *gateRun) ProbeResult {
	targets := cluster.EtcdTargets(g.inv)
	resp, err := g.c.Machine.ServiceList(client.WithNodes(ctx, targets...), &emptypb.Empty{})
	if err != nil {
		d, u := cluster.DescribeFailures(cluster.AllFailed(g.inv, targets, err))
		return ProbeResult{Status: StatusFail, Detail: d, Unreachable: u}
	}
	ok, fails := cluster.ByNode(g.inv, targets, resp.GetMessages())
	var bad []string
	services := 0
	for _, cp := range g.inv.ControlPlanes() {
		m, answered := ok[cp.Name]
		if !answered {
			continue
		}
		sawEtcd := false
		for _, svc := range m.GetServices() {
			services++
			if svc.GetId() == "etcd" {
				sawEtcd = true
			}
			if healthy, why := isHealthy(svc); !healthy {
				bad = append(bad, cp.Name+": "+why+etcd.ExplainService(svc, cp.Name, cp.Address))
			}
		}
		if !sawEtcd {
			bad = append(bad, cp.Name+": no etcd service")
		}
	}
	if len(fails) > 0 || len(bad) > 0 {
		d, u := cluster.DescribeFailures(fails)
		parts := slices.DeleteFunc(append([]string{d}, bad...), func(s string) bool { return s == "" })
		return ProbeResult{Status: StatusFail, Detail: strings.Join(parts, "; "), Unreachable: u}
	}
	return ProbeResult{Status: StatusOK, Detail: fmt.Sprintf("etcd and %d other services healthy on %d control plane(s)",
		services-len(targets), len(targets))}
}

// probeEtcdStatus checks the members' view of etcd on every control plane
// (R4 targets): one agreed, non-zero leader, no member errors, no learners,
// raft indexes close together; then (only with a leader, as these calls go
// through raft and would hang without one) alarms and membership size.
func probeEtcdStatus(ctx context.Context, g *gateRun) ProbeResult {
	targets := cluster.EtcdTargets(g.inv)
	ok, fails := cluster.PerNode(ctx, g.inv, targets, func(nctx context.Context) ([]*machineapi.EtcdStatus, error) {
		resp, err := g.c.Machine.EtcdStatus(nctx, &emptypb.Empty{})
		return resp.GetMessages(), err
	})
	failDetail, unreachable := cluster.DescribeFailures(fails)
	var problems []string
	if failDetail != "" {
		problems = append(problems, failDetail)
	}

	memberName := map[uint64]string{}
	leaders := map[uint64][]string{}
	var minIdx, maxIdx uint64
	first := true
	for _, cp := range g.inv.ControlPlanes() {
		m, answered := ok[cp.Name]
		if !answered {
			continue
		}
		st := m.GetMemberStatus()
		memberName[st.GetMemberId()] = cp.Name
		leaders[st.GetLeader()] = append(leaders[st.GetLeader()], cp.Name)
		if errs := st.GetErrors(); len(errs) > 0 {
			problems = append(problems, fmt.Sprintf("%s reports errors: %s", cp.Name, strings.Join(errs, ", ")))
		}
		if st.GetIsLearner() {
			problems = append(problems, cp.Name+" is a learner, not a voting member")
		}
		idx := st.GetRaftIndex()
		if first || idx < minIdx {
			minIdx = idx
		}
		if first || idx > maxIdx {
			maxIdx = idx
		}
		first = false
	}

	leaderOK := false
	var leaderID uint64
	switch {
	case len(leaders) == 0:
	case len(leaders[0]) > 0:
		problems = append(problems, "no etcd leader on "+strings.Join(leaders[0], ", "))
	case len(leaders) > 1:
		var views []string
		for id, names := range leaders {
			views = append(views, fmt.Sprintf("%s see leader %s", strings.Join(names, ", "), etcd.MemberName(memberName, id)))
		}
		sort.Strings(views)
		problems = append(problems, "members disagree on the leader: "+strings.Join(views, "; "))
	default:
		for id := range leaders {
			leaderID, leaderOK = id, true
		}
	}
	if !first && maxIdx-minIdx > g.opts.MaxRaftIndexLag {
		problems = append(problems, fmt.Sprintf("raft indexes differ by %d (more than %d)", maxIdx-minIdx, g.opts.MaxRaftIndexLag))
	}

	if leaderOK {
		// Only the members that answered: one that did not would hold the
		// one-to-many calls below until their deadline.
		var answered []string
		for _, t := range targets {
			if _, yes := ok[g.inv.NameOf(t)]; yes {
				answered = append(answered, t)
			}
		}
		problems = append(problems, etcdClusterChecks(client.WithNodes(ctx, answered...), g, answered, memberName)...)
	}
	if len(problems) > 0 {
		return ProbeResult{Status: StatusFail, Detail: strings.Join(problems, "; "), Unreachable: unreachable}
	}
	return ProbeResult{Status: StatusOK, Detail: fmt.Sprintf("leader %s agreed by %d member(s), raft index spread %d, no alarms, no learners",
		etcd.MemberName(memberName, leaderID), len(ok), maxIdx-minIdx)}
}

// etcdClusterChecks looks for alarms and membership that does not match the
// inventory's control planes (a leftover or missing member).
func etcdClusterChecks(ctx context.Context, g *gateRun, targets []string, memberName map[uint64]string) []string {
	var problems []string
	var mu sync.Mutex
	add := func(s string) {
		mu.Lock()
		problems = append(problems, s)
		mu.Unlock()
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		resp, err := g.c.Machine.EtcdAlarmList(ctx, &emptypb.Empty{})
		if err != nil {
			add("alarm list failed: " + cluster.ShortErr(status.Convert(err).Message()))
			return
		}
		ok, _ := cluster.ByNode(g.inv, targets, resp.GetMessages())
		seen := map[string]bool{}
		for _, m := range ok {
			for _, a := range m.GetMemberAlarms() {
				if a.GetAlarm() == machineapi.EtcdMemberAlarm_NONE {
					continue
				}
				name := etcd.MemberName(memberName, a.GetMemberId())
				address := name
				if nd, ok := g.inv.Node(name); ok {
					address = nd.Address
				}
				s := fmt.Sprintf("alarm %s on member %s", a.GetAlarm(), name) + etcd.ExplainAlarm(a.GetAlarm(), address)
				if !seen[s] {
					seen[s] = true
					add(s)
				}
			}
		}
	})
	wg.Go(func() {
		resp, err := g.c.Machine.EtcdMemberList(ctx, &machineapi.EtcdMemberListRequest{QueryLocal: true})
		if err != nil {
			add("member list failed: " + cluster.ShortErr(status.Convert(err).Message()))
			return
		}
		ok, _ := cluster.ByNode(g.inv, targets, resp.GetMessages())
		cps := len(g.inv.ControlPlanes())
		for _, cp := range g.inv.ControlPlanes() {
			m, answered := ok[cp.Name]
			if !answered {
				continue
			}
			var learners []string
			for _, mem := range m.GetMembers() {
				if mem.GetIsLearner() {
					learners = append(learners, mem.GetHostname())
				}
			}
			if n := len(m.GetMembers()); n != cps {
				add(fmt.Sprintf("%s lists %d etcd members but the inventory has %d control planes", cp.Name, n, cps))
			}
			if len(learners) > 0 {
				add(fmt.Sprintf("%s lists learners: %s", cp.Name, strings.Join(learners, ", ")))
			}
			break // one view is enough; status already compared every member
		}
	})
	wg.Wait()
	sort.Strings(problems)
	return problems
}
