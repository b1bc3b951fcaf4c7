package cluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	clusterapi "github.com/siderolabs/talos/pkg/machinery/api/cluster"
	"github.com/siderolabs/talos/pkg/machinery/api/common"
	machineapi "github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/client"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/emptypb"
)

// nodeFailure is why one node did not answer.
type nodeFailure struct {
	node        string
	msg         string
	unreachable bool
}

// failureOf classifies a gRPC error from a single-target call.
func failureOf(node string, err error) nodeFailure {
	st := status.Convert(err)
	return nodeFailure{node: node, msg: shortErr(st.Message()), unreachable: unreachableCode(st.Code())}
}

func unreachableCode(c codes.Code) bool {
	return c == codes.Unavailable || c == codes.DeadlineExceeded || c == codes.Canceled
}

// shortErr keeps the useful tail of gRPC dial errors
// ("…: dial tcp 10.0.0.2:50000: connect: connection refused").
func shortErr(msg string) string {
	if i := strings.LastIndex(msg, "dial tcp "); i >= 0 {
		return msg[i:]
	}
	if len(msg) > 160 {
		return msg[:157] + "..."
	}
	return msg
}

// describeFailures renders failures grouped: unreachable first, then errors.
func describeFailures(fs []nodeFailure) (detail string, unreachable []string) {
	var errs []string
	for _, f := range fs {
		if f.unreachable {
			unreachable = append(unreachable, f.node)
		} else {
			errs = append(errs, f.node+": "+f.msg)
		}
	}
	var parts []string
	if len(unreachable) > 0 {
		first := ""
		for _, f := range fs {
			if f.unreachable {
				first = f.msg
				break
			}
		}
		parts = append(parts, fmt.Sprintf("unreachable: %s (%s)", joinNames(unreachable), first))
	}
	parts = append(parts, errs...)
	return strings.Join(parts, "; "), unreachable
}

type withMetadata interface{ GetMetadata() *common.Metadata }

// byNode splits a one-to-many reply (client.WithNodes) into answers and
// failures by node name. apid echoes each target in Metadata.Hostname and
// turns a failed target into a message carrying Metadata.Error; a target
// without any message is a failure too.
func byNode[T withMetadata](inv Inventory, targets []string, msgs []T) (map[string]T, []nodeFailure) {
	ok := map[string]T{}
	failed := map[string]nodeFailure{}
	for _, m := range msgs {
		md := m.GetMetadata()
		host := md.GetHostname()
		if host == "" && len(targets) == 1 {
			host = targets[0]
		}
		name := inv.NameOf(host)
		if md.GetError() != "" {
			code := codes.Unknown
			if st := md.GetStatus(); st != nil {
				code = codes.Code(st.GetCode())
			}
			failed[name] = nodeFailure{node: name, msg: shortErr(md.GetError()),
				unreachable: unreachableCode(code) || strings.Contains(md.GetError(), "connection refused")}
			continue
		}
		ok[name] = m
	}
	var fs []nodeFailure
	for _, t := range targets {
		name := inv.NameOf(t)
		if f, bad := failed[name]; bad {
			fs = append(fs, f)
		} else if _, good := ok[name]; !good {
			fs = append(fs, nodeFailure{node: name, msg: "no reply"})
		}
	}
	return ok, fs
}

// perNode makes one call per target, concurrently, instead of one
// one-to-many call: apid answers a one-to-many call only once every backend
// has answered, and a node whose etcd is stopped makes machined wait for its
// local etcd until the caller's deadline (Talos v1.13.9
// internal/app/machined/internal/server/v1alpha1/v1alpha1_server.go,
// EtcdStatus), which would turn the answers of the healthy members into one
// deadline error for all of them.
func perNode[T withMetadata](ctx context.Context, inv Inventory, targets []string, call func(context.Context) ([]T, error)) (map[string]T, []nodeFailure) {
	msgs := make([][]T, len(targets))
	errs := make([]error, len(targets))
	var wg sync.WaitGroup
	for i, t := range targets {
		wg.Go(func() { msgs[i], errs[i] = call(client.WithNode(ctx, t)) })
	}
	wg.Wait()
	ok := map[string]T{}
	var fs []nodeFailure
	for i, t := range targets {
		if errs[i] != nil {
			fs = append(fs, failureOf(inv.NameOf(t), errs[i]))
			continue
		}
		o, f := byNode(inv, []string{t}, msgs[i])
		maps.Copy(ok, o)
		fs = append(fs, f...)
	}
	return ok, fs
}

// allFailed marks every target as failed by one call error.
func allFailed(inv Inventory, targets []string, err error) []nodeFailure {
	fs := make([]nodeFailure, len(targets))
	for i, t := range targets {
		fs[i] = failureOf(inv.NameOf(t), err)
	}
	return fs
}

// probeTalosVersion asks every node for its version, one call per node so a
// single dead node cannot hide the answers of the others.
func probeTalosVersion(ctx context.Context, g *gateRun) ProbeResult {
	type answer struct {
		node Node
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

	var fails []nodeFailure
	byTag := map[string][]string{}
	for _, a := range answers {
		if a.err != nil {
			fails = append(fails, failureOf(a.node.Name, a.err))
			continue
		}
		byTag[a.tag] = append(byTag[a.tag], a.node.Name)
	}
	skew := renderSkew(byTag)
	if len(fails) > 0 {
		detail, unreachable := describeFailures(fails)
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
		parts[i] = t + " on " + joinNames(byTag[t])
	}
	return strings.Join(parts, "; ")
}

// probeClusterHealth runs Talos's server-side health check on one control
// plane (the first that answers), giving it the full node list so that it
// checks the inventory rather than whatever the cluster believes it has.
func probeClusterHealth(ctx context.Context, g *gateRun) ProbeResult {
	info := &clusterapi.ClusterInfo{
		ControlPlaneNodes: Addresses(g.inv.ControlPlanes()),
		WorkerNodes:       Addresses(g.inv.Workers()),
	}
	wait := g.opts.HealthCheckWait
	if dl, ok := ctx.Deadline(); ok {
		// Leave the server time to report why it is still waiting.
		wait = min(wait, time.Until(dl)*3/4)
	}
	var fails []nodeFailure
	for _, cp := range g.inv.ControlPlanes() {
		r, reached := healthCheckOn(ctx, g, cp, info, wait)
		if reached {
			if len(fails) > 0 {
				// Earlier control planes did not answer: the check itself
				// may pass, but a node is down.
				d, unreachable := describeFailures(fails)
				r.Status = StatusFail
				r.Detail = d + "; " + r.Detail
				r.Unreachable = append(r.Unreachable, unreachable...)
			}
			return r
		}
		fails = append(fails, nodeFailure{node: cp.Name, msg: r.Detail, unreachable: true})
	}
	d, unreachable := describeFailures(fails)
	return ProbeResult{Status: StatusFail, Detail: "no control plane answered: " + d, Unreachable: unreachable}
}

func healthCheckOn(ctx context.Context, g *gateRun, cp Node, info *clusterapi.ClusterInfo, wait time.Duration) (ProbeResult, bool) {
	stream, err := g.c.Health.HealthCheck(client.WithNode(ctx, cp.Address),
		&clusterapi.HealthCheckRequest{WaitTimeout: durationpb.New(wait), ClusterInfo: info})
	if err != nil {
		st := status.Convert(err)
		return ProbeResult{Status: StatusFail, Detail: shortErr(st.Message())}, !unreachableCode(st.Code())
	}
	var last string
	passed, msgs := 0, 0
	for {
		msg, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return ProbeResult{Status: StatusOK, Detail: fmt.Sprintf("%d checks passed (run on %s)", passed, cp.Name)}, true
		}
		if err != nil {
			st := status.Convert(err)
			if msgs == 0 && unreachableCode(st.Code()) && ctx.Err() == nil {
				return ProbeResult{Status: StatusFail, Detail: shortErr(st.Message())}, false
			}
			detail := shortErr(st.Message())
			if last != "" {
				detail = last
			}
			return ProbeResult{Status: StatusFail, Detail: fmt.Sprintf("%s (run on %s)", detail, cp.Name)}, true
		}
		msgs++
		if m := msg.GetMessage(); strings.HasSuffix(m, ": OK") {
			passed++
		} else if m != "" {
			last = m
		}
	}
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
	targets := EtcdTargets(g.inv)
	resp, err := g.c.Machine.ServiceList(client.WithNodes(ctx, targets...), &emptypb.Empty{})
	if err != nil {
		d, u := describeFailures(allFailed(g.inv, targets, err))
		return ProbeResult{Status: StatusFail, Detail: d, Unreachable: u}
	}
	ok, fails := byNode(g.inv, targets, resp.GetMessages())
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
				bad = append(bad, cp.Name+": "+why)
			}
		}
		if !sawEtcd {
			bad = append(bad, cp.Name+": no etcd service")
		}
	}
	if len(fails) > 0 || len(bad) > 0 {
		d, u := describeFailures(fails)
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
	targets := EtcdTargets(g.inv)
	ok, fails := perNode(ctx, g.inv, targets, func(nctx context.Context) ([]*machineapi.EtcdStatus, error) {
		resp, err := g.c.Machine.EtcdStatus(nctx, &emptypb.Empty{})
		return resp.GetMessages(), err
	})
	failDetail, unreachable := describeFailures(fails)
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
		problems = append(problems, "no etcd leader on "+joinNames(leaders[0]))
	case len(leaders) > 1:
		var views []string
		for id, names := range leaders {
			views = append(views, fmt.Sprintf("%s see leader %s", joinNames(names), nameOrID(memberName, id)))
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
		nameOrID(memberName, leaderID), len(ok), maxIdx-minIdx)}
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
			add("alarm list failed: " + shortErr(status.Convert(err).Message()))
			return
		}
		ok, _ := byNode(g.inv, targets, resp.GetMessages())
		seen := map[string]bool{}
		for _, m := range ok {
			for _, a := range m.GetMemberAlarms() {
				if a.GetAlarm() == machineapi.EtcdMemberAlarm_NONE {
					continue
				}
				s := fmt.Sprintf("alarm %s on member %s", a.GetAlarm(), nameOrID(memberName, a.GetMemberId()))
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
			add("member list failed: " + shortErr(status.Convert(err).Message()))
			return
		}
		ok, _ := byNode(g.inv, targets, resp.GetMessages())
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
				add(fmt.Sprintf("%s lists learners: %s", cp.Name, joinNames(learners)))
			}
			break // one view is enough; status already compared every member
		}
	})
	wg.Wait()
	sort.Strings(problems)
	return problems
}

func nameOrID(names map[uint64]string, id uint64) string {
	if n, ok := names[id]; ok {
		return n
	}
	return fmt.Sprintf("%x", id)
}
