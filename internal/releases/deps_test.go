package releases_test

import (
	"os/exec"
	"strings"
	"testing"
)

// TestLinksNoTalosLibrary: the bot process uses this package, and it must
// not link machinery (cmd/talosbot TestServeBinaryLinksNoClusterLibraries);
// the matrix comes in through releases.Matrix (releases/compat).
func TestLinksNoTalosLibrary(t *testing.T) {
	for _, pkg := range []string{"github.com/talosbot/talosbot/internal/releases", "github.com/talosbot/talosbot/internal/factory"} {
		out, err := exec.Command("go", "list", "-deps", pkg).Output()
		if err != nil {
			t.Fatalf("go list -deps %s: %v", pkg, err)
		}
		for _, p := range strings.Fields(string(out)) {
			if strings.HasPrefix(p, "github.com/siderolabs/talos/") || strings.HasPrefix(p, "k8s.io/client-go") {
				t.Errorf("%s links %s", pkg, p)
			}
		}
	}
}
