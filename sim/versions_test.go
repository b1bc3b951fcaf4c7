package sim_test

import (
	"context"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/api/common"
	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/client"
	"go.yaml.in/yaml/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/talosbot/talosbot/internal/testenv"
	"github.com/talosbot/talosbot/sim"
)

func installerFor(v string) string {
	return "factory.talos.dev/nocloud-installer/" + sim.DefaultSchematic + ":" + v
}

func TestReleaseCatalogue(t *testing.T) {
	t.Parallel()
	rs := sim.Releases()
	var names []string

	for _, r := range rs {
		names = append(names, r.Version)
	}

	for _, want := range []string{"v1.12.6", "v1.13.9", "v1.14.0", "v1.14.1"} {
		if !slices.Contains(names, want) {
			t.Errorf("the catalogue lacks %s: %v", want, names)
		}
	}

	if r, ok := sim.LookupRelease("1.14.1"); !ok || r.Etcd != "3.7.1" || r.Kubernetes != "1.37.0" || r.Date != "2026-09-15" {
		t.Errorf("v1.14.1: %+v %v", r, ok)
	}

	if r, ok := sim.LookupRelease("v1.13.9"); !ok || r.Etcd != "3.6.12" || r.Kubernetes != "1.36.3" {
		t.Errorf("v1.13.9: %+v %v", r, ok)
	}

	if r, _ := sim.LookupRelease("v1.13.9"); !r.GHCRInstaller {
		t.Error("v1.13.9 published ghcr.io/siderolabs/installer")
	}

	if r, _ := sim.LookupRelease("v1.14.0"); r.GHCRInstaller {
		t.Error("v1.14.0 did not publish ghcr.io/siderolabs/installer")
	}

	for _, fake := range []string{"v1.13.99", "v9.9.9", "v1.14.0-rc.1"} {
		if _, ok := sim.LookupRelease(fake); ok {
			t.Errorf("%s is no release but the catalogue knows it", fake)
		}
	}

	rs[0].Version = "changed"
	if sim.Releases()[0].Version == "changed" {
		t.Error("Releases hands out the catalogue itself: a caller changed it")
	}

	if sim.EtcdMetricsPort("v1.13.9") != 2379 || sim.EtcdMetricsPort("v1.14.1") != 2383 {
		t.Errorf("etcd metrics ports: %d %d", sim.EtcdMetricsPort("v1.13.9"), sim.EtcdMetricsPort("v1.14.1"))
	}
}

// lifecycleUpgrade pulls the installer and runs LifecycleService.Upgrade then Reboot, as
// talosctl v1.13+ does, and waits for the new version.
func lifecycleUpgrade(t *testing.T, cli *client.Client, ip, to string) {
	t.Helper()

	ctx := t.Context()
	nctx := client.WithNode(ctx, ip)

	pull, err := cli.ImageClient.Pull(nctx, &machine.ImageServicePullRequest{ImageRef: installerFor(to), Containerd: systemNS})
	if err != nil {
		t.Fatal(err)
	}

	for {
		if _, err := pull.Recv(); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("pull on %s: %v", ip, err)
		}
	}

	up, err := cli.LifecycleClient.Upgrade(nctx, &machine.LifecycleServiceUpgradeRequest{
		Source: &machine.InstallArtifactsSource{ImageName: installerFor(to)}, Containerd: systemNS,
	})
	if err != nil {
		t.Fatal(err)
	}

	for {
		if _, err := up.Recv(); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("lifecycle upgrade on %s: %v", ip, err)
		}
	}

	if err := cli.Reboot(nctx); err != nil {
		t.Fatal(err)
	}

	waitVersion(ctx, t, cli, ip, to)
}

func pullCode(t *testing.T, cli *client.Client, ip string) codes.Code {
	t.Helper()

	s, err := cli.ImageClient.Pull(client.WithNode(t.Context(), ip), &machine.ImageServicePullRequest{ImageRef: installerFor("v1.13.9"), Containerd: systemNS})
	if err == nil {
		for err == nil {
			_, err = s.Recv()
		}

		if errors.Is(err, io.EOF) {
			return codes.OK
		}
	}

	return status.Code(err)
}

func etcdVersion(t *testing.T, cli *client.Client, ip string) string {
	t.Helper()

	st, err := cli.EtcdStatus(client.WithNode(t.Context(), ip))
	if err != nil {
		t.Fatalf("etcd status of %s: %v", ip, err)
	}

	return st.Messages[0].GetMemberStatus().GetProtocolVersion()
}

func applyReboot(t *testing.T, cli *client.Client, ip string, cfg []byte) error {
	t.Helper()

	_, err := cli.ApplyConfiguration(client.WithNode(t.Context(), ip), &machine.ApplyConfigurationRequest{
		Data: cfg, Mode: machine.ApplyConfigurationRequest_REBOOT, //nolint:staticcheck // the mode v1.14 removed
	})

	return err
}

// TestMultiHopAcrossMixedVersions rolls a cluster v1.12.6 → v1.13.9 → v1.14.1 node by node and
// checks, at each mixed state, that every node answers by its own running version: the new
// upgrade API only from v1.13, apply-config's REBOOT mode refused only on v1.14, and etcd at
// the version of the release the node runs.
func TestMultiHopAcrossMixedVersions(t *testing.T) {
	t.Parallel()
	slow(t)
	c, cli := startSim(t, sim.Options{ControlPlanes: 1, Workers: 1, TalosVersion: "v1.12.6", RebootDelay: 100 * time.Millisecond})
	ctx := t.Context()
	cp, w := nodeIP(t, c, "cp-1"), nodeIP(t, c, "worker-1")
	cfg := machineConfig(ctx, t, cli, w)

	if got := pullCode(t, cli, w); got != codes.Unimplemented {
		t.Fatalf("ImageService.Pull on v1.12.6: %v, want Unimplemented", got)
	}

	if v := etcdVersion(t, cli, cp); v != "3.6.8" {
		t.Fatalf("etcd on v1.12.6 reports %s, want 3.6.8 (v1.12.6's DefaultEtcdVersion)", v)
	}

	// Hop 1 on the worker only (legacy API): v1.13.9 next to v1.12.6.
	if _, err := cli.Upgrade(client.WithNode(ctx, w), installerFor("v1.13.9"), false, false); err != nil {
		t.Fatal(err)
	}

	waitVersion(ctx, t, cli, w, "v1.13.9")

	if got := pullCode(t, cli, w); got != codes.OK {
		t.Fatalf("ImageService.Pull on the v1.13.9 worker: %v", got)
	}

	if got := pullCode(t, cli, cp); got != codes.Unimplemented {
		t.Fatalf("ImageService.Pull on the v1.12.6 control plane next to a v1.13 worker: %v", got)
	}

	// Hop 2 on the worker (new API): v1.14.1 next to v1.12.6.
	lifecycleUpgrade(t, cli, w, "v1.14.1")

	err := applyReboot(t, cli, w, cfg)
	if status.Code(err) != codes.Unimplemented || !strings.Contains(err.Error(), "the REBOOT mode is not supported, please use AUTO or NO_REBOOT modes instead") {
		t.Fatalf("apply-config --mode=reboot on v1.14.1: %v", err)
	}

	if err := applyReboot(t, cli, cp, machineConfig(ctx, t, cli, cp)); err != nil && strings.Contains(err.Error(), "REBOOT mode is not supported") {
		t.Fatalf("the v1.12.6 control plane refuses REBOOT as v1.14 does: %v", err)
	}

	// The control plane follows: both hops, its etcd moves to v1.14.1's 3.7.
	if _, err := cli.Upgrade(client.WithNode(ctx, cp), installerFor("v1.13.9"), false, false); err != nil {
		t.Fatal(err)
	}

	waitVersion(ctx, t, cli, cp, "v1.13.9")

	if v := etcdVersion(t, cli, cp); v != "3.6.12" {
		t.Fatalf("etcd on v1.13.9 reports %s, want 3.6.12", v)
	}

	lifecycleUpgrade(t, cli, cp, "v1.14.1")

	if v := etcdVersion(t, cli, cp); v != "3.7.1" {
		t.Fatalf("etcd on v1.14.1 reports %s, want 3.7.1", v)
	}
}

// kubeconfigOf fetches the Kubeconfig RPC's answer from a node.
func kubeconfigOf(t *testing.T, cli *client.Client, ip string) []byte {
	t.Helper()

	b, err := cli.Kubeconfig(client.WithNode(t.Context(), ip))
	if err != nil {
		t.Fatalf("kubeconfig from %s: %v", ip, err)
	}

	return b
}

// checkTalosShape checks the structure talosctl v1.14.1 accepts (pkg/kubeconfig/validate.go):
// one cluster with server and CA data, one user with only a client certificate and key, one
// current context with namespace default. It returns the client certificate.
func checkTalosShape(t *testing.T, b []byte, cluster string) (*x509.Certificate, []byte) {
	t.Helper()

	kc, err := clientcmd.Load(b)
	if err != nil {
		t.Fatalf("parse kubeconfig: %v\n%s", err, b)
	}

	user := "admin@" + cluster
	cl, u, kctx := kc.Clusters[cluster], kc.AuthInfos[user], kc.Contexts[user]

	if len(kc.Clusters) != 1 || len(kc.AuthInfos) != 1 || len(kc.Contexts) != 1 || cl == nil || u == nil || kctx == nil {
		t.Fatalf("want one cluster %q, one user and one context %q:\n%s", cluster, user, b)
	}

	if kc.CurrentContext != user || kctx.Cluster != cluster || kctx.AuthInfo != user || kctx.Namespace != "default" {
		t.Fatalf("context: %+v, current %q", kctx, kc.CurrentContext)
	}

	if !strings.HasPrefix(cl.Server, "https://") || len(cl.CertificateAuthorityData) == 0 || cl.InsecureSkipTLSVerify {
		t.Fatalf("cluster: %+v", cl)
	}

	if u.Token != "" || u.TokenFile != "" || u.Username != "" || u.Exec != nil || len(u.ClientKeyData) == 0 {
		t.Fatalf("user has more or less than a client certificate and key: %+v", u)
	}

	blk, _ := pem.Decode(u.ClientCertificateData)
	if blk == nil {
		t.Fatalf("client-certificate-data is not PEM:\n%s", b)
	}

	crt, err := x509.ParseCertificate(blk.Bytes)
	if err != nil {
		t.Fatal(err)
	}

	if !slices.Equal(crt.Subject.Organization, []string{"system:masters"}) {
		t.Fatalf("client certificate subject %v, want O=system:masters", crt.Subject)
	}

	return crt, cl.CertificateAuthorityData
}

// TestKubeconfigTalosShape: without a kube-apiserver the Kubeconfig RPC issues, on every call,
// a new admin certificate from the Kubernetes CA the machine config names as cluster.ca.
func TestKubeconfigTalosShape(t *testing.T) {
	t.Parallel()
	c, cli := startSim(t, sim.Options{Name: "shape", ControlPlanes: 1, Workers: 1, TalosVersion: "v1.14.1"})
	cp := nodeIP(t, c, "cp-1")

	crt1, caData := checkTalosShape(t, kubeconfigOf(t, cli, cp), "shape")
	crt2, _ := checkTalosShape(t, kubeconfigOf(t, cli, cp), "shape")

	if crt1.Subject.CommonName != "admin" {
		t.Errorf("client certificate CN %q, want admin (constants.KubernetesAdminCertCommonName)", crt1.Subject.CommonName)
	}

	if crt1.SerialNumber.Cmp(crt2.SerialNumber) == 0 {
		t.Error("two calls gave the same certificate: Talos issues one per call")
	}

	var mc struct {
		Cluster struct {
			CA struct {
				Crt string `yaml:"crt"`
			} `yaml:"ca"`
		} `yaml:"cluster"`
	}

	if err := yaml.Unmarshal(machineConfig(t.Context(), t, cli, cp), &mc); err != nil {
		t.Fatal(err)
	}

	clusterCA, err := base64.StdEncoding.DecodeString(mc.Cluster.CA.Crt)
	if err != nil || string(clusterCA) != string(caData) {
		t.Fatalf("certificate-authority-data is not the machine config's cluster.ca (%v)", err)
	}

	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(clusterCA)

	if _, err := crt1.Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Fatalf("the client certificate does not chain to cluster.ca: %v", err)
	}
}

// TestKubeconfigFromBackendAuthenticates: with a real kube-apiserver, the RPC's kubeconfig
// (Talos's shape, no bearer token) is accepted by the apiserver through client-go.
func TestKubeconfigFromBackendAuthenticates(t *testing.T) {
	t.Parallel()
	slow(t)
	kube := testenv.StartKube(t)
	c, cli := startSim(t, sim.Options{Name: "backend", ControlPlanes: 1, Kube: kube.Client, Kubeconfig: kube.Kubeconfig})

	b := kubeconfigOf(t, cli, nodeIP(t, c, "cp-1"))
	checkTalosShape(t, b, "backend")

	rc, err := clientcmd.RESTConfigFromKubeConfig(b)
	if err != nil {
		t.Fatal(err)
	}

	kc, err := kubernetes.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}

	if _, err := kc.CoreV1().Nodes().Get(t.Context(), "cp-1", metav1.GetOptions{}); err != nil {
		t.Fatalf("the apiserver refuses the RPC's kubeconfig: %v", err)
	}
}

// TestAPIPullOnV114IsOneAttempt: with the registry unreachable, a v1.14 node's API pulls
// (ImageService.Pull, MachineService.ImagePull) fail at once with the attempt's error, where a
// v1.13 node's keep retrying until the caller gives up (TestRegistryUnreachablePullRetries).
func TestAPIPullOnV114IsOneAttempt(t *testing.T) {
	t.Parallel()
	c, cli := startSim(t, sim.Options{ControlPlanes: 1, Workers: 1, TalosVersion: "v1.14.1"})
	ctx := t.Context()

	if err := c.Inject(ctx, "worker-1", sim.Fault{RegistryUnreachable: true}); err != nil {
		t.Fatal(err)
	}

	// Far shorter than the 20 minutes v1.13 retries for, longer than one attempt takes.
	short, cancel := context.WithTimeout(client.WithNode(ctx, nodeIP(t, c, "worker-1")), 10*time.Second)
	defer cancel()

	ref := installerFor("v1.14.1")
	want := "failed to pull image \"" + ref + "\": failed to resolve reference"

	err := pull(short, cli, ref)
	if status.Code(err) != codes.Unknown || !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), "\ttimeout") {
		t.Fatalf("ImageService.Pull on v1.14.1 with the registry unreachable: %v, want one attempt's error %q", err, want)
	}

	_, err = cli.MachineClient.ImagePull(short, &machine.ImagePullRequest{Namespace: common.ContainerdNamespace_NS_SYSTEM, Reference: ref})
	if status.Code(err) != codes.Unknown || !strings.Contains(err.Error(), want) {
		t.Fatalf("MachineService.ImagePull on v1.14.1 with the registry unreachable: %v", err)
	}
}
