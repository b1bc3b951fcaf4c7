package main

import (
	"context"
	"fmt"
	"net/http"
	"net/http/cgi"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/talosbot/talosbot/internal/amtest"
	"github.com/talosbot/talosbot/internal/servetest"
	"github.com/talosbot/talosbot/sim"
)

const (
	e2eAlertsToken = "e2e-alerts-token-0815-0123456789abcdef"
	e2eGitToken    = "e2e-git-token-SECRET-4711"
)

const variablesTF = `# Talos versions, bumped after a verified upgrade (R18)
variable "talos_version" {
  type    = string
  default = "v1.12.6"
}

variable "talos_kubernetes_version" {
  type    = string
  default = "v1.35.2"
}
`

func git(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", append([]string{"-c", "user.name=seed", "-c", "user.email=seed@example.test", "-c", "init.defaultBranch=main"}, args...)...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "HOME="+dir)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// followupEnv is a real `talosbot serve` with a simulated 2-node staging
// cluster, the real Alertmanager (its webhook at the bot), and a bare Git
// repository served by git's own http-backend behind a token.
type followupEnv struct {
	t    *testing.T
	c    *sim.Cluster
	b    *servetest.Bot
	am   string
	bare string
	data string
}

// newFollowupEnv starts the simulated cluster, Alertmanager and the Git
// remote; extra is appended to the bot's config.
func newFollowupEnv(t *testing.T, extra ...string) *followupEnv {
	t.Helper()
	if _, err := exec.LookPath("git"); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("git CLI is missing: apt-get install git")
		}
		t.Skip("git CLI is missing (apt-get install git)")
	}
	ctx := context.Background()
	dir := t.TempDir()
	c, err := sim.Start(ctx, sim.Options{Dir: filepath.Join(dir, "sim"), Name: "staging", ControlPlanes: 1, Workers: 1, RebootDelay: time.Second})
	must(t, err)
	t.Cleanup(func() { _ = c.Close() })
	tc := filepath.Join(dir, "talosconfig")
	must(t, os.WriteFile(tc, c.Talosconfig(), 0o600))

	// The infrastructure repository.
	repos := filepath.Join(dir, "repos")
	bare := filepath.Join(repos, "infra.git")
	git(t, dir, "init", "--bare", "-b", "main", bare)
	seed := filepath.Join(dir, "seed")
	git(t, dir, "clone", bare, seed)
	must(t, os.MkdirAll(filepath.Join(seed, "terraform"), 0o755))
	must(t, os.WriteFile(filepath.Join(seed, "terraform", "variables_talos.tf"), []byte(variablesTF), 0o644))
	git(t, seed, "add", ".")
	git(t, seed, "commit", "-m", "seed")
	git(t, seed, "push", "origin", "main")
	execPath := strings.TrimSpace(git(t, dir, "--exec-path"))
	gitSrv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, pass, ok := r.BasicAuth(); !ok || pass != e2eGitToken {
			w.Header().Set("WWW-Authenticate", `Basic realm="git"`)
			http.Error(w, "authentication required", http.StatusUnauthorized)
			return
		}
		(&cgi.Handler{Path: filepath.Join(execPath, "git-http-backend"),
			Env: []string{"GIT_PROJECT_ROOT=" + repos, "GIT_HTTP_EXPORT_ALL=1", "REMOTE_USER=talosbot"}}).ServeHTTP(w, r)
	}))
	t.Cleanup(gitSrv.Close)

	addr := servetest.FreeAddr(t)
	am := amtest.Start(t, "http://"+addr+"/api/alerts/alertmanager", e2eAlertsToken)
	var nodes []string
	for _, n := range c.Nodes() {
		nodes = append(nodes, fmt.Sprintf("{name: %s, address: %s, role: %s, host: %s, platform: nocloud, installer_class: default}", n.Name, n.IP, n.Role, n.Host))
	}
	webUsers, tokens := servetest.ConsoleUsers(t, "alice")
	cfg := filepath.Join(dir, "talosbot.yaml")
	must(t, os.WriteFile(cfg, []byte(fmt.Sprintf(`
data_dir: %[1]s/data
listen: %[2]s
clusters:
  - name: staging
    environment: staging
    channels: [ops]
    endpoints: [%[3]s]
    nodes: [%[4]s]
    credentials: {source: files, talosconfig: "file:%[5]s"}
    declared: {schematic_id: %[6]s, talos_version: v1.12.6}
  # Not simulated: only its alerts are used, to show the webhook delivers.
  - name: production
    environment: production
    channels: [prd]
    endpoints: [127.0.0.254]
    nodes: [{name: cp-1, address: 127.0.0.254, role: controlplane, host: pve9}]
    credentials: {source: files, talosconfig: "file:%[5]s"}
releases: {talos: [v1.12.6, v1.13.9]}
timeouts: {gate: 20s, node: 60s}
policy:
  staging: {operators: ["*"]}
  production: {operators: [alice], approvers: [bob]}
chat:
%[9]salerts:
  token: env:TB_ALERTS_TOKEN
  rules:
    - name: node-not-ready
      match: {alertname: KubeNodeNotReady}
      commands: ["/talos health {{cluster}}"]
silences:
  alertmanager_url: %[7]s
  node_label: node
git_followup:
  remote: %[8]s/infra.git
  username: talosbot
  token: env:TB_GIT_TOKEN
`, dir, addr, c.Nodes()[0].IP, strings.Join(nodes, ", "), tc, sim.DefaultSchematic, am, gitSrv.URL, webUsers)+strings.Join(extra, "\n")), 0o600))
	b := &servetest.Bot{T: t, Bin: talosbotBinary(t), Config: cfg, Addr: addr, Tokens: tokens,
		Env: []string{"TB_ALERTS_TOKEN=" + e2eAlertsToken, "TB_GIT_TOKEN=" + e2eGitToken}}
	t.Cleanup(func() {
		if b.Cmd != nil && b.Cmd.ProcessState == nil {
			_ = b.Cmd.Process.Kill()
			_ = b.Cmd.Wait()
		}
	})
	return &followupEnv{t: t, c: c, b: b, am: am, bare: bare, data: filepath.Join(dir, "data")}
}

// opSilence returns the silence whose comment names op, if Alertmanager has one.
func (e *followupEnv) opSilence(op string) (amtest.Silence, bool) {
	for _, s := range amtest.Silences(e.t, e.am) {
		if strings.Contains(s.Comment, op) {
			return s, true
		}
	}
	return amtest.Silence{}, false
}

func (e *followupEnv) startUpgrade() string {
	e.t.Helper()
	e.b.Command("alice", "ops", "/talos upgrade talos v1.13.9 staging")
	var id string
	e.b.WaitForWithin("the upgrade to run", time.Minute, func() bool {
		for _, m := range e.b.Messages("ops") {
			if strings.Contains(m.Title, "/talos upgrade talos") && m.Field("Operation") != "" && m.Field("State") == "running" {
				id = m.Field("Operation")
				return true
			}
		}
		return false
	})
	return id
}

func (e *followupEnv) branches() []string {
	return strings.Fields(git(e.t, e.bare, "for-each-ref", "--format=%(refname:short)", "refs/heads/"))
}

func (e *followupEnv) thread(substr string) bool {
	return e.b.HasMessage("ops", func(m servetest.Message) bool { return strings.Contains(m.Text, substr) })
}

// TestServeUpgradeHoldsSilenceThenPushesBump: during a sim upgrade the
// silence exists with the cluster and node matchers; an alert posted then is
// silenced and suggests nothing; at the end the silence is expired, the
// alert still firing is reported, and the version bump is a pushed branch
// whose only change is the talos_version line. No token appears anywhere.
func TestServeUpgradeHoldsSilenceThenPushesBump(t *testing.T) {
	// Waits on processes and the sim's reboots, not the CPU: runs beside the package's other slow tests.
	t.Parallel()
	slow(t)
	e := newFollowupEnv(t)
	// The control plane takes its time to reboot, so the run outlasts the
	// checks made while it goes on.
	must(t, e.c.Inject(context.Background(), "cp-1", sim.Fault{SlowReboot: 8 * time.Second}))
	e.b.Start()
	id := e.startUpgrade()
	var s amtest.Silence
	e.b.WaitFor("the operation's silence in Alertmanager", func() bool {
		var ok bool
		s, ok = e.opSilence(id)
		return ok && s.Status.State == "active"
	})
	if got := fmt.Sprint(s.Matchers); got != "[{cluster staging false true} {node cp-1|worker-1 true true}]" {
		t.Fatalf("matchers %s", got)
	}
	if !strings.Contains(s.Comment, "requested by alice") {
		t.Fatalf("comment %q", s.Comment)
	}
	amtest.PostAlert(t, e.am, map[string]string{"alertname": "KubeNodeNotReady", "cluster": "staging", "node": "worker-1"})
	e.b.WaitFor("the alert silenced by the operation's silence", func() bool {
		for _, a := range amtest.Alerts(t, e.am) {
			if a.Labels["cluster"] == "staging" && a.Status.State == "suppressed" && len(a.Status.SilencedBy) == 1 && a.Status.SilencedBy[0] == s.ID {
				return true
			}
		}
		return false
	})

	// An alert of another cluster, posted after the staging one: when its
	// suggestion arrives, Alertmanager has flushed the staging group too
	// (group_wait started earlier), so a staging suggestion would be there.
	amtest.PostAlert(t, e.am, map[string]string{"alertname": "KubeNodeNotReady", "cluster": "production", "node": "cp-1"})
	suggestion := func(m servetest.Message) bool { return strings.Contains(m.Title, "KubeNodeNotReady") }
	e.b.WaitFor("the production suggestion", func() bool { return len(e.b.Messages("prd")) > 0 && e.b.HasMessage("prd", suggestion) })
	if e.b.HasMessage("ops", suggestion) {
		t.Fatal("a suggestion was posted during the run for the alert the operation caused")
	}
	if _, ok := e.opSilence(id); !ok || e.b.HasMessage("ops", func(m servetest.Message) bool { return m.Field("Operation") == id && m.Field("State") != "running" }) {
		t.Fatal("the run ended before the check could show anything; slow the roll down (sim SlowReboot)")
	}
	if st := e.b.AwaitEnd("ops", id, 3*time.Minute); st != "succeeded" {
		t.Fatalf("upgrade %s; bot log:\n%s", st, e.b.Stderr)
	}
	e.b.WaitFor("the silence expired", func() bool { s, _ := e.opSilence(id); return s.Status.State == "expired" })
	e.b.WaitFor("the follow-up lines", func() bool {
		return e.thread("Terraform change pushed") && e.thread("still firing as the silence ends")
	})
	// Once the silence is gone the alert that is still firing is a real
	// one again, and it reaches the channel as usual.
	e.b.WaitFor("the still-firing alert's suggestion after the silence", func() bool { return e.b.HasMessage("ops", suggestion) })

	br := "talosbot/staging-talos-version-v1.13.9-" + id
	if got := strings.Join(e.branches(), " "); got != "main "+br {
		t.Fatalf("remote branches %q, want main and %s", got, br)
	}
	if ns := strings.TrimSpace(git(t, e.bare, "diff", "--numstat", "main", br)); ns != "1\t1\tterraform/variables_talos.tf" {
		t.Fatalf("numstat %q", ns)
	}
	if d := git(t, e.bare, "diff", "-U0", "main", br); !strings.Contains(d, "-  default = \"v1.12.6\"\n+  default = \"v1.13.9\"") {
		t.Fatalf("diff:\n%s", d)
	}
	msg := git(t, e.bare, "log", "-1", "--format=%B", br)
	for _, want := range []string{"operation " + id, "requested by alice", "Nodes: cp-1, worker-1", "runs v1.13.9"} {
		if !strings.Contains(msg, want) {
			t.Errorf("commit message lacks %q:\n%s", want, msg)
		}
	}
	// The drift report says whether the branch was merged yet.
	drift := func() string {
		before := len(e.b.Messages("ops"))
		e.b.Command("alice", "ops", "/talos drift staging")
		var text string
		e.b.WaitFor("the drift report", func() bool {
			msgs := e.b.Messages("ops")
			for _, m := range msgs[min(before, len(msgs)):] {
				if strings.Contains(m.Title, "/talos drift") && (m.Field("State") == "succeeded" || m.Field("State") == "failed") {
					text = m.Text
					return true
				}
			}
			return false
		})
		return text
	}
	if d := drift(); !strings.Contains(d, "branch "+br) || !strings.Contains(d, "not merged into main yet") {
		t.Fatalf("drift report before the merge:\n%s", d)
	}
	git(t, e.bare, "update-ref", "refs/heads/main", br)
	if d := drift(); !strings.Contains(d, "is merged into main") {
		t.Fatalf("drift report after the merge:\n%s", d)
	}
	must(t, e.b.Cmd.Process.Signal(syscall.SIGTERM))
	_ = e.b.Cmd.Wait()
	// No credential in the commits, the logs, the remote's config or
	// anything the bot keeps on disk.
	var all strings.Builder
	all.WriteString(git(t, e.bare, "log", "--all", "--format=%an %ae %B"))
	all.WriteString(e.b.Stderr.String())
	cfg, _ := os.ReadFile(filepath.Join(e.bare, "config"))
	all.Write(cfg)
	_ = filepath.Walk(e.data, func(p string, fi os.FileInfo, err error) error {
		if err == nil && !fi.IsDir() {
			b, _ := os.ReadFile(p)
			all.Write(b)
		}
		return nil
	})
	for _, secret := range []string{e2eGitToken, e2eAlertsToken} {
		if strings.Contains(all.String(), secret) {
			t.Fatalf("secret %q leaked into commits, logs, remote config or the data dir", secret)
		}
	}
}

// TestServeFailedUpgradePushesNothing: a node that fails to boot the new
// version fails the upgrade; the silence is expired and nothing is pushed.
func TestServeFailedUpgradePushesNothing(t *testing.T) {
	// Waits on processes and the sim's reboots, not the CPU: runs beside the package's other slow tests.
	t.Parallel()
	slow(t)
	e := newFollowupEnv(t)
	must(t, e.c.Inject(context.Background(), "worker-1", sim.Fault{BootFailure: true}))
	e.b.Start()
	id := e.startUpgrade()
	e.b.WaitFor("the operation's silence", func() bool { _, ok := e.opSilence(id); return ok })
	if st := e.b.AwaitEnd("ops", id, 3*time.Minute); st != "failed" {
		t.Fatalf("upgrade %s, want failed", st)
	}
	e.b.WaitFor("the silence expired", func() bool { s, _ := e.opSilence(id); return s.Status.State == "expired" })
	if got := e.branches(); len(got) != 1 {
		t.Fatalf("a failed upgrade pushed: %v", got)
	}
	if e.thread("Terraform change pushed") {
		t.Fatal("a failed upgrade reported a Terraform change")
	}
}

// TestServeKilledThenAbandonedExpiresSilence: SIGKILL during the roll
// leaves the silence held; the restarted bot finds it with the operation,
// and abandon expires it. Nothing is pushed.
func TestServeKilledThenAbandonedExpiresSilence(t *testing.T) {
	slow(t)
	e := newFollowupEnv(t)
	e.b.Start()
	id := e.startUpgrade()
	var s amtest.Silence
	e.b.WaitFor("the operation's silence", func() bool { var ok bool; s, ok = e.opSilence(id); return ok })
	e.b.WaitForWithin("the first node's upgrade call", time.Minute, func() bool { return upgradeCalls(e.c) > 0 })
	must(t, e.b.Cmd.Process.Signal(syscall.SIGKILL))
	_ = e.b.Cmd.Wait()
	if s2, _ := e.opSilence(id); s2.Status.State != "active" {
		t.Fatalf("the killed bot's silence is %s", s2.Status.State)
	}
	e.b.Start()
	e.b.WaitFor("the start-up to find the silence", func() bool {
		return strings.Contains(e.b.Stderr.String(), "silence "+s.ID+" is held for interrupted operation "+id)
	})
	e.b.Command("alice", "ops", "/talos abandon "+id)
	e.b.WaitFor("the silence expired after abandon", func() bool { s, _ := e.opSilence(id); return s.Status.State == "expired" })
	if got := e.branches(); len(got) != 1 {
		t.Fatalf("an abandoned upgrade pushed: %v", got)
	}
}

// TestServeKilledThenResumedExpiresSilence: SIGKILL during the roll, then
// resume: the silence found at start-up is extended by the resumed run and
// expired when it succeeds, and the bump is pushed once.
func TestServeKilledThenResumedExpiresSilence(t *testing.T) {
	// Waits on processes and the sim's reboots, not the CPU: runs beside the package's other slow tests.
	t.Parallel()
	slow(t)
	e := newFollowupEnv(t)
	must(t, e.c.Inject(context.Background(), "cp-1", sim.Fault{SlowReboot: 3 * time.Second}))
	e.b.Start()
	id := e.startUpgrade()
	var s amtest.Silence
	e.b.WaitFor("the operation's silence", func() bool { var ok bool; s, ok = e.opSilence(id); return ok })
	e.b.WaitForWithin("the first node's upgrade call", time.Minute, func() bool { return upgradeCalls(e.c) > 0 })
	must(t, e.b.Cmd.Process.Signal(syscall.SIGKILL))
	_ = e.b.Cmd.Wait()
	e.b.Start()
	e.b.WaitFor("the start-up to find the silence", func() bool {
		return strings.Contains(e.b.Stderr.String(), "silence "+s.ID+" is held for interrupted operation "+id)
	})
	e.b.Command("alice", "ops", "/talos resume "+id)
	if st := e.b.AwaitEnd("ops", id, 3*time.Minute); st != "succeeded" {
		t.Fatalf("resumed upgrade %s; bot log:\n%s", st, e.b.Stderr)
	}
	e.b.WaitFor("every silence of the operation expired", func() bool {
		n := 0
		for _, x := range amtest.Silences(t, e.am) {
			if strings.Contains(x.Comment, id) {
				if x.Status.State != "expired" {
					return false
				}
				n++
			}
		}
		return n > 0
	})
	e.b.WaitFor("the bump branch", func() bool { return len(e.branches()) == 2 })
}
