package talosupgrade

import (
	"context"
	"errors"
	"fmt"

	"github.com/talosbot/talosbot/plugins/cluster/talos"
)

// landed proves that a node that came back running and ready landed the plan (issue 28 item
// 6): the target version, else Talos fell back to the old image; then the installer's
// schematic, the declared kernel arguments and the target's boot entry. Every difference is
// named in the error, which stops the roll (failNode puts it in chat and in the record).
func (x *run) landed(ctx context.Context, n nodeStep, o *outcome, res talos.TrackResult, plan talos.LandingPlan) error {
	to := x.roll.target.String()
	if res.Version != to {
		if res.Version != n.from.String() {
			return fmt.Errorf("%s came back on %s, neither %s nor %s", n.node.Name, res.Version, n.from, to)
		}
		o.fellBack = true
		fe := &talos.FallbackError{Node: n.node.Name, From: res.Version, To: to, Note: res.Note}
		if l, err := talos.ReadLanded(ctx, x.s, n.node); err == nil {
			fe.BootedEntry = l.BootedEntry
		}
		return fe
	}
	err := talos.CheckLanding(ctx, x.s, n.node, plan)
	if le := (*talos.LandingError)(nil); errors.As(err, &le) {
		o.landing = le.Differences
	}
	return err
}
