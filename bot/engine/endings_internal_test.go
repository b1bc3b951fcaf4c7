package engine

import (
	"testing"

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
