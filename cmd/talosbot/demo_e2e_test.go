//go:build !demo

package main

import (
	"bufio"
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/talosbot/talosbot/internal/browsertest"
	"github.com/talosbot/talosbot/internal/servetest"
	"github.com/talosbot/talosbot/internal/testenv"
)

// TestDemoRunsBuiltInPlugins runs `talosbot-demo demo` (what `make demo`
// runs) as a process and asks for a health check from the console: the demo
// build finds talosbot-plugins next to itself, the started healthgate passes
// the host's manifest check against the catalogue, and the gate passes on the
// simulated staging cluster. In Chromium, the help and the audit trail show
// rendered (code spans, a code block), not as markdown. Ctrl-C (SIGINT) then
// stops it and removes the data dir it created, hundreds of MB of etcd data
// and snapshots.
func TestDemoRunsBuiltInPlugins(t *testing.T) {
	// Waits on processes and the sim's reboots, not the CPU: runs beside the package's other slow tests.
	t.Parallel()
	if testing.Short() {
		t.Skip("starts two simulated clusters")
	}
	addr := servetest.FreeAddr(t)
	dataDir := filepath.Join(t.TempDir(), "demo") // the demo creates it
	d := startDemo(t, "--listen", addr, "--data-dir", dataDir)
	if !d.waitLine("talosbot demo is ready", 3*time.Minute) {
		t.Fatalf("the demo was not ready within 3 minutes (or exited); output:\n%s", d.output())
	}
	// The talosctl line the demo prints works as printed (with the real
	// talosctl, when TALOSBOT_TALOSCTL names one).
	if bin := os.Getenv("TALOSBOT_TALOSCTL"); bin != "" {
		_, line, ok := strings.Cut(d.output(), "    TALOSCONFIG=")
		line, _, _ = strings.Cut(line, "\n")
		cfgPath, args, _ := strings.Cut(line, " talosctl ")
		if !ok || args != "version" {
			t.Fatalf("the demo prints no talosctl line; output:\n%s", d.output())
		}
		cmd := exec.Command(bin, args)
		cmd.Env = append(os.Environ(), "TALOSCONFIG="+cfgPath)
		if out, err := cmd.CombinedOutput(); err != nil || !strings.Contains(string(out), "Tag:         v1.12.6") {
			t.Fatalf("TALOSCONFIG=%s talosctl %s: %v\n%s", cfgPath, args, err, out)
		}
	}
	b := &servetest.Bot{T: t, Addr: addr}
	b.Command("alice", "ops", "/talos health staging")
	b.WaitForWithin("the health gate to pass on staging", 2*time.Minute, func() bool {
		return b.HasMessage("ops", func(m servetest.Message) bool {
			return m.Title == "✅ succeeded · /talos health · staging" && m.Field("State") == "succeeded"
		})
	})
	// A restore drill of the healthy staging cluster passes: its Kubernetes carries what Talos's
	// bootstrap manifests create (CoreDNS, the bootstrap token, …), and the snapshot's counts
	// match the live ones (issue 27 "An empty Kubernetes").
	if _, err := testenv.KubeAPIServerPath(); err == nil {
		for _, c := range []string{"snapshot", "restore-drill"} {
			b.Command("alice", "ops", "/talos "+c+" staging")
			var ended servetest.Message
			b.WaitForWithin("/talos "+c+" staging to end", 3*time.Minute, func() bool {
				return b.HasMessage("ops", func(m servetest.Message) bool {
					if strings.Contains(m.Title, "/talos "+c+" · staging") && (m.Field("State") == "succeeded" || m.Field("State") == "failed") {
						ended = m
						return true
					}
					return false
				})
			})
			if ended.Field("State") != "succeeded" {
				t.Fatalf("/talos %s staging on a healthy demo cluster: %s\n%s", c, ended.Title, ended.Text)
			}
		}
	}

	// The tour in the browser: the bot's markdown is rendered, not shown
	// as asterisks and backticks.
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	p := browsertest.Open(t, ctx, "http://"+addr+"/")
	p.WaitConnected()
	p.SendCommand("/talos help")
	p.WaitText(`#messages`, "talosbot commands:")
	p.SendCommand("/talos audit --since 1h")
	p.WaitJS("the audit answer", `document.querySelector("#messages .msg .text pre") !== null`)
	if n := browsertest.Eval[int](p, `document.querySelectorAll("#messages .text code").length`); n < 10 {
		t.Errorf("the help shows %d code spans; want one per command", n)
	}
	if txt := p.Text(`#messages`); strings.Contains(txt, "`") || strings.Contains(txt, "*Audit*") {
		t.Errorf("the console shows markdown as text:\n%s", txt)
	}
	p.Screenshot("demo-help-audit")

	d.interrupt()
	if _, err := os.Stat(dataDir); !os.IsNotExist(err) {
		t.Fatalf("after Ctrl-C the demo's data dir is still there (%v); output:\n%s", err, d.output())
	}
	if out := d.output(); !strings.Contains(out, "removed the demo's data dir "+dataDir) {
		t.Fatalf("the demo did not say it removed its data dir; output:\n%s", out)
	}
}

// TestDemoRefusesBusyPort: a --listen port another process holds is refused
// before any cluster starts, with how to choose another port (the flag and
// DEMO_ARGS), and nothing is left behind: no data dir, no temp dir.
func TestDemoRefusesBusyPort(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	addr := busy.Addr().String()
	for _, withDir := range []bool{true, false} {
		tmp := t.TempDir()
		dataDir := filepath.Join(t.TempDir(), "demo")
		args := []string{"demo", "--listen", addr}
		if withDir {
			args = append(args, "--data-dir", dataDir)
		}
		cmd := exec.Command(demoBinPath, args...)
		cmd.Env = append(os.Environ(), "TMPDIR="+tmp) // where a default data dir would go
		raw, err := cmd.CombinedOutput()
		out := string(raw)
		if err == nil {
			t.Fatalf("the demo ran on a busy port:\n%s", out)
		}
		for _, want := range []string{"--listen " + addr + ": the port is in use", "--listen 127.0.0.1:PORT", "DEMO_ARGS='--listen 127.0.0.1:9090'"} {
			if !strings.Contains(out, want) {
				t.Errorf("busy port (data dir given: %v): output lacks %q:\n%s", withDir, want, out)
			}
		}
		if strings.Contains(out, "starting two simulated clusters") {
			t.Errorf("the demo started its clusters before it found the port busy:\n%s", out)
		}
		if _, err := os.Stat(dataDir); !os.IsNotExist(err) {
			t.Errorf("the refused demo created its data dir (%v)", err)
		}
		if left, _ := os.ReadDir(tmp); len(left) > 0 {
			t.Errorf("the refused demo left %s in the temp dir", left[0].Name())
		}
	}
}

// demoProc is a running `talosbot-demo demo`: its output so far (stdout and
// stderr), a wait for a line of it, and Ctrl-C. The cleanup stops a demo the
// test left running, so a failing test leaves no clusters behind.
type demoProc struct {
	t      *testing.T
	cmd    *exec.Cmd
	mu     sync.Mutex
	out    strings.Builder
	more   chan struct{} // closed and replaced whenever output arrives
	exited chan struct{} // closed once the process was reaped
}

func startDemo(t *testing.T, args ...string) *demoProc {
	t.Helper()
	d := &demoProc{t: t, cmd: exec.Command(demoBinPath, append([]string{"demo"}, args...)...), more: make(chan struct{}), exited: make(chan struct{})}
	stdout, err := d.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	d.cmd.Stderr = d
	if err := d.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			_, _ = d.Write([]byte(sc.Text() + "\n"))
		}
		_ = d.cmd.Wait() // after stdout closed: Wait closes the pipe
		close(d.exited)
	}()
	t.Cleanup(func() {
		select {
		case <-d.exited:
			return
		default:
		}
		_ = d.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-d.exited:
		case <-time.After(2 * time.Minute):
			_ = d.cmd.Process.Kill()
			<-d.exited
		}
	})
	return d
}

// Write collects stderr (and, from the scanner, stdout) and wakes waitLine.
func (d *demoProc) Write(p []byte) (int, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.out.Write(p)
	close(d.more)
	d.more = make(chan struct{})
	return len(p), nil
}

func (d *demoProc) output() string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.out.String()
}

// waitLine waits until the output contains s; false if the demo exited or
// the time ran out first.
func (d *demoProc) waitLine(s string, within time.Duration) bool {
	deadline := time.After(within)
	for {
		d.mu.Lock()
		found, more := strings.Contains(d.out.String(), s), d.more
		d.mu.Unlock()
		if found {
			return true
		}
		select {
		case <-more:
		case <-d.exited:
			return strings.Contains(d.output(), s)
		case <-deadline:
			return false
		}
	}
}

// interrupt sends Ctrl-C (SIGINT) and waits up to 2 minutes for the demo to
// exit. On that timeout it sends SIGQUIT, so the failure carries every
// goroutine's stack and shows where the demo hangs.
func (d *demoProc) interrupt() {
	d.t.Helper()
	if err := d.cmd.Process.Signal(syscall.SIGINT); err != nil {
		d.t.Fatal(err)
	}
	select {
	case <-d.exited:
	case <-time.After(2 * time.Minute):
		_ = d.cmd.Process.Signal(syscall.SIGQUIT)
		select {
		case <-d.exited:
		case <-time.After(10 * time.Second):
			_ = d.cmd.Process.Kill()
		}
		d.t.Fatalf("the demo did not stop within 2 minutes of Ctrl-C; output and goroutine dump:\n%s", d.output())
	}
}

// TestDemoCtrlCWhileStarting: Ctrl-C while the clusters are still starting
// stops the demo and removes its data dir all the same.
func TestDemoCtrlCWhileStarting(t *testing.T) {
	if testing.Short() {
		t.Skip("starts simulated clusters")
	}
	dataDir := filepath.Join(t.TempDir(), "demo")
	d := startDemo(t, "--listen", servetest.FreeAddr(t), "--data-dir", dataDir)
	if !d.waitLine("starting two simulated clusters", time.Minute) {
		t.Fatalf("the demo did not start its clusters; output:\n%s", d.output())
	}
	d.interrupt()
	if _, err := os.Stat(dataDir); !os.IsNotExist(err) {
		t.Fatalf("after Ctrl-C while starting, the data dir is still there (%v); output:\n%s", err, d.output())
	}
}

// TestDemoRefusalsNameMakeTools: without a kube-apiserver in the tools
// cache the demo's clusters have no kubeconfig; a refusal for that (R20 on
// `upgrade k8s`) says that `make tools` fixes it, in the demo only, and the
// demo says so at start.
func TestDemoRefusalsNameMakeTools(t *testing.T) {
	if testing.Short() {
		t.Skip("starts two simulated clusters")
	}
	t.Setenv("TALOSBOT_KUBE_APISERVER", filepath.Join(t.TempDir(), "no-kube-apiserver")) // as without `make tools`
	addr := servetest.FreeAddr(t)
	d := startDemo(t, "--listen", addr, "--data-dir", filepath.Join(t.TempDir(), "demo"))
	if !d.waitLine("talosbot demo is ready", 3*time.Minute) {
		t.Fatalf("the demo was not ready within 3 minutes (or exited); output:\n%s", d.output())
	}
	if !strings.Contains(d.output(), "Run `make tools` to get one.") {
		t.Fatalf("the demo does not say at start that it has no Kubernetes API; output:\n%s", d.output())
	}
	b := &servetest.Bot{T: t, Addr: addr}
	b.Command("alice", "ops", "/talos upgrade k8s 1.36.3 staging")
	var got string
	b.WaitForWithin("the R20 refusal", time.Minute, func() bool {
		return b.HasMessage("ops", func(m servetest.Message) bool {
			if strings.Contains(m.Text+m.Field("Result")+m.Field("Error"), "no kubeconfig") {
				got = m.Title + "\n" + m.Text
				for _, f := range m.Fields {
					got += "\n" + f.Label + ": " + f.Value
				}
				return true
			}
			return false
		})
	})
	t.Logf("refusal:\n%s", got)
	if !strings.Contains(got, "make tools") {
		t.Fatalf("the no-kubeconfig refusal does not name `make tools`:\n%s", got)
	}
	d.interrupt()
}
