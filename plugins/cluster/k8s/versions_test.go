package k8s

import (
	"strings"
	"testing"
)

func TestParseK8sVersionNormalises(t *testing.T) {
	for in, want := range map[string]string{"1.36.3": "v1.36.3", "v1.36.3": "v1.36.3", " v1.36.0-rc.1 ": "v1.36.0-rc.1"} {
		got, _, err := ParseVersion(in)
		if err != nil || got != want {
			t.Errorf("ParseVersion(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "1.36", "latest", "vv1.36.3"} {
		if _, _, err := ParseVersion(bad); err == nil || !strings.Contains(err.Error(), "e.g. v1.36.3") {
			t.Errorf("ParseVersion(%q) = %v, want an error with an example", bad, err)
		}
	}
}

func versions(t *testing.T, kv ...string) *Versions {
	t.Helper()
	v := &Versions{}
	for i := 0; i < len(kv); i += 2 {
		if err := v.add(kv[i], "", kv[i+1]); err != nil {
			t.Fatal(err)
		}
	}
	return v
}

// TestK8sPathRefusal is rules R20 (one minor at a time) and R21 (no downgrade).
func TestK8sPathRefusal(t *testing.T) {
	cluster := versions(t, "apiserver (discovery /version)", "v1.35.2", "kubelet on cp-1", "v1.35.2", "kubelet on worker-1", "1.35.2")
	cases := []struct {
		target, rule, want string
	}{
		{"v1.35.2", "", ""},
		{"v1.35.9", "", ""},
		{"v1.36.3", "", ""},
		{"v1.37.0", "R20", "skips a minor"},
		{"v2.0.0", "R20", "major"},
		{"v1.35.1", "R21", "downgrade is not a rollback"},
		{"v1.34.9", "R21", "v1.35.2 on apiserver (discovery /version), kubelet on cp-1, kubelet on worker-1"},
	}
	for _, c := range cases {
		rule, reason, fix := PathRefusal(cluster, c.target)
		if rule != c.rule || !strings.Contains(reason, c.want) || (rule != "" && fix == "") {
			t.Errorf("%s: rule %q reason %q fix %q; want rule %q containing %q", c.target, rule, reason, fix, c.rule, c.want)
		}
	}
	// A half-done upgrade (cp-1 already at the target) resumes; the lowest decides the step.
	partial := versions(t, "kube-apiserver on cp-1", "v1.36.3", "kube-apiserver on cp-2", "v1.35.2")
	if rule, reason, _ := PathRefusal(partial, "v1.36.3"); rule != "" {
		t.Fatalf("resume refused: %s %s", rule, reason)
	}
	if rule, _, _ := PathRefusal(partial, "v1.36.2"); rule != "R21" {
		t.Fatalf("target below a half-upgraded component: rule %q, want R21", rule)
	}
	if rule, reason, _ := PathRefusal(partial, "v1.37.0"); rule != "R20" || !strings.Contains(reason, "kube-apiserver on cp-2") {
		t.Fatalf("skip from the lowest: %s %s", rule, reason)
	}
}

func TestRetagAndImages(t *testing.T) {
	for in, want := range map[string]string{
		"registry.k8s.io/kube-apiserver:v1.35.2":              "registry.k8s.io/kube-apiserver:v1.36.3",
		"localhost:5000/kube-apiserver":                       "localhost:5000/kube-apiserver:v1.36.3",
		"ghcr.io/siderolabs/kubelet:v1.35.2@sha256:abcdef012": "ghcr.io/siderolabs/kubelet:v1.36.3",
	} {
		if got := Retag(in, "v1.36.3"); got != want {
			t.Errorf("Retag(%q) = %q, want %q", in, got, want)
		}
	}
	imgs := Images{APIServer: "a:v1.36.3", ControllerManager: "c:v1.36.3", Scheduler: "s:1.36.3", Proxy: "p:v1.35.2", Kubelet: "k:v1.35.2"}
	if !imgs.AtVersion(ControlPlaneImages, "v1.36.3") || imgs.AtVersion(ControlPlaneImages|ProxyImage, "v1.36.3") || imgs.AtVersion(KubeletImage, "v1.36.3") {
		t.Fatalf("AtVersion wrong for %+v", imgs)
	}
}

// TestVersionsAfter: a later hop of a multi-hop upgrade is planned from the versions the
// hop before it leaves: everything below its target at it, anything above kept.
func TestVersionsAfter(t *testing.T) {
	v := versions(t, "apiserver (discovery /version)", "v1.36.3", "kubelet on cp-1", "v1.34.1", "kubelet on worker-1", "v1.35.4")
	v.Kubelets = map[string]string{"cp-1": "v1.34.1", "worker-1": "v1.35.4"}
	after, err := v.After("v1.35.2")
	if err != nil {
		t.Fatal(err)
	}
	if lo, hi := after.Lowest().Version, after.Highest().Version; lo != "v1.35.2" || hi != "v1.36.3" {
		t.Fatalf("after v1.35.2: lowest %s highest %s", lo, hi)
	}
	if after.Kubelets["cp-1"] != "v1.35.2" || after.Kubelets["worker-1"] != "v1.35.4" || v.Kubelets["cp-1"] != "v1.34.1" {
		t.Fatalf("kubelets %v (the original %v must not change)", after.Kubelets, v.Kubelets)
	}
	// A hop's own target may be below the apiserver answering discovery: only the
	// downgrade check against the final target and the minor check against the hop apply.
	if rule, _, _ := DowngradeRefusal(v, "v1.36.3"); rule != "" {
		t.Fatalf("final target refused: %s", rule)
	}
	if rule, _, _ := MinorRefusal(v, "v1.35.2"); rule != "" {
		t.Fatalf("hop refused: %s", rule)
	}
	if rule, _, _ := MinorRefusal(v, "v1.36.3"); rule != "R20" {
		t.Fatalf("two minors from v1.34.1: rule %q, want R20", rule)
	}
}
