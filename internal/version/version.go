// Package version holds build information set through -ldflags at build time.
package version

// These are set by the linker (see Makefile and Dockerfile); they are not mutated at run time.
var (
	Version = "dev"
	Commit  = "unknown"
	// PluginsSHA256 is the hex sha256 of the talosbot-plugins binary built
	// with this talosbot (make build and the Dockerfile build it first and
	// record its sum here). serve refuses any other binary as its built-in
	// plugins; empty in a plain `go build`, which then needs
	// TALOSBOT_PLUGINS_SHA256 (see cmd/talosbot/pluginsbin.go).
	PluginsSHA256 = ""
)

// String is the human-readable version line.
func String() string { return "talosbot " + Version + " (" + Commit + ")" }
