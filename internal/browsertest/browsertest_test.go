package browsertest

import (
	"os"
	"path/filepath"
	"testing"
)

// TestArtifactsDir: with TALOSBOT_ARTIFACTS the screenshots of a test go to
// their own directory under it, named after the test (subtests included).
func TestArtifactsDir(t *testing.T) {
	root := t.TempDir()
	t.Setenv("TALOSBOT_ARTIFACTS", root)
	t.Run("approval card/production", func(t *testing.T) {
		dir := ArtifactsDir(t)
		if want := filepath.Join(root, "TestArtifactsDir_approval_card_production"); dir != want {
			t.Fatalf("artifacts dir %s, want %s", dir, want)
		}
		if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
			t.Fatalf("artifacts dir not created: %v", err)
		}
	})
}
