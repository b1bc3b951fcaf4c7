package engine

import (
	"testing"

	"google.golang.org/protobuf/encoding/protojson"

	lifecyclev1 "github.com/talosbot/talosbot/plugins/sdk/proto/lifecycle/v1"
	"github.com/talosbot/talosbot/state"
)

// A node's version in the ending follows its version steps hop by hop (soak seed 32: a
// multi-hop roll whose gate after failed was worded at the first hop's target while the
// node ran the second's).
func TestNodeEndFollowsEveryHop(t *testing.T) {
	steps := []*lifecyclev1.Step{
		{Id: "v1.13.9/node/w1/upgrade", Node: "w1", FromVersion: "v1.12.6", ToVersion: "v1.13.9"},
		{Id: "node/w1/upgrade", Node: "w1", FromVersion: "v1.13.9", ToVersion: "v1.14.1"},
		{Id: "node/w1/gate-after", Node: "w1"},
	}
	for _, tc := range []struct {
		name   string
		status map[string]string
		want   string
		state  string
	}{
		{"both hops done, gate after failed", map[string]string{"v1.13.9/node/w1/upgrade": "ok", "node/w1/upgrade": "ok", "node/w1/gate-after": "failed"}, "v1.14.1", "failed"},
		{"first hop done, second pending", map[string]string{"v1.13.9/node/w1/upgrade": "ok"}, "v1.13.9", "partly done"},
		{"nothing started", nil, "v1.12.6", "not started"},
		{"second hop failed: unknown", map[string]string{"v1.13.9/node/w1/upgrade": "ok", "node/w1/upgrade": "failed"}, "", "failed"},
		{"already there", map[string]string{"v1.13.9/node/w1/upgrade": "skipped", "node/w1/upgrade": "skipped", "node/w1/gate-after": "skipped"}, "v1.14.1", "already there"},
	} {
		st := map[string]state.Step{}
		for id, s := range tc.status {
			st[id] = state.Step{ID: id, Status: s}
		}
		ne := nodeEnd("w1", steps, st)
		if ne.Version != tc.want || ne.State != tc.state {
			t.Errorf("%s: %q %q, want %q %q", tc.name, ne.Version, ne.State, tc.want, tc.state)
		}
	}
}

// TestEndingOfAResumeKeepsWhatEarlierAttemptsDid: soak seed 1123. Attempt 1 upgraded worker-1
// and was killed with cp-2's upgrade in flight; the resume could not plan again, ran the approved
// plan (v1.12.6 → v1.13.9 on every node) and stopped at cp-2 before any other step. The ending
// must say worker-1 is done at v1.13.9 (attempt 1 did it), not "not started, at v1.12.6".
func TestEndingOfAResumeKeepsWhatEarlierAttemptsDid(t *testing.T) {
	plan := planJSON(t, &lifecyclev1.OperationPlan{Steps: []*lifecyclev1.Step{
		{Id: "snapshot"},
		{Id: "node/worker-1/upgrade", Node: "worker-1", FromVersion: "v1.12.6", ToVersion: "v1.13.9"},
		{Id: "node/worker-1/gate", Node: "worker-1"},
		{Id: "node/cp-2/upgrade", Node: "cp-2", FromVersion: "v1.12.6", ToVersion: "v1.13.9"},
		{Id: "node/cp-3/upgrade", Node: "cp-3", FromVersion: "v1.12.6", ToVersion: "v1.13.9"},
	}})
	op := &state.Operation{Plan: plan,
		History: []state.Attempt{{N: 1, End: "interrupted", Steps: []state.Step{
			{ID: "snapshot", Status: "ok"},
			{ID: "node/worker-1/upgrade", Status: "ok"},
			{ID: "node/worker-1/gate", Status: "ok"},
			{ID: "node/cp-2/upgrade", Status: StepStopped},
			{ID: "node/cp-3/upgrade", Status: "pending"},
		}}},
		Steps: []state.Step{
			{ID: "snapshot", Status: "pending"},
			{ID: "node/worker-1/upgrade", Status: "pending"},
			{ID: "node/worker-1/gate", Status: "pending"},
			{ID: "node/cp-2/upgrade", Status: "failed", Detail: "in flight, runs v1.12.6"},
			{ID: "node/cp-3/upgrade", Status: "pending"},
		},
	}
	got := map[string]NodeEnd{}
	for _, n := range EndingOf(op).Nodes {
		got[n.Node] = n
	}
	for node, want := range map[string][2]string{
		"worker-1": {"done", "v1.13.9"},
		"cp-2":     {"failed", ""},
		"cp-3":     {"not started", "v1.12.6"},
	} {
		if got[node].State != want[0] || got[node].Version != want[1] {
			t.Errorf("%s: %q at %q, want %q at %q", node, got[node].State, got[node].Version, want[0], want[1])
		}
	}
}

// TestNodeEndKubernetesPartsAtDifferentVersions: soak seed 1113. A Kubernetes upgrade was
// killed after every control plane's static pods reached v1.36.3 and before any kubelet; the
// resumed plan lists each static pod "v1.36.3 → v1.36.3" and the kubelet "v1.35.2 → v1.36.3",
// and the resume failed before any step. The node is partly done, its kubelet still at
// v1.35.2; it was worded "not started, at v1.36.3" (the first part's version).
func TestNodeEndKubernetesPartsAtDifferentVersions(t *testing.T) {
	steps := []*lifecyclev1.Step{
		{Id: "static-pod/kube-apiserver/cp-1", Node: "cp-1", FromVersion: "v1.36.3", ToVersion: "v1.36.3"},
		{Id: "static-pod/kube-scheduler/cp-1", Node: "cp-1", FromVersion: "v1.36.3", ToVersion: "v1.36.3"},
		{Id: "kubelet/cp-1", Node: "cp-1", FromVersion: "v1.35.2", ToVersion: "v1.36.3"},
	}
	if ne := nodeEnd("cp-1", steps, nil); ne.State != "partly done" || ne.Version != "v1.35.2" {
		t.Errorf("cp-1: %q at %q, want partly done at v1.35.2", ne.State, ne.Version)
	}
	// Every part already there: nothing to change, whatever this attempt reached.
	if ne := nodeEnd("cp-1", steps[:2], nil); ne.State != "already there" || ne.Version != "v1.36.3" {
		t.Errorf("cp-1 with its kubelet there too: %q at %q, want already there at v1.36.3", ne.State, ne.Version)
	}
}

func planJSON(t *testing.T, p *lifecyclev1.OperationPlan) []byte {
	t.Helper()
	raw, err := protojson.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	return raw
}
