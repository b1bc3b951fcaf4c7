//go:build linux

package main

import (
	"bufio"
	"bytes"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"go.yaml.in/yaml/v3"
)

// The deployment files as shipped: deploy/install.sh (the one place the install
// commands live; docs/DEPLOY.md runs it), the systemd unit, the compose file and
// the Dockerfile. The tests install into a scratch root with install.sh, then
// act as the service's own uid and gid (a child process with those
// credentials, so the kernel's permission checks decide, not a model of them).
// This machine does not run systemd as PID 1, so systemd-run cannot start the
// unit here; the child process gets the identity the unit would give it.

const (
	// Ids for the service's user and group and for a bystander; no account on
	// a test machine uses them.
	svcUID, svcGID     = 61183, 61184
	otherUID, otherGID = 61185, 61186
	// A group the unit names that install.sh does not give files to: what a
	// DynamicUser's fresh group is.
	strangerGID = 61187
)

// unitService parses the [Service] section of a systemd unit: key → values in order.
func unitService(t *testing.T, path string) map[string][]string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string][]string{}
	section := ""
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "" || line[0] == '#' || line[0] == ';':
		case line[0] == '[':
			section = strings.Trim(line, "[]")
		case section == "Service":
			k, v, ok := strings.Cut(line, "=")
			if !ok {
				t.Fatalf("%s: %q is not KEY=VALUE", path, line)
			}
			if strings.HasSuffix(v, `\`) {
				t.Fatalf("%s: continuation lines are not parsed by this test: %q", path, line)
			}
			out[k] = append(out[k], v)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func last(vs []string) string {
	if len(vs) == 0 {
		return ""
	}
	return vs[len(vs)-1]
}

// installScratch runs deploy/install.sh with args into a new scratch root
// (DESTDIR) readable by everyone, as / is, and returns that root.
func installScratch(t *testing.T, env []string, args ...string) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("deploy/install.sh sets owners (install -o/-g) and the test acts as other uids: run as root, as CI does")
	}
	root := t.TempDir()
	// t.TempDir makes its directories 0700; the service user must reach the root.
	for d := root; d != os.TempDir() && d != "/"; d = filepath.Dir(d) {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command("../../deploy/install.sh", args...)
	cmd.Env = append(append(os.Environ(), "DESTDIR="+root), env...)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("deploy/install.sh %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return root
}

// binDir is a directory holding talosbot and talosbot-plugins, as bin/ after make build.
func binDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	for name, src := range map[string]string{"talosbot": binPath, "talosbot-plugins": pluginsBinPath} {
		abs, err := filepath.Abs(src)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(abs, filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// as runs a shell script as uid/gid/groups and returns its combined output and error.
func as(uid, gid uint32, groups []uint32, script string, args ...string) (string, error) {
	cmd := exec.Command("/bin/sh", append([]string{"-c", script, "sh"}, args...)...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: gid, Groups: groups}}
	cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=/nonexistent"}
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// installGroup returns the group install.sh gives the config in MODE (systemd
// or compose) when TALOSBOT_GROUP is not set.
func installGroup(t *testing.T, mode string) string {
	t.Helper()
	sh, err := os.ReadFile("../../deploy/install.sh")
	if err != nil {
		t.Fatal(err)
	}
	block := regexp.MustCompile(`(?ms)^` + mode + `\)\n(.*?)\n\t;;`).FindSubmatch(sh)
	if block == nil {
		t.Fatalf("deploy/install.sh has no %s) branch", mode)
	}
	m := regexp.MustCompile(`config_dir "\$\{TALOSBOT_GROUP:-([^}]+)\}"`).FindSubmatch(block[1])
	if m == nil {
		t.Fatalf("deploy/install.sh's %s branch does not call config_dir with ${TALOSBOT_GROUP:-GROUP}", mode)
	}
	return string(m[1])
}

// configDirs reads data_dir and snapshot_dir from an installed config.
func configDirs(t *testing.T, path string) (dataDir, snapDir, listen string) {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var c struct {
		DataDir     string `yaml:"data_dir"`
		SnapshotDir string `yaml:"snapshot_dir"`
		Listen      string `yaml:"listen"`
	}
	if err := yaml.Unmarshal(raw, &c); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return c.DataDir, c.SnapshotDir, c.Listen
}

// TestSystemdUnitAsInstalled: deploy/install.sh systemd into a scratch root,
// then, with the uid and groups the unit gives its process, the service can
// read its config and a secret installed with `install.sh secret`, run both
// binaries, and write its state directory (which holds data_dir and
// snapshot_dir, the only writable place under ProtectSystem=strict); a
// bystander can read none of the config, the secret or the env file. Every
// path the unit requires exists after the install, and every other one is
// optional ("-"). systemd-analyze verify accepts the unit in that root.
func TestSystemdUnitAsInstalled(t *testing.T) {
	unitPath := "../../deploy/systemd/talosbot.service"
	svc := unitService(t, unitPath)
	group := installGroup(t, "systemd")
	root := installScratch(t, []string{"TALOSBOT_GROUP=" + strconv.Itoa(svcGID)}, "systemd", binDir(t))
	// Install again over a config left root:root by the old instructions:
	// the config is kept, and made readable by the service.
	installed := filepath.Join(root, "etc/talosbot/talosbot.yaml")
	if err := os.WriteFile(installed, []byte("# mine\n"), 0o640); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(installed, 0, 0); err != nil {
		t.Fatal(err)
	}
	rerun := exec.Command("../../deploy/install.sh", "systemd", binDir(t))
	rerun.Env = append(os.Environ(), "DESTDIR="+root, "TALOSBOT_GROUP="+strconv.Itoa(svcGID))
	if out, err := rerun.CombinedOutput(); err != nil {
		t.Fatalf("deploy/install.sh systemd, again: %v\n%s", err, out)
	}
	if b, _ := os.ReadFile(installed); string(b) != "# mine\n" {
		t.Fatalf("install.sh overwrote an existing config: %q", b)
	}
	if err := exec.Command("cp", "../../deploy/examples/talosbot.yaml", installed).Run(); err != nil {
		t.Fatal(err)
	}
	secretSrc := filepath.Join(t.TempDir(), "talosconfig")
	if err := os.WriteFile(secretSrc, []byte("context: production\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("../../deploy/install.sh", "secret", secretSrc, "production/talosconfig")
	cmd.Env = append(os.Environ(), "DESTDIR="+root)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("deploy/install.sh secret: %v\n%s", err, out)
	}

	// The process's identity, as systemd derives it from the unit. A
	// DynamicUser gets a fresh uid and gid; a static User= without Group= gets
	// the user's primary group, named like the user (useradd --user-group).
	gname := last(svc["Group"])
	if gname == "" && last(svc["DynamicUser"]) != "yes" {
		gname = last(svc["User"])
	}
	gidOf := func(name string) uint32 {
		if name == group {
			return svcGID
		}
		return strangerGID
	}
	gid := uint32(strangerGID)
	if gname != "" {
		gid = gidOf(gname)
	}
	var groups []uint32
	for _, v := range svc["SupplementaryGroups"] {
		for _, g := range strings.Fields(v) {
			groups = append(groups, gidOf(g))
		}
	}
	if last(svc["User"]) == "" && last(svc["DynamicUser"]) != "yes" {
		t.Fatal("the unit names no User= (or DynamicUser=): talosbot would run as root")
	}

	// systemd makes StateDirectory= owned by the service with StateDirectoryMode=.
	stateName := last(svc["StateDirectory"])
	if stateName == "" {
		t.Fatal("the unit has no StateDirectory=: under ProtectSystem=strict the bot could write nowhere")
	}
	stateDir := filepath.Join("/var/lib", stateName)
	mode, err := strconv.ParseUint(last(svc["StateDirectoryMode"]), 8, 32)
	if err != nil {
		mode = 0o755 // systemd's default
	}
	if err := os.MkdirAll(filepath.Join(root, stateDir), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Join(root, stateDir), os.FileMode(mode)); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(filepath.Join(root, stateDir), svcUID, int(gid)); err != nil {
		t.Fatal(err)
	}

	// The config the unit starts with, and where it says the bot writes.
	var configPath string
	for _, start := range append(svc["ExecStartPre"], svc["ExecStart"]...) {
		f := strings.Fields(strings.TrimLeft(start, "-@:+!"))
		for i := range f {
			if f[i] == "--config" && i+1 < len(f) {
				if configPath != "" && configPath != f[i+1] {
					t.Fatalf("ExecStartPre and ExecStart name different configs: %s, %s", configPath, f[i+1])
				}
				configPath = f[i+1]
			}
		}
	}
	if configPath == "" {
		t.Fatal("the unit's ExecStart has no --config")
	}
	dataDir, snapDir, _ := configDirs(t, filepath.Join(root, configPath))
	for key, dir := range map[string]string{"data_dir": dataDir, "snapshot_dir": snapDir} {
		if dir != stateDir && !strings.HasPrefix(dir, stateDir+"/") {
			t.Errorf("the installed config's %s %s is outside the unit's StateDirectory %s, read-only under ProtectSystem=strict", key, dir, stateDir)
		}
	}

	exe := func(start string) string { return strings.Fields(strings.TrimLeft(start, "-@:+!"))[0] }
	checks := []struct {
		what, script string
		args         []string
	}{
		{"read its config", `head -c1 "$1" >/dev/null`, []string{root + configPath}},
		{"read a secret installed with install.sh secret", `head -c1 "$1" >/dev/null`, []string{root + "/etc/talosbot/production/talosconfig"}},
		{"run ExecStart's binary", `"$1" version`, []string{root + exe(last(svc["ExecStart"]))}},
		{"run the plugins binary next to it", `"$1" version`, []string{filepath.Join(root, filepath.Dir(exe(last(svc["ExecStart"]))), "talosbot-plugins")}},
		{"write its state directory (data_dir)", `mkdir -p "$1" && touch "$1/talosbot.db"`, []string{root + dataDir}},
	}
	for _, c := range checks {
		if out, err := as(svcUID, gid, groups, c.script, c.args...); err != nil {
			t.Errorf("the service (uid %d, gid %d, groups %v) cannot %s: %v\n%s", svcUID, gid, groups, c.what, err, out)
		}
	}
	for _, p := range []string{configPath, "/etc/talosbot/production/talosconfig", "/etc/talosbot/env"} {
		if out, err := as(otherUID, otherGID, nil, `head -c1 "$1" >/dev/null`, root+p); err == nil {
			t.Errorf("a bystander (uid %d) can read %s", otherUID, p)
		} else if !strings.Contains(out, "Permission denied") {
			t.Errorf("a bystander reading %s: want Permission denied, got %v: %s", p, err, out)
		}
	}

	// Paths the unit needs: each exists after the install, or is optional.
	for _, key := range []string{"ReadOnlyPaths", "ReadWritePaths", "InaccessiblePaths", "ExecPaths", "NoExecPaths", "EnvironmentFile", "BindPaths", "BindReadOnlyPaths"} {
		for _, v := range svc[key] {
			for _, p := range strings.Fields(v) {
				if strings.HasPrefix(p, "-") {
					continue
				}
				p = strings.TrimPrefix(p, "+")
				p, _, _ = strings.Cut(p, ":") // Bind*: SOURCE[:DEST]
				if _, err := os.Stat(filepath.Join(root, p)); err != nil {
					t.Errorf("%s=%s: not installed by deploy/install.sh, and without a \"-\" prefix the unit fails to start where it is missing", key, p)
				}
			}
		}
	}

	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Skip("systemd-analyze is not installed (apt-get install systemd; .ci/run installs it): the unit was not verified")
	}
	// verify --root resolves the unit's dependencies (sysinit.target, …) in
	// that root: give it the system's unit files.
	if err := os.MkdirAll(filepath.Join(root, "usr/lib/systemd"), 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("cp", "-r", "/usr/lib/systemd/system", filepath.Join(root, "usr/lib/systemd/")).CombinedOutput(); err != nil {
		t.Fatalf("copy the system's unit files: %v\n%s", err, out)
	}
	out, err := exec.Command(analyze, "verify", "--root="+root, filepath.Join(root, "etc/systemd/system/talosbot.service")).CombinedOutput()
	// verify reports a bad setting ("Unknown key", "Failed to parse …,
	// ignoring") without failing: any output is a finding.
	if err != nil || len(bytes.TrimSpace(out)) > 0 {
		t.Fatalf("systemd-analyze verify: %v\n%s", err, out)
	}
}

// dockerfile returns the runtime stage's USER, its CMD's --config, and the
// destinations COPY --chown=OWNER gives to OWNER.
func dockerfile(t *testing.T) (user, config string, chowned map[string]string) {
	t.Helper()
	df, err := os.ReadFile("../../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	stages := regexp.MustCompile(`(?m)^FROM `).Split(string(df), -1)
	runtime := stages[len(stages)-1]
	if m := regexp.MustCompile(`(?m)^USER (\S+)$`).FindAllStringSubmatch(runtime, -1); m != nil {
		user = m[len(m)-1][1]
	}
	if m := regexp.MustCompile(`(?m)^CMD \[.*"--config", "([^"]+)"\]$`).FindStringSubmatch(runtime); m != nil {
		config = m[1]
	}
	chowned = map[string]string{}
	for _, m := range regexp.MustCompile(`(?m)^COPY (?:--from=\S+ )?--chown=(\S+) .* (\S+)$`).FindAllStringSubmatch(runtime, -1) {
		chowned[strings.TrimRight(m[2], "/")] = m[1]
	}
	return user, config, chowned
}

// TestComposeAsShipped checks deploy/docker-compose.yaml (no Docker engine
// here) against the compose-spec essentials and the files it runs with: the
// service builds from a context that holds the Dockerfile; restart is a policy
// that restarts; read_only is on; user is the Dockerfile's USER, which owns the
// data directory in the image (a new named volume takes that owner); the
// config path in command is the Dockerfile's, under a read-only bind mount of
// /etc/talosbot; named volumes are declared; host paths are mounted
// read-only and never created; data_dir of the config install.sh compose writes is the named
// volume's mount, and each Terraform root it names is mounted; listen is not
// loopback and on the published port; env_file is the file install.sh makes.
// Then, as that user, the installed config is readable and the env file is not.
func TestComposeAsShipped(t *testing.T) {
	raw, err := os.ReadFile("../../deploy/docker-compose.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var compose struct {
		Services map[string]struct {
			Build struct {
				Context    string `yaml:"context"`
				Dockerfile string `yaml:"dockerfile"`
			} `yaml:"build"`
			Image    string   `yaml:"image"`
			Command  []string `yaml:"command"`
			Restart  string   `yaml:"restart"`
			ReadOnly bool     `yaml:"read_only"`
			User     string   `yaml:"user"`
			EnvFile  []string `yaml:"env_file"`
			Ports    []string `yaml:"ports"`
			Volumes  []any    `yaml:"volumes"`
		} `yaml:"services"`
		Volumes map[string]any `yaml:"volumes"`
	}
	if err := yaml.Unmarshal(raw, &compose); err != nil {
		t.Fatalf("docker-compose.yaml: %v", err)
	}
	svc, ok := compose.Services["talosbot"]
	if !ok {
		t.Fatalf("no service talosbot in %v", compose.Services)
	}
	if svc.Build.Context == "" && svc.Image == "" {
		t.Fatal("the service has neither build nor image")
	}
	if svc.Build.Context != "" {
		if _, err := os.Stat(filepath.Join("../../deploy", svc.Build.Context, svc.Build.Dockerfile)); err != nil {
			t.Errorf("build: the context does not hold the Dockerfile: %v", err)
		}
	}
	switch svc.Restart {
	case "always", "unless-stopped", "on-failure":
	default:
		t.Errorf("restart: %q does not restart the bot after a crash", svc.Restart)
	}
	if !svc.ReadOnly {
		t.Error("read_only: the root filesystem must be read-only")
	}

	user, dfConfig, chowned := dockerfile(t)
	if user == "" || svc.User != user {
		t.Errorf("user: %q, the Dockerfile's USER %q", svc.User, user)
	}
	uidS, gidS, _ := strings.Cut(svc.User, ":")
	uid, err1 := strconv.ParseUint(uidS, 10, 32)
	gid, err2 := strconv.ParseUint(gidS, 10, 32)
	if err1 != nil || err2 != nil || uid == 0 {
		t.Fatalf("user: %q is not a numeric non-root UID:GID (the host must know who reads /etc/talosbot)", svc.User)
	}

	config := ""
	for i := range svc.Command {
		if svc.Command[i] == "--config" && i+1 < len(svc.Command) {
			config = svc.Command[i+1]
		}
	}
	if len(svc.Command) == 0 || svc.Command[0] != "serve" || config == "" || config != dfConfig {
		t.Errorf("command: %q; want serve --config, the Dockerfile's config path %q", svc.Command, dfConfig)
	}

	// volumes: "SOURCE:TARGET[:ro]" or the long syntax. A host path (bind) is
	// read-only and, missing, an error: Docker makes a missing short-syntax
	// source an empty directory on the host. A named volume is declared.
	mounts := map[string]string{} // target → source
	for _, v := range svc.Volumes {
		var src, dst string
		var ro, creates bool
		switch v := v.(type) {
		case string:
			parts := strings.Split(v, ":")
			if len(parts) < 2 {
				t.Errorf("volume %q has no target", v)
				continue
			}
			src, dst = parts[0], parts[1]
			ro, creates = len(parts) > 2 && parts[2] == "ro", true
		case map[string]any:
			src, _ = v["source"].(string)
			dst, _ = v["target"].(string)
			ro, _ = v["read_only"].(bool)
			if b, ok := v["bind"].(map[string]any); ok {
				creates, _ = b["create_host_path"].(bool)
			}
		default:
			t.Errorf("volume %v: neither a string nor a mapping", v)
			continue
		}
		switch {
		case strings.HasPrefix(src, "/") || strings.HasPrefix(src, "."):
			if strings.HasPrefix(src, ".") {
				if _, err := os.Stat(filepath.Join("../../deploy", src)); err != nil {
					t.Errorf("volume %v: %v", v, err)
				}
			}
			if !ro {
				t.Errorf("volume %v: host paths are mounted read-only", v)
			}
			if creates {
				t.Errorf("volume %v: a missing %s would be made an empty directory on the host; use the long syntax with bind.create_host_path: false", v, src)
			}
		default:
			if _, ok := compose.Volumes[src]; !ok {
				t.Errorf("volume %v: %s is not declared under volumes:", v, src)
			}
		}
		mounts[dst] = src
	}
	if mounts["/etc/talosbot"] != "/etc/talosbot" || !strings.HasPrefix(config, "/etc/talosbot/") {
		t.Errorf("the config %s must be in /etc/talosbot, bind-mounted from the host's /etc/talosbot (install.sh compose)", config)
	}

	root := installScratch(t, nil, "compose")
	dataDir, _, listen := configDirs(t, filepath.Join(root, config))
	if src, ok := mounts[dataDir]; !ok || strings.HasPrefix(src, "/") {
		t.Errorf("data_dir %s of the installed config is not a named volume's mount: %v", dataDir, mounts)
	}
	if chowned[dataDir] != svc.User {
		t.Errorf("the image does not give %s to %s (COPY --chown): the bot could not create talosbot.db in a new volume; chowned: %v", dataDir, svc.User, chowned)
	}
	// Paths the installed config reads inside the container must be mounted there.
	cfgRaw, err := os.ReadFile(filepath.Join(root, config))
	if err != nil {
		t.Fatal(err)
	}
	var cfg struct {
		Clusters []struct {
			Name        string `yaml:"name"`
			Credentials struct {
				Terraform struct {
					Root string `yaml:"root"`
				} `yaml:"terraform"`
			} `yaml:"credentials"`
		} `yaml:"clusters"`
	}
	if err := yaml.Unmarshal(cfgRaw, &cfg); err != nil {
		t.Fatal(err)
	}
	for _, c := range cfg.Clusters {
		if r := c.Credentials.Terraform.Root; r != "" {
			if _, ok := mounts[r]; !ok {
				t.Errorf("cluster %s: credentials.terraform.root %s of the installed config is not mounted in the container: %v", c.Name, r, mounts)
			}
		}
	}
	host, port, err := net.SplitHostPort(listen)
	if err != nil || net.ParseIP(host) == nil || net.ParseIP(host).IsLoopback() {
		t.Errorf("listen: %q in the installed config; inside a container it must not be loopback", listen)
	}
	published := false
	for _, p := range svc.Ports {
		if strings.HasSuffix(p, ":"+port) {
			published = true
		}
	}
	if !published {
		t.Errorf("ports %v do not publish the container's listen port %s", svc.Ports, port)
	}
	if len(svc.EnvFile) != 1 || !strings.HasPrefix(svc.EnvFile[0], "/") {
		t.Fatalf("env_file: %v, want the one absolute file install.sh makes", svc.EnvFile)
	}
	if _, err := os.Stat(root + svc.EnvFile[0]); err != nil {
		t.Errorf("env_file %s is not made by install.sh compose: %v", svc.EnvFile[0], err)
	}

	if out, err := as(uint32(uid), uint32(gid), nil, `head -c1 "$1" >/dev/null`, root+config); err != nil {
		t.Errorf("the container's user %s cannot read %s as installed: %v\n%s", svc.User, config, err, out)
	}
	// docker compose reads env_file as root; the container's user need not.
	if _, err := as(uint32(uid), uint32(gid), nil, `head -c1 "$1" >/dev/null`, root+svc.EnvFile[0]); err == nil {
		t.Errorf("the container's user can read %s; it is for docker compose (root) only", svc.EnvFile[0])
	}
}

// TestDeployDocMatchesInstall: the install commands docs/DEPLOY.md, the README
// and the deploy files give are deploy/install.sh's own modes, and the owner a
// command in the doc sets (a restored talosbot.db) is the unit's User=/Group=.
func TestDeployDocMatchesInstall(t *testing.T) {
	sh, err := os.ReadFile("../../deploy/install.sh")
	if err != nil {
		t.Fatal(err)
	}
	modes := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^([a-z]+)\)$`).FindAllStringSubmatch(string(sh), -1) {
		modes[m[1]] = true
	}
	svc := unitService(t, "../../deploy/systemd/talosbot.service")
	owner := "-o " + last(svc["User"]) + " -g " + last(svc["Group"])
	n := 0
	for _, f := range []string{"docs/DEPLOY.md", "README.md", "deploy/systemd/talosbot.service", "deploy/docker-compose.yaml"} {
		raw, err := os.ReadFile("../../" + f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range regexp.MustCompile(`deploy/install\.sh ([a-z]+)`).FindAllStringSubmatch(string(raw), -1) {
			n++
			if !modes[m[1]] {
				t.Errorf("%s runs deploy/install.sh %s; its modes are %v", f, m[1], modes)
			}
		}
		for _, m := range regexp.MustCompile(`install [^\n]*(-o \S+ -g \S+)`).FindAllStringSubmatch(string(raw), -1) {
			if f == "docs/DEPLOY.md" && m[1] != owner {
				t.Errorf("%s: %q sets owner %q; the unit runs as %q", f, m[0], m[1], owner)
			}
		}
	}
	if n < 5 {
		t.Fatalf("found only %d deploy/install.sh commands in the docs; the pattern is broken", n)
	}
}
