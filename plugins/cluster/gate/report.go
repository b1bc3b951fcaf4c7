package gate

import "github.com/talosbot/talosbot/plugins/sdk"

// Report reports each probe of a gate result as a finished step whose id
// is prefix + probe name (disruptive plugins use "gate-before/" and
// "gate-after/"). Warnings are OK steps whose detail starts with ⚠️; probes
// that could not run are SKIPPED steps whose detail starts with "not
// checked", so no renderer can show them as passed. The server's check lines
// of the cluster-health probe go to the operation log of its step.
func Report(r sdk.Reporter, prefix string, res *Result) error {
	for _, p := range res.Probes {
		id := prefix + p.Name
		for _, c := range p.Checks {
			if err := r.Log("info", id, c); err != nil {
				return err
			}
		}
		var err error
		switch p.Status {
		case StatusNotChecked:
			err = r.StepSkipped(id, p.Detail)
		case StatusFail:
			err = r.StepFailed(id, p.Detail)
		case StatusWarn:
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
