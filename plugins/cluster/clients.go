package cluster

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/cosi-project/runtime/pkg/state"
	clusterapi "github.com/siderolabs/talos/pkg/machinery/api/cluster"
	"github.com/siderolabs/talos/pkg/machinery/api/common"
	machineapi "github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/client"
	clientconfig "github.com/siderolabs/talos/pkg/machinery/client/config"
	"github.com/talosbot/talosbot/plugins/sdk"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/protobuf/types/known/emptypb"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// MachineAPI is the part of the Talos MachineService the plugins use. The
// generated machineapi.MachineServiceClient satisfies it; unit tests fake it.
// Calls are routed with client.WithNode / client.WithNodes on the context.
type MachineAPI interface {
	Version(ctx context.Context, in *emptypb.Empty, opts ...grpc.CallOption) (*machineapi.VersionResponse, error)
	ServiceList(ctx context.Context, in *emptypb.Empty, opts ...grpc.CallOption) (*machineapi.ServiceListResponse, error)
	EtcdStatus(ctx context.Context, in *emptypb.Empty, opts ...grpc.CallOption) (*machineapi.EtcdStatusResponse, error)
	EtcdAlarmList(ctx context.Context, in *emptypb.Empty, opts ...grpc.CallOption) (*machineapi.EtcdAlarmListResponse, error)
	EtcdMemberList(ctx context.Context, in *machineapi.EtcdMemberListRequest, opts ...grpc.CallOption) (*machineapi.EtcdMemberListResponse, error)
	EtcdSnapshot(ctx context.Context, in *machineapi.EtcdSnapshotRequest, opts ...grpc.CallOption) (grpc.ServerStreamingClient[common.Data], error)
}

// HealthAPI is Talos's server-side cluster health check.
type HealthAPI interface {
	HealthCheck(ctx context.Context, in *clusterapi.HealthCheckRequest, opts ...grpc.CallOption) (grpc.ServerStreamingClient[clusterapi.HealthCheckProgress], error)
}

// Clients bundles the cluster APIs of one run. Kube and Dynamic are nil when
// the host sent no kubeconfig; the Kubernetes probes then say so.
type Clients struct {
	Machine MachineAPI
	Health  HealthAPI
	// COSI is Talos's resource API (client.Client.COSI): the machine config is read there.
	COSI    state.State
	Kube    kubernetes.Interface
	Dynamic dynamic.Interface

	closers []func() error
}

// Close releases the connections.
func (c *Clients) Close() error {
	var errs []error
	for _, f := range c.closers {
		errs = append(errs, f())
	}
	return errors.Join(errs...)
}

// Connect builds the clients for one run from the request's credentials,
// which stay in memory (R23). The Talos endpoints are every control-plane
// address of the inventory, so the client fails over when one is down.
func Connect(ctx context.Context, inv Inventory, creds *sdk.Credentials) (*Clients, error) {
	if len(creds.Talosconfig) == 0 {
		return nil, fmt.Errorf("cluster %s: no talosconfig was provided; configure the cluster's credentials (Terraform output or file)", inv.Name)
	}
	tc, err := NewTalosClient(ctx, creds.Talosconfig, Addresses(inv.ControlPlanes()))
	if err != nil {
		return nil, fmt.Errorf("cluster %s: %w", inv.Name, err)
	}
	c := &Clients{Machine: tc.MachineClient, Health: tc.ClusterClient, COSI: tc.COSI, closers: []func() error{tc.Close}}
	if len(creds.Kubeconfig) > 0 {
		kube, dyn, err := NewKubeClients(creds.Kubeconfig)
		if err != nil {
			_ = c.Close()
			return nil, fmt.Errorf("cluster %s: %w", inv.Name, err)
		}
		c.Kube, c.Dynamic = kube, dyn
	}
	return c, nil
}

// NewTalosClient builds a machinery client from talosconfig bytes with the
// given endpoints (overriding the talosconfig's own, which may be stale or a
// single address). Target nodes per call with client.WithNode(s).
func NewTalosClient(ctx context.Context, talosconfig []byte, endpoints []string) (*client.Client, error) {
	cfg, err := ParseTalosconfig(talosconfig)
	if err != nil {
		return nil, err
	}
	if len(endpoints) == 0 {
		return nil, errors.New("no Talos endpoints: the inventory lists no control-plane address")
	}
	c, err := client.New(ctx, client.WithConfig(cfg), client.WithEndpoints(endpoints...), client.WithGRPCDialOptions(TrackerDialOptions()...))
	if err != nil {
		return nil, fmt.Errorf("create Talos client: %w", err)
	}
	return c, nil
}

// quotedValue is a value the YAML decoder quotes in its errors
// ("cannot construct !!str `xoxb-SU...` into config.Config").
var quotedValue = regexp.MustCompile("`[^`]*`")

// ParseTalosconfig parses talosconfig bytes. Its error keeps the decoder's
// line numbers and types but none of the document: the decoder quotes the
// start of a value it cannot use, and a talosconfig credential pointing at
// the wrong file (an env file, a token) would show the start of that secret
// on the card, in the log and in the audit trail. So the decoder's error is
// not wrapped (%w would carry its text), only its redacted text is kept.
func ParseTalosconfig(talosconfig []byte) (*clientconfig.Config, error) {
	cfg, err := clientconfig.FromBytes(talosconfig)
	if err != nil {
		msg := quotedValue.ReplaceAllString(err.Error(), "a value")
		return nil, fmt.Errorf("parse talosconfig: %s (check the talosconfig credential)", strings.Join(strings.Fields(msg), " "))
	}
	return cfg, nil
}

// TrackerDialOptions are the connection settings of talosctl's action
// tracker (cmd/talosctl/pkg/talos/action/tracker.go), which follows nodes
// through reboots: keepalive pings every 10 s with a 5 s timeout on
// connections that carry a stream, so a stream to a node that vanished
// without closing its connection (a reboot, a power cut) fails within
// seconds instead of hanging; and no long reconnect backoff, so the client
// reconnects as soon as a rebooted endpoint answers again instead of after
// gRPC's default backoff of up to two minutes. talosctl disables the backoff
// altogether; we keep a short one (at most 2 s) so that a node that refuses
// connections is not redialled in a busy loop.
func TrackerDialOptions() []grpc.DialOption {
	return []grpc.DialOption{
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 250 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: 2 * time.Second},
			MinConnectTimeout: 20 * time.Second,
		}),
		grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: 10 * time.Second, Timeout: 5 * time.Second}),
	}
}

// NewKubeClients builds client-go typed and dynamic clients from kubeconfig
// bytes (current context).
func NewKubeClients(kubeconfig []byte) (kubernetes.Interface, dynamic.Interface, error) {
	rc, err := clientcmd.RESTConfigFromKubeConfig(kubeconfig)
	if err != nil {
		return nil, nil, fmt.Errorf("parse kubeconfig: %w (check the kubeconfig credential)", err)
	}
	return kubeFromREST(rc)
}

func kubeFromREST(rc *rest.Config) (kubernetes.Interface, dynamic.Interface, error) {
	rc = rest.CopyConfig(rc)
	// The gate lists several resource kinds at once; the default 5 QPS would
	// serialise them behind client-side throttling.
	rc.QPS, rc.Burst = 50, 100
	kube, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, nil, fmt.Errorf("create Kubernetes client: %w", err)
	}
	dyn, err := dynamic.NewForConfig(rc)
	if err != nil {
		return nil, nil, fmt.Errorf("create Kubernetes dynamic client: %w", err)
	}
	return kube, dyn, nil
}
