package host

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// The plugin decodes its own section strictly: the host passes it unread
// and returns the problems with their paths inside the section.
func TestValidateConfigAsksThePlugin(t *testing.T) {
	m := newManager(t, Options{BuiltIn: []string{"alpha"}})
	ctx := t.Context()
	problems, err := m.ValidateConfig(ctx, "alpha", []byte(`{"limt": 3}`), []string{"staging"})
	if err != nil {
		t.Fatal(err)
	}
	if len(problems) != 1 || problems[0].GetPath() != "limt" || !strings.Contains(problems[0].GetMessage(), `did you mean "limit"?`) {
		t.Fatalf("problems = %v", problems)
	}
	problems, err = m.ValidateConfig(ctx, "alpha", []byte(`{"limit": 11}`), []string{"staging", "production"})
	if err != nil || len(problems) != 1 || problems[0].GetMessage() != "11 is above 10 (clusters: staging,production)" {
		t.Fatalf("problems = %v, %v", problems, err)
	}
	for _, ok := range []string{`{"limit": 3}`, ``} {
		if problems, err := m.ValidateConfig(ctx, "alpha", []byte(ok), nil); err != nil || len(problems) != 0 {
			t.Fatalf("%q: problems = %v, %v", ok, problems, err)
		}
	}
	if _, err := m.ValidateConfig(ctx, "nope", nil, nil); err == nil {
		t.Fatal("an unknown plugin was validated")
	}
}

// A plugin built before ValidateConfig existed accepts no section: the
// host reports one given to it instead of dropping it silently.
func TestValidateConfigOfAPluginThatPredatesIt(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "oldplugin")
	if out, err := exec.Command(goTool(), "build", "-o", bin, "./testdata/oldplugin").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	m := newManager(t, Options{External: []External{{Name: "old", Path: bin, SHA256: sha256File(t, bin)}}})
	problems, err := m.ValidateConfig(t.Context(), "old", nil, nil)
	if err != nil || len(problems) != 0 {
		t.Fatalf("no section: problems = %v, %v", problems, err)
	}
	problems, err = m.ValidateConfig(t.Context(), "old", []byte(`{"a": 1}`), nil)
	if err != nil || len(problems) != 1 || !strings.Contains(problems[0].GetMessage(), "predates configuration sections") {
		t.Fatalf("a section: problems = %v, %v", problems, err)
	}
}
