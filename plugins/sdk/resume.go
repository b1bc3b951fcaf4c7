package sdk

// Steps in flight when a run stopped. A resumed run (attempt > 1) plans from
// what the cluster shows now, and that cannot tell a node whose upgrade never
// began from one that got the upgrade and came back on its old version (Talos's
// A/B fallback leaves nothing behind once it has booted the old entry). The
// host knows which steps were running when the run stopped (its record keeps
// them as stopped), so it names them in the resumed run's request
// (OperationRequest.InterruptedSteps). A plugin that resumes node by node
// checks a node whose step was in flight before it touches it again.

// InterruptedSteps are the ids of the steps that were in flight when an
// earlier attempt of this operation stopped (none on a first run).
func InterruptedSteps(req *OperationRequest) map[string]bool {
	out := map[string]bool{}
	for _, s := range req.InterruptedSteps {
		if s.ID != "" {
			out[s.ID] = true
		}
	}
	return out
}
