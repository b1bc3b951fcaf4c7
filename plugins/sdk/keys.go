package sdk

// Names the host and the plugins both use: each is written here once, so a
// rename on one side cannot silently switch a feature off on the other. The
// serve binary links this package (it links no cluster library), so the host
// and every plugin can import it.
const (
	// ArgDryRun is the boolean flag a plugin declares (in its manifest's
	// args) for "only report the plan; change nothing". The engine reads it
	// from a finished operation's args: a dry run proves nothing for the
	// promotion gate, the staging drills or "last change" in status.
	ArgDryRun = "dry-run"
)
