package preflight

import (
	"reflect"
	"strings"
	"testing"
)

// apiserverArgs is a kube-apiserver command line as Talos renders it, plus extra.
func apiserverArgs(extra ...string) []string {
	return append([]string{"/usr/local/bin/kube-apiserver", "--etcd-servers=https://127.0.0.1:2379",
		"--enable-admission-plugins=NodeRestriction", "--feature-gates=StrictIPCIDRValidation=true"}, extra...)
}

func TestCheck(t *testing.T) {
	workloads := Resource{Group: "scheduling.k8s.io", Version: "v1alpha1", Resource: "workloads"}

	tests := []struct {
		name string
		in   Input
		want []Finding
	}{
		{
			name: "kube-apiserver flag removed in 1.33",
			in: Input{From: "v1.32.9", To: "v1.33.5", Nodes: []Node{
				{Name: "cp-1", Args: map[Component][]string{APIServer: apiserverArgs("--cloud-config=/etc/cloud.conf")}},
				{Name: "cp-2", Args: map[Component][]string{APIServer: apiserverArgs()}},
			}},
			want: []Finding{{Kind: KindFlag, Node: "cp-1", Component: APIServer, Name: "cloud-config", RemovedIn: "1.33", Where: "--cloud-config"}},
		},
		{
			name: "a flag given without a value is used too",
			in: Input{From: "1.32.0", To: "1.33.0", Nodes: []Node{
				{Name: "cp-1", Args: map[Component][]string{APIServer: apiserverArgs("--cloud-config", "/etc/cloud.conf")}},
			}},
			want: []Finding{{Kind: KindFlag, Node: "cp-1", Component: APIServer, Name: "cloud-config", RemovedIn: "1.33", Where: "--cloud-config"}},
		},
		{
			name: "flags that only share a prefix, and flags removed from another component, are not findings",
			in: Input{From: "1.32.0", To: "1.33.0", Nodes: []Node{
				{Name: "cp-1", Args: map[Component][]string{
					APIServer:         apiserverArgs("--cloud-config-file=/x", "--cloud-provider=external", "-cloud-config"),
					ControllerManager: {"kube-controller-manager", "--cloud-config=/etc/cloud.conf"},
					Kubelet:           {"--cloud-config=/etc/cloud.conf"}, // removed from the kubelet only in 1.34
				}},
			}},
		},
		{
			name: "feature gate removed in 1.36 in a kube-apiserver's --feature-gates",
			in: Input{From: "v1.35.2", To: "v1.36.3", Nodes: []Node{
				{Name: "cp-1", Args: map[Component][]string{APIServer: apiserverArgs()}},
				{Name: "cp-2", Args: map[Component][]string{
					APIServer: apiserverArgs("--feature-gates=Foo=true, WatchFromStorageWithoutResourceVersion=false"),
					Scheduler: {"kube-scheduler", "--feature-gates=HonorPVReclaimPolicy=true"},
				}},
			}},
			want: []Finding{
				{Kind: KindFeatureGate, Node: "cp-2", Component: APIServer, Name: "WatchFromStorageWithoutResourceVersion", RemovedIn: "1.36", Where: "--feature-gates"},
				{Kind: KindFeatureGate, Node: "cp-2", Component: Scheduler, Name: "HonorPVReclaimPolicy", RemovedIn: "1.36", Where: "--feature-gates"},
			},
		},
		{
			name: "kubelet flag removed in 1.35 and a gate in the kubelet configuration",
			in: Input{From: "v1.34.1", To: "v1.35.2", Nodes: []Node{
				{Name: "worker-1", Args: map[Component][]string{Kubelet: {"--config=/etc/kubernetes/kubelet.yaml", "--pod-infra-container-image=registry.k8s.io/pause:3.10"}},
					KubeletConfig: map[string]any{"featureGates": map[string]any{"SizeMemoryBackedVolumes": true, "Other": false}}},
			}},
			want: []Finding{
				{Kind: KindFlag, Node: "worker-1", Component: Kubelet, Name: "pod-infra-container-image", RemovedIn: "1.35", Where: "--pod-infra-container-image"},
				{Kind: KindFeatureGate, Node: "worker-1", Component: Kubelet, Name: "SizeMemoryBackedVolumes", RemovedIn: "1.35", Where: "featureGates (machine.kubelet.extraConfig)"},
			},
		},
		{
			name: "admission plugin removed in 1.30, enabled on one node and disabled on another",
			in: Input{From: "1.29.4", To: "1.30.0", Nodes: []Node{
				{Name: "cp-1", Args: map[Component][]string{APIServer: {"kube-apiserver", "--enable-admission-plugins=NodeRestriction,SecurityContextDeny"}}},
				{Name: "cp-2", Args: map[Component][]string{APIServer: {"kube-apiserver", "--disable-admission-plugins=SecurityContextDeny"}}},
				{Name: "cp-3", Args: map[Component][]string{APIServer: {"kube-apiserver", "--enable-admission-plugins=SecurityContextDenyX"}}},
			}},
			want: []Finding{
				{Kind: KindAdmissionPlugin, Node: "cp-1", Component: APIServer, Name: "SecurityContextDeny", RemovedIn: "1.30", Where: "--enable-admission-plugins"},
				{Kind: KindAdmissionPlugin, Node: "cp-2", Component: APIServer, Name: "SecurityContextDeny", RemovedIn: "1.30", Where: "--disable-admission-plugins"},
			},
		},
		{
			name: "API resources still in use; a count of 0 and resources of other minors are not findings",
			in: Input{From: "1.35.0", To: "1.36.0", Resources: []InUse{
				{Resource: workloads, Count: 3},
				{Resource: Resource{Group: "policy", Version: "v1beta1", Resource: "podsecuritypolicies"}, Count: 2},
			}},
			want: []Finding{{Kind: KindAPIResource, Name: "workloads.v1alpha1.scheduling.k8s.io", Count: 3, RemovedIn: "1.36"}},
		},
		{
			name: "a patch upgrade crosses no minor",
			in: Input{From: "v1.36.2", To: "v1.36.3", Nodes: []Node{
				{Name: "cp-1", Args: map[Component][]string{APIServer: apiserverArgs("--feature-gates=HonorPVReclaimPolicy=true")}},
			}, Resources: []InUse{{Resource: workloads, Count: 1}}},
		},
		{
			name: "a cluster that lags two minors is checked for both",
			in: Input{From: "v1.34.6", To: "v1.36.3", Nodes: []Node{
				{Name: "w", Args: map[Component][]string{Kubelet: {"--pod-infra-container-image=x", "--feature-gates=HonorPVReclaimPolicy=true"}}},
			}},
			want: []Finding{
				{Kind: KindFlag, Node: "w", Component: Kubelet, Name: "pod-infra-container-image", RemovedIn: "1.35", Where: "--pod-infra-container-image"},
				{Kind: KindFeatureGate, Node: "w", Component: Kubelet, Name: "HonorPVReclaimPolicy", RemovedIn: "1.36", Where: "--feature-gates"},
			},
		},
		{
			name: "findings follow node order, then component order",
			in: Input{From: "1.32.0", To: "1.33.0", Nodes: []Node{
				{Name: "cp-b", Args: map[Component][]string{
					Kubelet:   {"--feature-gates=AppArmor=true"},
					APIServer: {"--cloud-config=x", "--feature-gates=CPUManager=true"},
				}},
				{Name: "cp-a", Args: map[Component][]string{ControllerManager: {"--feature-gates=AppArmor=false"}}},
			}},
			want: []Finding{
				{Kind: KindFlag, Node: "cp-b", Component: APIServer, Name: "cloud-config", RemovedIn: "1.33", Where: "--cloud-config"},
				{Kind: KindFeatureGate, Node: "cp-b", Component: APIServer, Name: "CPUManager", RemovedIn: "1.33", Where: "--feature-gates"},
				{Kind: KindFeatureGate, Node: "cp-b", Component: Kubelet, Name: "AppArmor", RemovedIn: "1.33", Where: "--feature-gates"},
				{Kind: KindFeatureGate, Node: "cp-a", Component: ControllerManager, Name: "AppArmor", RemovedIn: "1.33", Where: "--feature-gates"},
			},
		},
	}

	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Check(tt.in)
			if err != nil {
				t.Fatal(err)
			}

			if len(got) == 0 && len(tt.want) == 0 {
				return
			}

			if !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("findings:\n got %+v\nwant %+v", got, tt.want)
			}
		})
	}
}

func TestFindingText(t *testing.T) {
	f := Finding{Kind: KindFlag, Node: "cp-1 (10.5.0.2)", Component: APIServer, Name: "cloud-config", RemovedIn: "1.33"}
	if got, want := f.String(), "kube-apiserver on cp-1 (10.5.0.2) uses flag --cloud-config, removed in Kubernetes 1.33"; got != want {
		t.Fatalf("String() = %q, want %q", got, want)
	}

	if got := f.Fix(); !strings.Contains(got, "cluster.apiServer.extraArgs") {
		t.Fatalf("Fix() = %q", got)
	}

	g := Finding{Kind: KindFeatureGate, Node: "w", Component: Kubelet, Name: "X", RemovedIn: "1.35", Where: "--feature-gates"}
	if got := g.Fix(); !strings.Contains(got, "machine.kubelet") {
		t.Fatalf("kubelet Fix() = %q", got)
	}

	r := Finding{Kind: KindAPIResource, Name: "workloads.v1alpha1.scheduling.k8s.io", Count: 2, RemovedIn: "1.36"}
	if got := r.String(); !strings.Contains(got, "2 object(s) of workloads.v1alpha1.scheduling.k8s.io") || !strings.Contains(got, "1.36") {
		t.Fatalf("String() = %q", got)
	}
}

func TestCheckRefusesWhatItCannotCheck(t *testing.T) {
	for _, in := range []Input{
		{From: "v1.36.3", To: "v1.37.0"}, // beyond the data: an error, never a silent pass
		{From: "1.23.0", To: "1.24.0"},   // before it
		{From: "v2.0.0", To: "v2.1.0"},
		{From: "v1.35.2", To: "latest"},
		{From: "", To: "1.36.0"},
	} {
		if _, err := Check(in); err == nil {
			t.Errorf("Check(%s → %s) passed", in.From, in.To)
		}

		if _, err := ResourcesToCount(in.From, in.To); err == nil {
			t.Errorf("ResourcesToCount(%s → %s) passed", in.From, in.To)
		}
	}

	_, err := Check(Input{From: "v1.36.3", To: "v1.37.0"})
	if err == nil || !strings.Contains(err.Error(), "1.37") {
		t.Fatalf("error %v does not name the minor", err)
	}
}

func TestResourcesToCount(t *testing.T) {
	got, err := ResourcesToCount("v1.35.2", "v1.36.3")
	if err != nil {
		t.Fatal(err)
	}

	if want := []Resource{{Group: "scheduling.k8s.io", Version: "v1alpha1", Resource: "workloads"}}; !reflect.DeepEqual(got, want) {
		t.Fatalf("1.35 → 1.36: %v, want %v", got, want)
	}

	if got, _ := ResourcesToCount("v1.36.0", "v1.36.3"); len(got) != 0 {
		t.Fatalf("a patch counts %v", got)
	}

	got, _ = ResourcesToCount("v1.24.0", "v1.25.0")
	if len(got) != 1 || got[0].String() != "podsecuritypolicies.v1beta1.policy" {
		t.Fatalf("1.24 → 1.25: %v", got)
	}
}

// TestTableIsFresh: a caller that extends the table (as the plugin's tests do) changes no one
// else's.
func TestTableIsFresh(t *testing.T) {
	a := Kubernetes()
	a[len(a)-1].Flags = map[Component][]string{APIServer: {"injected"}}

	got, err := a.Check(Input{From: "1.35.0", To: "1.36.0", Nodes: []Node{{Name: "cp", Args: map[Component][]string{APIServer: {"--injected=1"}}}}})
	if err != nil || len(got) != 1 || got[0].Name != "injected" {
		t.Fatalf("extended table: %v, %v", got, err)
	}

	if got, _ := Check(Input{From: "1.35.0", To: "1.36.0", Nodes: []Node{{Name: "cp", Args: map[Component][]string{APIServer: {"--injected=1"}}}}}); len(got) != 0 {
		t.Fatalf("the default table changed: %v", got)
	}
}

// TestTableCoversEveryMinor: the data has one entry per minor of its range and no duplicates.
func TestTableCoversEveryMinor(t *testing.T) {
	seen := map[int]bool{}

	for _, r := range Kubernetes() {
		if seen[r.Minor] || r.Minor < FirstMinor || r.Minor > LastMinor || len(r.Sources) == 0 {
			t.Fatalf("release 1.%d: duplicate, out of range or without a source", r.Minor)
		}

		seen[r.Minor] = true
	}

	for m := FirstMinor; m <= LastMinor; m++ {
		if !seen[m] {
			t.Fatalf("no entry for 1.%d", m)
		}
	}
}
