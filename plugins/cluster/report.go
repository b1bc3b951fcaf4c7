package cluster

import "github.com/talosbot/talosbot/plugins/sdk"

// ReportGate reports each probe of a gate result as a finished step whose id
// is prefix + probe name (disruptive plugins use "gate-before/" and
// "gate-after/"). Warnings are OK steps whose detail starts with ⚠️; probes
// that could not run are skipped steps.
func ReportGate(r sdk.Reporter, prefix string, res *GateResult) error {
	for _, p := range res.Probes {
		id := prefix + p.Name
		var err error
		switch {
		case p.Skipped && p.Status != StatusFail:
			err = r.StepSkipped(id, p.Detail)
		case p.Status == StatusFail:
			err = r.StepFailed(id, p.Detail)
		case p.Status == StatusWarn:
			err = r.StepOK(id, "⚠️ "+p.Detail)
		default:
			err = r.StepOK(id, p.Detail)
		}
		if err != nil {
			return err
		}
	}
	return nil
}
