package bot

import (
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestNoPluginNamesInBot keeps the core ignorant of plugins (docs/ARCHITECTURE.md): no
// non-test Go file under bot/ spells a plugin's command or one of its settings keys. A core
// that did would turn a guard off when a plugin renames the string, with no test failing.
// Test fixtures that need such names live outside bot/ (internal/rendertest).
func TestNoPluginNamesInBot(t *testing.T) {
	banned := []string{`"gates"`, `"upgrade talos"`, `"upgrade k8s"`, `"node remove"`, `"terraform_root"`, `"attempt"`}
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return err
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for i, line := range strings.Split(string(src), "\n") {
			for _, b := range banned {
				if strings.Contains(line, b) {
					t.Errorf("bot/%s:%d spells %s: the core must learn it from the plugin's manifest or a protocol field", filepath.ToSlash(path), i+1, b)
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
