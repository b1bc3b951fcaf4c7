package main

import (
	"fmt"
	"os"
	"path/filepath"
)

// pluginsBinEnv overrides where the built-in plugins' binary is.
const pluginsBinEnv = "TALOSBOT_PLUGINS_BIN"

// pluginsBinaryPath returns where the talosbot-plugins executable should be:
// $TALOSBOT_PLUGINS_BIN, or talosbot-plugins in the directory of this
// executable (make build, the Dockerfile and the release put both there).
func pluginsBinaryPath() string {
	if path := os.Getenv(pluginsBinEnv); path != "" {
		return path
	}
	self, err := os.Executable()
	if err != nil {
		return "talosbot-plugins" // pluginsBinary reports it as missing, naming the variable
	}
	return filepath.Join(filepath.Dir(self), "talosbot-plugins")
}

// pluginsBinary returns pluginsBinaryPath after checking that an executable
// is there. serve checks it at start: a bot whose built-in plugins cannot
// start would accept commands it cannot run.
func pluginsBinary() (string, error) {
	path := pluginsBinaryPath()
	fi, err := os.Stat(path)
	if err != nil {
		return "", fmt.Errorf("built-in plugins: %w; install talosbot-plugins next to talosbot (make build puts both in bin/) or set %s to its path", err, pluginsBinEnv)
	}
	if fi.IsDir() || fi.Mode().Perm()&0o111 == 0 {
		return "", fmt.Errorf("built-in plugins: %s is not an executable file; install talosbot-plugins next to talosbot or set %s to its path", path, pluginsBinEnv)
	}
	return path, nil
}
