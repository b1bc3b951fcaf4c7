package sdk

import (
	"os"
)

// Pause between nodes (docs/ENDINGS.md). The host cannot reach a running
// plugin except by cancelling its context, and a cancel that races the next
// node's first call is no safe pause. So the host names a pause mark, a file,
// in a disruptive run's evidence (Evidence.PauseMark) and creates
// it when an operator clicks Pause; a plugin that works node by node checks
// PauseRequested before it touches the next node and, if so, ends the run
// with PausedResult. The host records the operation as interrupted (paused);
// Resume plans again and carries on.
const PausedSummary = "paused"

// PauseRequested reports whether the host asked this run to pause.
func PauseRequested(req *OperationRequest) bool {
	if req == nil {
		return false
	}
	p := req.Evidence.PauseMark
	if p == "" {
		return false
	}
	_, err := os.Stat(p)
	return err == nil
}

// PausedResult ends a run that paused before node (nothing of it touched).
func PausedResult(node string, lines []string) *Result {
	return &Result{OK: false, Summary: PausedSummary, Lines: append(append([]string(nil), lines...), "⏸️ paused before "+node+"; it and later nodes were not touched")}
}
