package testenv

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// Environment variables read by this package and written (as KEY=VALUE
// lines) into $TALOSBOT_TOOLS_DIR/env by tools/build.sh.
const (
	// EnvKubeAPIServer is the path of the kube-apiserver binary.
	EnvKubeAPIServer = "TALOSBOT_KUBE_APISERVER"
	// EnvTofu is the path of the tofu (or terraform) binary.
	EnvTofu = "TALOSBOT_TOFU"
	// EnvToolsDir overrides the tools cache directory.
	EnvToolsDir = "TALOSBOT_TOOLS_DIR"
	// EnvRequireTools=1 turns a missing tool into a test failure (as CI=true does).
	EnvRequireTools = "TALOSBOT_REQUIRE_TOOLS"
)

// ErrToolMissing is wrapped by the errors of KubeAPIServerPath and TofuPath
// when a tool cannot be found.
var ErrToolMissing = errors.New("integration tool missing")

// ToolsDir is where tools/build.sh puts its binaries and env file:
// $TALOSBOT_TOOLS_DIR, else $XDG_CACHE_HOME/talosbot/tools, else
// $HOME/.cache/talosbot/tools. It must match tools/build.sh.
func ToolsDir() string {
	if d := os.Getenv(EnvToolsDir); d != "" {
		return d
	}
	if d := os.Getenv("XDG_CACHE_HOME"); d != "" {
		return filepath.Join(d, "talosbot", "tools")
	}
	home, err := os.UserHomeDir()
	if err != nil {
		home = os.TempDir()
	}
	return filepath.Join(home, ".cache", "talosbot", "tools")
}

// KubeAPIServerPath finds kube-apiserver: $TALOSBOT_KUBE_APISERVER, then the
// env file that `make tools` writes, then PATH.
func KubeAPIServerPath() (string, error) {
	return findTool(EnvKubeAPIServer, "kube-apiserver")
}

// TofuPath finds OpenTofu: $TALOSBOT_TOFU, then the env file that
// `make tools` writes, then tofu or terraform on PATH.
func TofuPath() (string, error) {
	return findTool(EnvTofu, "tofu", "terraform")
}

func findTool(envKey string, names ...string) (string, error) {
	if p := os.Getenv(envKey); p != "" {
		if err := checkExecutable(p); err != nil {
			return "", fmt.Errorf("%w: %s=%s: %w; fix the variable or unset it and run `make tools`", ErrToolMissing, envKey, p, err)
		}
		return p, nil
	}
	envFile := filepath.Join(ToolsDir(), "env")
	vals, err := readEnvFile(envFile)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("%w: reading %s: %w; rerun `make tools`", ErrToolMissing, envFile, err)
	}
	if p := vals[envKey]; p != "" {
		if err := checkExecutable(p); err != nil {
			return "", fmt.Errorf("%w: %s in %s points to %s: %w; rerun `make tools`", ErrToolMissing, envKey, envFile, p, err)
		}
		return p, nil
	}
	for _, n := range names {
		if p, err := exec.LookPath(n); err == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("%w: %s not found (no $%s, no %s in %s, not on PATH); run `make tools` (bash tools/build.sh) to build it",
		ErrToolMissing, names[0], envKey, envKey, envFile)
}

func checkExecutable(p string) error {
	st, err := os.Stat(p)
	if err != nil {
		return err
	}
	if st.IsDir() || st.Mode().Perm()&0o111 == 0 {
		return fmt.Errorf("not an executable file")
	}
	return nil
}

// readEnvFile parses KEY=VALUE lines; blank lines and # comments are skipped.
func readEnvFile(path string) (map[string]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	vals := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			continue
		}
		vals[strings.TrimSpace(k)] = strings.TrimSpace(v)
	}
	return vals, sc.Err()
}

// Require stops a test whose tools or environment are missing. In CI
// (CI=true) or with TALOSBOT_REQUIRE_TOOLS=1 it fails the test, so that
// integration tests never skip silently there; elsewhere it skips with the
// reason, which says how to get the tool.
func Require(t testing.TB, err error) {
	t.Helper()
	if err == nil {
		return
	}
	if mustHaveTools() {
		t.Fatalf("integration tool required (CI=true or %s=1): %v", EnvRequireTools, err)
		return
	}
	t.Skipf("skipping: %v", err)
}

func mustHaveTools() bool {
	ci, _ := strconv.ParseBool(os.Getenv("CI"))
	return ci || os.Getenv(EnvRequireTools) == "1"
}
