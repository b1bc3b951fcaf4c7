package main

import (
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
)

// TestMakeBuildShowsProgress: a cold `make demo` (make build) compiles for
// minutes; every go build of the build target runs with -v through
// hack/build-progress.awk (under pipefail, so a failed build still fails
// make), and the filter turns downloads and package names into progress
// lines while passing compiler errors through.
func TestMakeBuildShowsProgress(t *testing.T) {
	mk, err := os.ReadFile("../../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	recipe := regexp.MustCompile(`(?ms)^build:\n((?:\t[^\n]*\n)+)`).FindStringSubmatch(string(mk))
	if recipe == nil {
		t.Fatal("no build target in the Makefile")
	}
	builds := 0
	for _, line := range strings.Split(recipe[1], "\n") {
		if !strings.Contains(line, "$(GO) build") {
			continue
		}
		builds++
		if !strings.Contains(line, "set -o pipefail;") || !strings.Contains(line, " -v ") || !strings.HasSuffix(line, "2>&1 | awk -f hack/build-progress.awk") {
			t.Errorf("build line without progress (pipefail, -v, the filter): %q", line)
		}
	}
	// talosbot-plugins, then talosbot and talosbot-demo (which record its sha256).
	if builds != 3 || !strings.Contains(recipe[1], "@echo \"building bin/talosbot-demo") {
		t.Fatalf("build target: %d go builds, want 3, each announced:\n%s", builds, recipe[1])
	}

	var in strings.Builder
	for i := range 30 {
		fmt.Fprintf(&in, "go: downloading example.com/m%d v1.0.%d\n", i, i)
	}
	for i := range 250 {
		fmt.Fprintf(&in, "example.com/m%d/pkg\n", i)
	}
	in.WriteString("# example.com/broken\nbroken/a.go:1:2: undefined: x\n")
	cmd := exec.Command("awk", "-f", "../../hack/build-progress.awk")
	cmd.Stdin = strings.NewReader(in.String())
	out, err := cmd.Output()
	if err != nil {
		t.Fatal(err)
	}
	want := "  … downloading modules (1 so far)\n  … downloading modules (26 so far)\n  … 100 packages compiled\n  … 200 packages compiled\n" +
		"# example.com/broken\nbroken/a.go:1:2: undefined: x\n"
	if string(out) != want {
		t.Fatalf("progress filter output:\n%s\nwant:\n%s", out, want)
	}
}
