package main

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/talosbot/talosbot/internal/version"
)

// pluginsBinEnv overrides where the built-in plugins' binary is.
const pluginsBinEnv = "TALOSBOT_PLUGINS_BIN"

// pluginsSHA256Env states the sha256 of the built-in plugins' binary for a
// talosbot built without one recorded (a plain `go build`). It is not a way
// to skip the check: it names the one binary that is accepted.
const pluginsSHA256Env = "TALOSBOT_PLUGINS_SHA256"

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

// pluginsSHA256 returns the sha256 the built-in plugins' binary must have:
// the one recorded at build time (version.PluginsSHA256), or for a build
// without one, $TALOSBOT_PLUGINS_SHA256. A build with a recorded sum does not
// take another from the environment: whoever can set the bot's environment
// could otherwise vouch for a wrapper.
func pluginsSHA256() (string, error) {
	recorded := version.PluginsSHA256
	stated := strings.ToLower(strings.TrimSpace(os.Getenv(pluginsSHA256Env)))
	switch {
	case recorded != "" && stated != "" && stated != recorded:
		return "", fmt.Errorf("built-in plugins: %s=%s differs from the sha256 %s recorded in this talosbot when it was built; unset %s (it is only for builds without a recorded sum)", pluginsSHA256Env, stated, recorded, pluginsSHA256Env)
	case recorded != "":
		return recorded, nil
	case stated == "":
		return "", fmt.Errorf("built-in plugins: this talosbot was built without the sha256 of its talosbot-plugins (a plain go build), so it cannot verify the binary it would send credentials to; build both with make build, which records it, or set %s to the sha256 of the talosbot-plugins you trust (sha256sum %s)", pluginsSHA256Env, pluginsBinaryPath())
	}
	if b, err := hex.DecodeString(stated); err != nil || len(b) != sha256.Size {
		return "", fmt.Errorf("built-in plugins: %s must be the 64-character hex sha256 of talosbot-plugins (sha256sum %s)", pluginsSHA256Env, pluginsBinaryPath())
	}
	return stated, nil
}

// pluginsBinary returns pluginsBinaryPath after checking that an executable
// is there and that it is the talosbot-plugins this talosbot was built with
// (its sha256). serve checks it at start: a bot whose built-in plugins cannot
// start would accept commands it cannot run, and a binary put in their place
// (a wrapper set as $TALOSBOT_PLUGINS_BIN, another build) would receive every
// request with its credentials. The plugin host checks the sum again before
// it launches the file (plugins/host, verified.go).
func pluginsBinary() (string, error) {
	path := pluginsBinaryPath()
	fi, err := os.Stat(path)
	if err != nil {
		return "", fmt.Errorf("built-in plugins: %w; install talosbot-plugins next to talosbot (make build puts both in bin/) or set %s to its path", err, pluginsBinEnv)
	}
	if fi.IsDir() || fi.Mode().Perm()&0o111 == 0 {
		return "", fmt.Errorf("built-in plugins: %s is not an executable file; install talosbot-plugins next to talosbot or set %s to its path", path, pluginsBinEnv)
	}
	want, err := pluginsSHA256()
	if err != nil {
		return "", err
	}
	got, err := fileSHA256(path)
	if err != nil {
		return "", fmt.Errorf("built-in plugins: %w", err)
	}
	if got != want {
		return "", fmt.Errorf("built-in plugins: %s has sha256 %s, but this talosbot expects %s; install talosbot and talosbot-plugins from the same build (make build, the release archive or the image) and, if %s is set, point it at that talosbot-plugins", path, got, want, pluginsBinEnv)
	}
	return path, nil
}

func fileSHA256(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer func() { _ = f.Close() }()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", fmt.Errorf("reading %s: %w", path, err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
