package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// No Docker engine runs here, so check what can be checked: every path the
// Dockerfile copies exists, its build flags match the Makefile's, and the
// binary builds (static) with exactly those flags.
func TestDockerfileMatchesRepoAndMakefile(t *testing.T) {
	// Builds the static binary (CPU, not a wait on a sim), once; in parallel with the
	// package's other tests so the build overlaps their waits.
	t.Parallel()
	root := "../.."
	df, err := os.ReadFile(filepath.Join(root, "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	copyRE := regexp.MustCompile(`(?m)^COPY (?:--from=\S+ )?(.+) \S+$`)
	n := 0
	for _, m := range copyRE.FindAllStringSubmatch(string(df), -1) {
		if strings.Contains(m[0], "--from=") {
			continue
		}
		for _, src := range strings.Fields(m[1]) {
			if _, err := os.Stat(filepath.Join(root, src)); err != nil {
				t.Errorf("Dockerfile copies %s, which does not exist", src)
			}
			n++
		}
	}
	if n < 3 {
		t.Fatalf("found only %d COPY sources; the pattern is broken", n)
	}
	ldRE := regexp.MustCompile(`-ldflags "([^"]+)"`)
	m := ldRE.FindStringSubmatch(string(df))
	if m == nil {
		t.Fatal("no -ldflags in the Dockerfile's go build")
	}
	dockerFlags := strings.NewReplacer("${VERSION}", "$(VERSION)", "${COMMIT}", "$(COMMIT)").Replace(m[1])
	mk, err := os.ReadFile(filepath.Join(root, "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	mkLine := regexp.MustCompile(`(?m)^LDFLAGS := (.+)$`).FindStringSubmatch(string(mk))
	if mkLine == nil {
		t.Fatal("no LDFLAGS in the Makefile")
	}
	mkFlags := strings.ReplaceAll(mkLine[1], "$(PKG)", "github.com/talosbot/talosbot")
	if dockerFlags != mkFlags {
		t.Fatalf("ldflags differ:\n Dockerfile: %s\n Makefile:   %s", dockerFlags, mkFlags)
	}
	if !strings.Contains(string(df), "CGO_ENABLED=0 go build -trimpath") || !strings.Contains(string(mk), "CGO_ENABLED=0 $(GO) build $(BUILD_FLAGS)") {
		t.Fatal("Dockerfile and Makefile must both build with CGO_ENABLED=0 and -trimpath")
	}
	// Both binaries go into one directory (talosbot serve looks for
	// talosbot-plugins next to itself), talosbot-plugins first: talosbot
	// records its sha256 (and serve refuses any other binary in its place).
	runRE := regexp.MustCompile(`(?m)^RUN (CGO_ENABLED=0 go build (?:.*\\\n)*.*)$`)
	rm := runRE.FindStringSubmatch(string(df))
	if rm == nil {
		t.Fatal("no RUN CGO_ENABLED=0 go build step in the Dockerfile")
	}
	step := rm[1]
	record := `-ldflags "` + m[1] + ` -X github.com/talosbot/talosbot/internal/version.PluginsSHA256=${sum}" -o /out/ ./cmd/talosbot` + "\n"
	if !strings.Contains(step, `-o /out/ ./cmd/talosbot-plugins && \`) || !strings.HasSuffix(step+"\n", record) {
		t.Fatalf("the Dockerfile must build ./cmd/talosbot-plugins into /out/, then ./cmd/talosbot with its sha256 recorded (%s); got:\n%s", record, step)
	}
	if !regexp.MustCompile(`(?m)^COPY --from=build /out/talosbot /out/talosbot-plugins /usr/local/bin/$`).Match(df) ||
		!strings.Contains(string(df), `ENTRYPOINT ["/usr/local/bin/talosbot"]`) {
		t.Fatal("the image must copy talosbot and talosbot-plugins into /usr/local/bin/, the entrypoint's directory")
	}
	mkRecord := `-ldflags "$(LDFLAGS) -X $(PKG)/internal/version.PluginsSHA256=$$sum"`
	// (-v feeds the progress filter, TestMakeBuildShowsProgress.)
	if !strings.Contains(string(mk), "CGO_ENABLED=0 $(GO) build $(BUILD_FLAGS) -v -o bin/ ./cmd/talosbot-plugins ") ||
		!strings.Contains(string(mk), mkRecord+" -v -o bin/ ./cmd/talosbot ") ||
		!strings.Contains(string(mk), mkRecord+" -v -tags demo -o bin/talosbot-demo ./cmd/talosbot ") ||
		strings.Index(string(mk), "./cmd/talosbot-plugins ") > strings.Index(string(mk), mkRecord) {
		t.Fatal("make build must build talosbot-plugins into bin/ first, then talosbot and talosbot-demo with its sha256 recorded, the same way")
	}
	if !strings.Contains(string(mk), "-C bin talosbot talosbot-plugins") {
		t.Fatal("make dist (the release archive) must carry talosbot and talosbot-plugins side by side")
	}
	// Run the Dockerfile's build step itself, into a temp dir.
	dir := t.TempDir()
	cmd := exec.Command("sh", "-ec", strings.ReplaceAll(step, "/out/", dir+"/"))
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "VERSION=v9.9.9-docker", "COMMIT=abc1234")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("the Dockerfile's build step: %v\n%s", err, b)
	}
	for name, want := range map[string]string{"talosbot": "talosbot v9.9.9-docker (abc1234)", "talosbot-plugins": "talosbot v9.9.9-docker (abc1234)"} {
		out := filepath.Join(dir, name)
		v, err := exec.Command(out, "version").Output()
		if err != nil || strings.TrimSpace(string(v)) != want {
			t.Fatalf("%s version = %q, %v", name, v, err)
		}
		if f, err := exec.Command("file", out).Output(); err == nil && !strings.Contains(string(f), "statically linked") {
			t.Fatalf("%s is not static: %s", name, f)
		}
	}
	plugins, err := os.ReadFile(filepath.Join(dir, "talosbot-plugins"))
	if err != nil {
		t.Fatal(err)
	}
	bot, err := os.ReadFile(filepath.Join(dir, "talosbot"))
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(plugins)
	if !bytes.Contains(bot, []byte(hex.EncodeToString(sum[:]))) {
		t.Fatal("the image's talosbot does not hold the sha256 of its talosbot-plugins")
	}
}

func TestDeployFiles(t *testing.T) {
	unit, err := os.ReadFile("../../deploy/systemd/talosbot.service")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"ProtectSystem=strict", "NoNewPrivileges=yes", "StateDirectory=talosbot", "ExecStart=/usr/local/bin/talosbot serve --config ", "ExecStartPre=/usr/local/bin/talosbot config check --config "} {
		if !strings.Contains(string(unit), want) {
			t.Errorf("systemd unit lacks %q", want)
		}
	}
	raw, err := os.ReadFile("../../deploy/docker-compose.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var compose struct {
		Services map[string]struct {
			Build   struct{ Context, Dockerfile string }
			Command []string
		}
	}
	if err := yaml.Unmarshal(raw, &compose); err != nil {
		t.Fatalf("docker-compose.yaml: %v", err)
	}
	svc, ok := compose.Services["talosbot"]
	if !ok || svc.Build.Dockerfile != "Dockerfile" || len(svc.Command) == 0 || svc.Command[0] != "serve" {
		t.Fatalf("compose service: %+v", compose.Services)
	}
	if _, err := os.Stat(filepath.Join("../../deploy", svc.Build.Context, svc.Build.Dockerfile)); err != nil {
		t.Fatalf("compose build context does not hold the Dockerfile: %v", err)
	}
}
