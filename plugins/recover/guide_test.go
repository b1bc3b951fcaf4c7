package recover

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/talosbot/talosbot/plugins/cluster"
	"github.com/talosbot/talosbot/plugins/sdk"
	"github.com/talosbot/talosbot/plugins/sdk/sdktest"
)

var guideCmd = regexp.MustCompile("^\\d+\\. `(talosctl [^`]+)`$")

// The guide rendered by `/talos recover --guide` for a sim that lost
// quorum, run command by command as written with the real talosctl: each
// command's check is polled before the next one runs, and at the end etcd
// has three voters, one leader and the snapshot's data. No command names a
// credential (talosctl reads TALOSCONFIG).
func TestGuideRunsAsWrittenWithTalosctl(t *testing.T) {
	t.Parallel()
	slow(t)
	bin := os.Getenv("TALOSBOT_TALOSCTL")
	if bin == "" {
		t.Skip("TALOSBOT_TALOSCTL is not set (the real talosctl, ../shared/tools/talosctl)")
	}
	f := setup(t)
	if _, err := f.c.LoseEtcdQuorum(ctx(t)); err != nil {
		t.Fatal(err)
	}
	req := f.req(1, nil)
	req.Command = GuideCommand
	rec, err := sdktest.Run(ctx(t), f.plugin(time.Hour), req, nil)
	if err != nil || !rec.FinalResult().OK {
		t.Fatalf("guide: %v %v", err, rec.FinalResult())
	}
	t.Logf("guide:\n%s", strings.Join(rec.FinalResult().Lines, "\n"))
	var cmds []string
	for _, l := range rec.FinalResult().Lines {
		if m := guideCmd.FindStringSubmatch(l); m != nil {
			cmds = append(cmds, m[1])
		}
	}
	text := strings.Join(rec.FinalResult().Lines, "\n")
	if len(cmds) < 8 || strings.Contains(text, "BEGIN") || strings.Contains(strings.ToLower(text), "talosconfig=") || strings.Contains(text, "--talosconfig") {
		t.Fatalf("guide:\n%s", text)
	}
	if !strings.Contains(text, "reset --graceful=false --reboot --system-labels-to-wipe=EPHEMERAL") || !strings.Contains(text, "bootstrap --recover-from="+f.snap.Path) {
		t.Fatalf("guide lacks the reset or the bootstrap:\n%s", text)
	}

	dir := t.TempDir()
	tcfg := filepath.Join(dir, "talosconfig")
	if err := os.WriteFile(tcfg, f.c.Talosconfig(), 0o600); err != nil {
		t.Fatal(err)
	}
	run := func(line string) (string, error) {
		c, cancel := context.WithTimeout(ctx(t), 3*time.Minute)
		defer cancel()
		args := strings.Fields(line)[1:]
		cmd := exec.CommandContext(c, bin, args...)
		cmd.Env = append(os.Environ(), "TALOSCONFIG="+tcfg, "HOME="+dir)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	// until re-runs a guide command until its check passes, within a
	// deadline: the condition is talosctl's output, polled by wait.
	until := func(line string, ok func(string) bool) {
		t.Helper()
		var out string
		var err error
		if werr := wait.PollUntilContextTimeout(ctx(t), 500*time.Millisecond, 3*time.Minute, true, func(context.Context) (bool, error) {
			out, err = run(line)
			return err == nil && ok(out), nil
		}); werr != nil {
			t.Fatalf("%s: check never passed (%v): %v\n%s", line, werr, err, out)
		}
	}
	bootstrapped := false
	for _, line := range cmds {
		switch {
		case strings.HasSuffix(line, " service etcd") && !bootstrapped:
			until(line, func(o string) bool { return strings.Contains(o, "Preparing") || strings.Contains(o, "Running") })
		case strings.Contains(line, " reset "):
			if out, err := run(line); err != nil {
				t.Fatalf("%s: %v\n%s", line, err, out)
			}
			node := strings.Fields(line)[2]
			until("talosctl -n "+node+" -e "+node+" service etcd", func(o string) bool {
				return strings.Contains(o, "Preparing") || strings.Contains(o, "Running") && strings.Contains(o, "OK")
			})
		case strings.Contains(line, " bootstrap "):
			out, err := run(line)
			if err != nil || !strings.Contains(out, "recovering from snapshot") {
				t.Fatalf("%s: %v\n%s", line, err, out)
			}
			bootstrapped = true
		case strings.HasSuffix(line, " service etcd"):
			until(line, func(o string) bool { return strings.Contains(o, "Running") && strings.Contains(o, "OK") })
		case strings.HasSuffix(line, " etcd members"):
			until(line, func(o string) bool { return strings.Count(o, " false") == 3 })
		case strings.HasSuffix(line, " etcd status"):
			until(line, func(o string) bool {
				leaders := map[string]bool{}
				rows := 0
				for _, l := range strings.Split(o, "\n")[1:] {
					if fs := strings.Fields(l); len(fs) > 7 {
						leaders[fs[7]] = true
						rows++
					}
				}
				return rows == 3 && len(leaders) == 1
			})
		case strings.Contains(line, " health "):
			if out, err := run(line); err != nil {
				t.Fatalf("%s: %v\n%s", line, err, out)
			}
		default:
			t.Fatalf("the test does not know how to check %q", line)
		}
	}
	if _, err := f.c.WaitEtcdHealthy(ctx(t), 3); err != nil {
		t.Fatal(err)
	}
	if !has(t, f.c, "/talosbot/before") || has(t, f.c, "/talosbot/after") {
		t.Fatal("want the snapshot's data")
	}
}

// Without any answer from the cluster, the guide still gives every step:
// the first control plane restores, every other one is listed for the
// EPHEMERAL reset with the condition to check first.
func TestGuideWithoutAnyAnswer(t *testing.T) {
	t.Parallel()
	inv, err := cluster.InventoryFrom(&sdk.Cluster{Name: "production", Nodes: []*sdk.Node{
		{Name: "cp-1", Address: "10.0.0.1", Role: "controlplane"}, {Name: "cp-2", Address: "10.0.0.2", Role: "controlplane"},
		{Name: "cp-3", Address: "10.0.0.3", Role: "controlplane"}, {Name: "w-1", Address: "10.0.0.9", Role: "worker"}}})
	if err != nil {
		t.Fatal(err)
	}
	g := BuildGuide(inv, GuideSource{Path: "/snap/production/x.db.age", Encrypted: true}, nil)
	text := strings.Join(g.Lines(), "\n")
	for _, w := range []string{
		"age -d -i <your age identity file> -o db.snapshot /snap/production/x.db.age",
		"talosctl -n 10.0.0.2 -e 10.0.0.2 reset --graceful=false --reboot --system-labels-to-wipe=EPHEMERAL --wait=false",
		"talosctl -n 10.0.0.3 -e 10.0.0.3 reset", "ONLY if its etcd is Running",
		"talosctl -n 10.0.0.1 -e 10.0.0.1 bootstrap --recover-from=db.snapshot",
		"--worker-nodes 10.0.0.9",
	} {
		if !strings.Contains(text, w) {
			t.Fatalf("guide lacks %q:\n%s", w, text)
		}
	}
	if strings.Contains(text, "10.0.0.1 -e 10.0.0.1 reset") {
		t.Fatalf("the recovery node is reset:\n%s", text)
	}
}
