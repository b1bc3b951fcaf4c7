// Package version holds build information set through -ldflags at build time.
package version

// These are set by the linker (see Makefile and Dockerfile); they are not mutated at run time.
var (
	Version = "dev"
	Commit  = "unknown"
)

// String is the human-readable version line.
func String() string { return "talosbot " + Version + " (" + Commit + ")" }
