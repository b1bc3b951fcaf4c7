//go:build !demo

package main

import (
	"bufio"
	"context"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/talosbot/talosbot/internal/browsertest"
	"github.com/talosbot/talosbot/internal/servetest"
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
	if testing.Short() {
		t.Skip("starts two simulated clusters")
	}
	addr := servetest.FreeAddr(t)
	dataDir := filepath.Join(t.TempDir(), "demo") // the demo creates it
	cmd := exec.Command(demoBinPath, "demo", "--listen", addr, "--data-dir", dataDir)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var log strings.Builder
	cmd.Stderr = &lockedWriter{mu: &mu, w: &log}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(2 * time.Minute):
			_ = cmd.Process.Kill()
		}
	})
	ready, ended := make(chan struct{}), make(chan struct{})
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			(&lockedWriter{mu: &mu, w: &log}).Write([]byte(sc.Text() + "\n"))
			if strings.Contains(sc.Text(), "talosbot demo is ready") {
				select {
				case <-ready:
				default:
					close(ready)
				}
			}
		}
		close(ended) // stdout closed: the demo exited
		exited <- cmd.Wait()
	}()
	fail := func(why string) {
		mu.Lock()
		defer mu.Unlock()
		t.Fatalf("%s; output:\n%s", why, log.String())
	}
	select {
	case <-ready:
	case <-ended:
		fail("the demo exited before it was ready")
	case <-time.After(3 * time.Minute):
		fail("demo not ready after 3 minutes")
	}
	b := &servetest.Bot{T: t, Addr: addr}
	b.Command("alice", "ops", "/talos health staging")
	b.WaitForWithin("the health gate to pass on staging", 2*time.Minute, func() bool {
		return b.HasMessage("ops", func(m servetest.Message) bool {
			return m.Title == "✅ succeeded · /talos health · staging" && m.Field("State") == "succeeded"
		})
	})

	// The tour in the browser: the bot's markdown is rendered, not shown
	// as asterisks and backticks.
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	p := browsertest.Open(t, ctx, "http://"+addr+"/")
	p.WaitVisible(`#live.on`)
	p.Do(chromedp.SendKeys(chromedp.CSS(`#cmd`), "/talos help"), chromedp.Click(chromedp.CSS(`#send`)))
	p.WaitText(`#messages`, "talosbot commands:")
	p.Do(chromedp.SendKeys(chromedp.CSS(`#cmd`), "/talos audit --since 1h"), chromedp.Click(chromedp.CSS(`#send`)))
	p.WaitJS("the audit answer", `document.querySelector("#messages .msg .text pre") !== null`)
	if n := browsertest.Eval[int](p, `document.querySelectorAll("#messages .text code").length`); n < 10 {
		t.Errorf("the help shows %d code spans; want one per command", n)
	}
	if txt := p.Text(`#messages`); strings.Contains(txt, "`") || strings.Contains(txt, "*Audit*") {
		t.Errorf("the console shows markdown as text:\n%s", txt)
	}
	p.Screenshot("demo-help-audit")

	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ended:
	case <-time.After(2 * time.Minute):
		fail("the demo did not stop within 2 minutes of Ctrl-C")
	}
	if _, err := os.Stat(dataDir); !os.IsNotExist(err) {
		fail("after Ctrl-C the demo's data dir is still there (" + dataDir + ")")
	}
	mu.Lock()
	out := log.String()
	mu.Unlock()
	if !strings.Contains(out, "removed the demo's data dir "+dataDir) {
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

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// TestDemoCtrlCWhileStarting: Ctrl-C while the clusters are still starting
// stops the demo and removes its data dir all the same.
func TestDemoCtrlCWhileStarting(t *testing.T) {
	if testing.Short() {
		t.Skip("starts simulated clusters")
	}
	dataDir := filepath.Join(t.TempDir(), "demo")
	cmd := exec.Command(demoBinPath, "demo", "--listen", servetest.FreeAddr(t), "--data-dir", dataDir)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var log strings.Builder
	cmd.Stderr = &lockedWriter{mu: &mu, w: &log}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	starting, exited := make(chan struct{}), make(chan error, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			(&lockedWriter{mu: &mu, w: &log}).Write([]byte(sc.Text() + "\n"))
			if strings.Contains(sc.Text(), "starting two simulated clusters") {
				close(starting)
			}
		}
		exited <- cmd.Wait()
	}()
	output := func() string { mu.Lock(); defer mu.Unlock(); return log.String() }
	select {
	case <-starting:
	case <-time.After(time.Minute):
		_ = cmd.Process.Kill()
		t.Fatalf("the demo did not start its clusters; output:\n%s", output())
	}
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	select {
	case <-exited:
	case <-time.After(2 * time.Minute):
		// SIGQUIT makes the Go runtime print every goroutine's stack to stderr: the failure
		// then shows where the demo hangs.
		_ = cmd.Process.Signal(syscall.SIGQUIT)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
		}
		t.Fatalf("the demo did not stop within 2 minutes of Ctrl-C; output and goroutine dump:\n%s", output())
	}
	if _, err := os.Stat(dataDir); !os.IsNotExist(err) {
		t.Fatalf("after Ctrl-C while starting, the data dir is still there (%v); output:\n%s", err, output())
	}
}
