package gates_test

import (
	"context"
	"regexp"
	"strings"
	"testing"
	"time"

	machineapi "github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/client"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/talosbot/talosbot/internal/testenv"
	"github.com/talosbot/talosbot/plugins/cluster"
	"github.com/talosbot/talosbot/plugins/gates"
	"github.com/talosbot/talosbot/plugins/sdk"
	"github.com/talosbot/talosbot/plugins/sdk/sdktest"
	"github.com/talosbot/talosbot/sim"
)

func request(c *sim.Cluster, kubeconfig []byte, section []byte) *sdk.OperationRequest {
	pc := &sdk.Cluster{Name: "production", Environment: "production"}
	for _, n := range c.Nodes() {
		pc.Nodes = append(pc.Nodes, &sdk.Node{Name: n.Name, Address: n.IP, Role: n.Role, Host: n.Host})
	}
	return &sdk.OperationRequest{OperationID: "op-1", Command: gates.Command, Cluster: *pc,
		Credentials: sdk.Credentials{Talosconfig: c.Talosconfig(), Kubeconfig: kubeconfig},
		Config:      section}
}

func lines(t *testing.T, ctx context.Context, req *sdk.OperationRequest) (*sdk.Result, map[string]string) {
	t.Helper()
	rec, err := sdktest.Run(ctx, gates.New(), req, nil)
	if err != nil {
		t.Fatal(err)
	}
	res := rec.FinalResult()
	by := map[string]string{}
	for _, s := range rec.Steps() {
		if s.Status != sdk.StepRunning {
			by[s.StepID] = s.Status.String() + " " + s.Detail
		}
	}
	return res, by
}

func expect(t *testing.T, by map[string]string, id, status, detail string) {
	t.Helper()
	got := by[id]
	if !strings.HasPrefix(got, "STEP_STATUS_"+status) || !strings.Contains(got, detail) {
		t.Errorf("gate %s = %q, want %s containing %q", id, got, status, detail)
	}
}

const longhornDoc = `---
apiVersion: v1alpha1
kind: UserVolumeConfig
name: longhorn
provisioning:
  diskSelector:
    match: "!system_disk"
  minSize: 100GiB
`

func TestGatesAgainstSimAndKube(t *testing.T) {
	kube := testenv.StartKube(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	c, err := sim.Start(ctx, sim.Options{ControlPlanes: 3, Workers: 1, Hosts: 2, Kube: kube.Client})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	req := request(c, kube.Kubeconfig, nil)
	inv, err := cluster.InventoryFrom(&req.Cluster)
	if err != nil {
		t.Fatal(err)
	}
	cp1, _ := inv.Node("cp-1")

	plan, err := gates.New().Plan(ctx, req)
	if err != nil || len(plan.Steps) != 9 {
		t.Fatalf("plan = %v, %v", plan, err)
	}

	// The sim as started: three control planes on two hosts, endpoint = cp-1.
	res, by := lines(t, ctx, req)
	if res.OK {
		t.Fatalf("a fresh sim is not production-ready: %v", res.Lines)
	}
	expect(t, by, "control-planes", "FAILED", "3 control planes on only 2 Proxmox host(s)")
	expect(t, by, "endpoint-vip", "FAILED", "is not a Talos VIP on cp-1, cp-2, cp-3")
	expect(t, by, "talosconfig-endpoints", "OK", "lists all 3 control-plane addresses")
	expect(t, by, "host-labels", "OK", "all 4 nodes carry topology.kubernetes.io/zone")
	expect(t, by, "longhorn-volume", "FAILED", `no UserVolumeConfig "longhorn" on cp-1, cp-2, cp-3, worker-1`)
	expect(t, by, "longhorn-namespace", "FAILED", "namespace longhorn-system does not exist")
	expect(t, by, "flux-path", "FAILED", "no Kustomization flux-system/flux-system")
	expect(t, by, "backups", "SKIPPED", "manual: confirm every backup")
	expect(t, by, "staging-drills", "SKIPPED", "manual: the bot was not given the staging audit summary")
	if res.Summary != "production production readiness: 2 pass, 5 fail, 2 manual" {
		t.Fatalf("summary = %q", res.Summary)
	}

	// Make it ready: a VIP endpoint and a Longhorn volume in every machine
	// config, the namespace label, a production Flux path, the drills.
	vip := cp1.Address[:strings.LastIndex(cp1.Address, ".")] + ".100"
	tc, err := cluster.NewTalosClient(ctx, c.Talosconfig(), cluster.Addresses(inv.ControlPlanes()))
	if err != nil {
		t.Fatal(err)
	}
	defer tc.Close()
	endpointRE := regexp.MustCompile(`endpoint: https://[0-9.]+:6443`)
	apply := func(endpoint string, withVIP bool) {
		for _, n := range inv.Nodes {
			nctx := client.WithNode(ctx, n.Address)
			mc, err := cluster.MachineConfigOf(ctx, tc.COSI, n.Address)
			if err != nil {
				t.Fatal(err)
			}
			cfg, err := mc.Bytes()
			if err != nil {
				t.Fatal(err)
			}
			doc := endpointRE.ReplaceAllString(string(cfg), "endpoint: https://"+endpoint+":6443")
			if !strings.Contains(doc, "kind: UserVolumeConfig") {
				doc += longhornDoc
			}
			if withVIP && n.IsControlPlane() {
				doc += "---\napiVersion: v1alpha1\nkind: Layer2VIPConfig\nname: " + vip + "\nlink: eth0\n"
			}
			if _, err := tc.ApplyConfiguration(nctx, &machineapi.ApplyConfigurationRequest{Data: []byte(doc), Mode: machineapi.ApplyConfigurationRequest_NO_REBOOT}); err != nil {
				t.Fatalf("apply config to %s: %v", n.Name, err)
			}
		}
	}
	// The endpoint is a node's own address: refused with the reason.
	apply(cp1.Address, false)
	_, by = lines(t, ctx, req)
	expect(t, by, "endpoint-vip", "FAILED", "the Kubernetes endpoint "+cp1.Address+" is cp-1's own address")
	apply(vip, true)
	// Spread the control planes over three hosts (the label Terraform sets).
	cp3, err := kube.Client.CoreV1().Nodes().Get(ctx, "cp-3", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cp3.Labels["topology.kubernetes.io/zone"] = "pve3"
	if _, err := kube.Client.CoreV1().Nodes().Update(ctx, cp3, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	req.Cluster.Nodes[2].Host = "pve3"
	if _, err := kube.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "longhorn-system",
		Labels: map[string]string{"pod-security.kubernetes.io/enforce": "privileged"}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	ks := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "kustomize.toolkit.fluxcd.io/v1", "kind": "Kustomization",
		"metadata": map[string]any{"name": "flux-system", "namespace": "flux-system"},
		"spec":     map[string]any{"path": "./clusters/production", "interval": "10m", "prune": true},
	}}
	if _, err := kube.Dynamic.Resource(testenv.KustomizationGVR).Namespace("flux-system").Create(ctx, ks, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	ended := func(s string) int64 {
		ts, err := time.Parse(time.RFC3339, s)
		if err != nil {
			t.Fatal(err)
		}
		return ts.Unix()
	}
	req.Evidence.StagingDrills = &sdk.StagingDrills{Drills: []*sdk.DrillEvidence{
		{Drill: sdk.DrillTalosUpgrade, OperationID: "op-11", EndedUnix: ended("2026-05-01T20:00:00Z")},
		{Drill: sdk.DrillKubernetesUpgrade, OperationID: "op-12", EndedUnix: ended("2026-05-02T20:00:00Z")},
		{Drill: sdk.DrillNodeReplacement, OperationID: "op-13", EndedUnix: ended("2026-05-03T20:00:00Z")},
	}}
	res, by = lines(t, ctx, req)
	expect(t, by, "control-planes", "OK", "3 control planes on 3 hosts")
	expect(t, by, "endpoint-vip", "OK", vip+" is a Talos VIP on all 3 control planes")
	expect(t, by, "host-labels", "OK", "all 4 nodes")
	expect(t, by, "longhorn-volume", "OK", `UserVolumeConfig "longhorn" on all 4 nodes`)
	expect(t, by, "longhorn-namespace", "OK", "privileged")
	expect(t, by, "flux-path", "OK", "Flux reconciles ./clusters/production")
	expect(t, by, "staging-drills", "FAILED", "no succeeded staging etcd restore in the audit trail")
	if res.OK {
		t.Fatal("a missing drill must fail the gates")
	}

	req.Evidence.StagingDrills.Drills = append(req.Evidence.StagingDrills.Drills,
		&sdk.DrillEvidence{Drill: sdk.DrillEtcdRestore, OperationID: "op-14", EndedUnix: ended("2026-05-04T20:00:00Z")})
	res, by = lines(t, ctx, req)
	expect(t, by, "staging-drills", "OK", "etcd restore op-14")
	if !res.OK || res.Summary != "production production readiness: 8 pass, 0 fail, 1 manual" {
		t.Fatalf("ready cluster: %s\n%s", res.Summary, strings.Join(res.Lines, "\n"))
	}

	// Without a kubeconfig the Kubernetes gates fail, saying why.
	req.Credentials.Kubeconfig = nil
	_, by = lines(t, ctx, req)
	expect(t, by, "control-planes", "FAILED", "no Kubernetes API")
}
