package host

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	lifecyclev1 "github.com/talosbot/talosbot/plugins/sdk/proto/lifecycle/v1"
)

// testPluginPath is the testdata/testplugin binary, built once by TestMain
// and read-only afterwards.
var testPluginPath string

func TestMain(m *testing.M) {
	os.Exit(runTests(m))
}

func runTests(m *testing.M) int {
	dir, err := os.MkdirTemp("", "talosbot-host-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer func() { _ = os.RemoveAll(dir) }()
	testPluginPath = filepath.Join(dir, "testplugin")
	build := exec.Command(goTool(), "build", "-o", testPluginPath, "./testdata/testplugin")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintf(os.Stderr, "building testdata/testplugin: %v\n", err)
		return 1
	}
	return m.Run()
}

func goTool() string {
	if p, err := exec.LookPath("go"); err == nil {
		return p
	}
	return filepath.Join(runtime.GOROOT(), "bin", "go")
}

func sha256File(t testing.TB, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// syncBuffer is a goroutine-safe log sink.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// restarts counts OnRestart calls per plugin.
type restarts struct {
	mu sync.Mutex
	n  map[string]int
}

func (r *restarts) hook(name string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.n == nil {
		r.n = map[string]int{}
	}
	r.n[name]++
}

func (r *restarts) get(name string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.n[name]
}

func newManager(t testing.TB, opts Options) *Manager {
	t.Helper()
	if opts.Executable == "" {
		opts.Executable = testPluginPath
		opts.ExecutableSHA256 = sha256File(t, testPluginPath)
	}
	m, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Close)
	return m
}

func req(mode string, kv ...string) *lifecyclev1.OperationRequest {
	args := map[string]string{"mode": mode}
	for i := 0; i+1 < len(kv); i += 2 {
		args[kv[i]] = kv[i+1]
	}
	return &lifecyclev1.OperationRequest{OperationId: "op-1", Command: "test", Args: args}
}

// pidOf returns the pid of name's current process, or 0.
func pidOf(m *Manager, name string) int {
	p := m.plugins[name]
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cur == nil {
		return 0
	}
	return p.cur.pid
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t *testing.T, what string, timeout time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		<-tick.C
	}
}

type runOutcome struct {
	res *lifecyclev1.Result
	err error
}

// runWithin runs f and fails the test if it has not returned within d.
func runWithin(t *testing.T, d time.Duration, f func() (*lifecyclev1.Result, error)) (*lifecyclev1.Result, error) {
	t.Helper()
	ch := make(chan runOutcome, 1)
	go func() {
		r, err := f()
		ch <- runOutcome{r, err}
	}()
	select {
	case o := <-ch:
		return o.res, o.err
	case <-time.After(d):
		t.Fatalf("Run did not return within %s", d)
		return nil, nil
	}
}

func fileExists(path string) func() bool {
	return func() bool {
		_, err := os.Stat(path)
		return err == nil
	}
}

// fileHolds reports whether path exists and holds exactly want.
func fileHolds(path, want string) func() bool {
	return func() bool {
		b, err := os.ReadFile(path)
		return err == nil && string(b) == want
	}
}

func TestBuiltInDescribePlanRun(t *testing.T) {
	m := newManager(t, Options{BuiltIn: []string{"alpha"}})
	if got := m.Names(); len(got) != 1 || got[0] != "alpha" {
		t.Fatalf("Names = %v", got)
	}
	if pidOf(m, "alpha") != 0 {
		t.Fatal("plugin started before first use")
	}
	ctx := t.Context()

	mf, err := m.Manifest(ctx, "alpha")
	if err != nil {
		t.Fatal(err)
	}
	// The manifest name comes from `testplugin plugin alpha`: the built-in launch form.
	if mf.GetName() != "alpha" || len(mf.GetCommands()) != 1 {
		t.Fatalf("manifest = %v", mf)
	}
	pid := pidOf(m, "alpha")
	if pid == 0 {
		t.Fatal("no process after Describe")
	}
	mf.Name = "mutated"
	if again, err := m.Manifest(ctx, "alpha"); err != nil || again.GetName() != "alpha" {
		t.Fatalf("cached manifest = %v, %v", again, err)
	}

	r := req("ok", "node", "cp-1")
	r.Credentials = &lifecyclev1.Credentials{Talosconfig: []byte("secret")}
	plan, err := m.Plan(ctx, "alpha", r)
	if err != nil {
		t.Fatal(err)
	}
	if len(plan.GetSteps()) != 1 || plan.GetWarnings()[0] != "talosconfig: 6 bytes" {
		t.Fatalf("plan = %v", plan)
	}
	wantInputs := "command=test\nmode=ok\nnode=cp-1\n"
	if string(plan.GetCanonicalInputs()) != wantInputs {
		t.Fatalf("canonical inputs = %q", plan.GetCanonicalInputs())
	}

	var events []*lifecyclev1.Progress
	res, err := m.Run(ctx, "alpha", r, func(p *lifecyclev1.Progress) error {
		events = append(events, p)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if !res.GetOk() || res.GetSummary() != "done" {
		t.Fatalf("result = %v", res)
	}
	var kinds []string
	for i, e := range events {
		if e.GetUnixNano() == 0 || (i > 0 && e.GetUnixNano() < events[i-1].GetUnixNano()) {
			t.Fatalf("event %d: bad timestamp %d", i, e.GetUnixNano())
		}
		switch {
		case e.GetStep() != nil:
			kinds = append(kinds, fmt.Sprintf("step:%s:%s", e.GetStep().GetStepId(), e.GetStep().GetStatus()))
		case e.GetLog() != nil:
			kinds = append(kinds, "log")
		case e.GetArtifact() != nil:
			kinds = append(kinds, "artifact:"+e.GetArtifact().GetId())
		case e.GetResult() != nil:
			kinds = append(kinds, "result")
		}
	}
	want := []string{"log", "step:a:STEP_STATUS_RUNNING", "log", "artifact:art-1",
		"step:a:STEP_STATUS_OK", "step:b:STEP_STATUS_SKIPPED", "result"}
	if strings.Join(kinds, ",") != strings.Join(want, ",") {
		t.Fatalf("events = %v\nwant     %v", kinds, want)
	}
	if ok := events[4].GetStep(); ok.GetNode() != "cp-1" || ok.GetFromVersion() != "v1.12.6" || ok.GetToVersion() != "v1.13.9" {
		t.Fatalf("full step event = %v", ok)
	}

	// A failed operation is a Result, not an error.
	res, err = m.Run(ctx, "alpha", req("fail"), nil)
	if err != nil || res.GetOk() || res.GetError() != "gate failed: etcd has no leader" {
		t.Fatalf("fail mode: %v, %v", res, err)
	}
	// A plugin error on Plan names the plugin and keeps the plugin's message.
	if _, err := m.Plan(ctx, "alpha", req("plan-error")); err == nil ||
		err.Error() != `plugin "alpha": plan: refused by rule R10: skip of a minor version` {
		t.Fatalf("plan error = %v", err)
	}
	// An application error carrying codes.Unavailable (cluster down) is not
	// mistaken for a dead plugin: same process, no restart.
	if _, err := m.Plan(ctx, "alpha", req("plan-unavailable")); err == nil ||
		err.Error() != `plugin "alpha": plan: talos: rpc error: code = Unavailable desc = connection refused` {
		t.Fatalf("plan-unavailable error = %v", err)
	}
	if got := pidOf(m, "alpha"); got != pid {
		t.Fatalf("process was not reused: pid %d, then %d", pid, got)
	}
}

func TestExternalChecksum(t *testing.T) {
	good := sha256File(t, testPluginPath)
	bad := strings.Repeat("ab", 32)

	m := newManager(t, Options{External: []External{{Name: "ext", Path: testPluginPath, SHA256: bad}}})
	_, err := m.Manifest(t.Context(), "ext")
	if err == nil {
		t.Fatal("mismatching checksum accepted")
	}
	want := fmt.Sprintf(`plugin "ext" (%s): checksum mismatch: expected sha256 %s, got %s; update plugins[].sha256 in the config or reinstall the plugin`,
		testPluginPath, bad, good)
	if err.Error() != want || !errors.Is(err, ErrChecksumMismatch) {
		t.Fatalf("error =\n%v\nwant\n%s", err, want)
	}
	if pidOf(m, "ext") != 0 {
		t.Fatal("a process was started despite the mismatch")
	}
	if err := m.Verify(); !errors.Is(err, ErrChecksumMismatch) {
		t.Fatalf("Verify = %v", err)
	}

	m = newManager(t, Options{External: []External{{Name: "ext", Path: testPluginPath, SHA256: strings.ToUpper(good)}}})
	if err := m.Verify(); err != nil {
		t.Fatal(err)
	}
	mf, err := m.Manifest(t.Context(), "ext")
	if err != nil {
		t.Fatal(err)
	}
	if mf.GetName() != "testplugin" { // launched without the built-in arguments
		t.Fatalf("manifest name = %q", mf.GetName())
	}
}

func TestExternalChecksumCheckedOnRestart(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ext-plugin")
	b, err := os.ReadFile(testPluginPath)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o700); err != nil {
		t.Fatal(err)
	}
	m := newManager(t, Options{External: []External{{Name: "ext", Path: path, SHA256: sha256File(t, path)}}})
	if _, err := m.Manifest(t.Context(), "ext"); err != nil {
		t.Fatal(err)
	}
	// Replace the binary (as an install would: write and rename), then make
	// the running process go away.
	if err := os.WriteFile(path+".new", append(b, 0), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(path+".new", path); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(pidOf(m, "ext"), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	exited := m.plugins["ext"].cur.exited
	waitFor(t, "the killed plugin to be reaped", 5*time.Second, func() bool { return exited.Err() != nil })
	_, err = m.Plan(t.Context(), "ext", req("ok"))
	if !errors.Is(err, ErrChecksumMismatch) || !strings.Contains(err.Error(), path) {
		t.Fatalf("restart with a modified binary: %v", err)
	}
}

func TestCrashMidRunFailsRunAndRestarts(t *testing.T) {
	var rs restarts
	m := newManager(t, Options{BuiltIn: []string{"alpha", "beta"}, OnRestart: rs.hook})
	ctx := t.Context()
	if _, err := m.Manifest(ctx, "beta"); err != nil {
		t.Fatal(err)
	}
	betaPid := pidOf(m, "beta")

	_, err := runWithin(t, 5*time.Second, func() (*lifecyclev1.Result, error) {
		return m.Run(ctx, "alpha", req("crash-mid-run"), nil)
	})
	if err == nil || !errors.Is(err, ErrPluginExited) ||
		!strings.HasPrefix(err.Error(), `plugin "alpha" exited during run: exit status 3`) {
		t.Fatalf("crash error = %v", err)
	}

	// The other plugin is untouched and keeps serving.
	if _, err := m.Plan(ctx, "beta", req("ok")); err != nil {
		t.Fatal(err)
	}
	if pidOf(m, "beta") != betaPid || rs.get("beta") != 0 {
		t.Fatal("beta was restarted by alpha's crash")
	}

	res, err := m.Run(ctx, "alpha", req("ok"), nil)
	if err != nil || !res.GetOk() {
		t.Fatalf("run after crash: %v, %v", res, err)
	}
	if rs.get("alpha") != 1 {
		t.Fatalf("OnRestart(alpha) called %d times, want 1", rs.get("alpha"))
	}
}

func TestExternalKillMidRunFailsRunAndRestarts(t *testing.T) {
	var rs restarts
	m := newManager(t, Options{BuiltIn: []string{"alpha", "beta"}, OnRestart: rs.hook})
	ctx := t.Context()
	pids := make(chan int, 1)
	killedAt := make(chan time.Time, 1)
	_, err := runWithin(t, 10*time.Second, func() (*lifecyclev1.Result, error) {
		return m.Run(ctx, "alpha", req("wait-cancel"), func(p *lifecyclev1.Progress) error {
			if msg, ok := strings.CutPrefix(p.GetLog().GetMessage(), "pid="); ok {
				pid, _ := strconv.Atoi(msg)
				pids <- pid
			}
			if p.GetStep().GetStatus() == lifecyclev1.StepStatus_STEP_STATUS_RUNNING {
				// The run is in flight: kill the child from outside.
				if err := syscall.Kill(<-pids, syscall.SIGKILL); err != nil {
					return err
				}
				// Time the 5 s bound from the kill.
				killedAt <- time.Now()
			}
			return nil
		})
	})
	if err == nil || !errors.Is(err, ErrPluginExited) ||
		!strings.HasPrefix(err.Error(), `plugin "alpha" exited during run: signal: killed`) {
		t.Fatalf("kill error = %v", err)
	}
	if took := time.Since(<-killedAt); took > 5*time.Second {
		t.Fatalf("run failed %s after the kill, want within 5s", took)
	}
	if _, err := m.Plan(ctx, "beta", req("ok")); err != nil {
		t.Fatal(err)
	}
	res, err := m.Run(ctx, "alpha", req("ok"), nil)
	if err != nil || !res.GetOk() {
		t.Fatalf("run after kill: %v, %v", res, err)
	}
	if rs.get("alpha") != 1 || rs.get("beta") != 0 {
		t.Fatalf("restarts alpha=%d beta=%d, want 1 and 0", rs.get("alpha"), rs.get("beta"))
	}
}

func TestCancellationReachesPlugin(t *testing.T) {
	var rs restarts
	m := newManager(t, Options{BuiltIn: []string{"alpha"}, OnRestart: rs.hook})
	marker := filepath.Join(t.TempDir(), "cancelled")
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	_, err := runWithin(t, 5*time.Second, func() (*lifecyclev1.Result, error) {
		return m.Run(ctx, "alpha", req("wait-cancel", "marker", marker), func(p *lifecyclev1.Progress) error {
			if p.GetStep().GetStatus() == lifecyclev1.StepStatus_STEP_STATUS_RUNNING {
				cancel()
			}
			return nil
		})
	})
	if !errors.Is(err, context.Canceled) || !strings.HasPrefix(err.Error(), `plugin "alpha": run cancelled`) {
		t.Fatalf("err = %v", err)
	}
	// The plugin creates the marker and then writes to it: wait for its
	// content, not its existence, or a read between the two sees "".
	waitFor(t, "the plugin to see its ctx cancelled (marker file holding \"context canceled\")", 30*time.Second, fileHolds(marker, context.Canceled.Error()))
	// Cancellation does not cost the process.
	if _, err := m.Plan(t.Context(), "alpha", req("ok")); err != nil || rs.get("alpha") != 0 {
		t.Fatalf("after cancel: %v, restarts %d", err, rs.get("alpha"))
	}
}

func TestRunTimeout(t *testing.T) {
	m := newManager(t, Options{BuiltIn: []string{"alpha"}, RunTimeout: 300 * time.Millisecond})
	// Start the process first: the run timeout bounds the start too, and on a
	// loaded machine a start can take longer than 300 ms, which would fail the
	// run on the start instead of on the timeout this test is about.
	if _, err := m.Plan(t.Context(), "alpha", req("ok")); err != nil {
		t.Fatal(err)
	}
	marker := filepath.Join(t.TempDir(), "timed-out")
	r := req("sleep", "duration", "1h", "marker", marker)
	// Settings cannot extend the host's run timeout.
	r.Settings = &lifecyclev1.Settings{GateTimeoutMs: 3_600_000, NodeTimeoutMs: 3_600_000}
	_, err := runWithin(t, 5*time.Second, func() (*lifecyclev1.Result, error) {
		return m.Run(t.Context(), "alpha", r, nil)
	})
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), `plugin "alpha": run timed out after 300ms`) {
		t.Fatalf("err = %v", err)
	}
	waitFor(t, "the plugin to see its ctx cancelled (marker file)", 5*time.Second, fileExists(marker))
}

func TestPlanRetriedOnceAfterCrash(t *testing.T) {
	var rs restarts
	m := newManager(t, Options{BuiltIn: []string{"alpha"}, OnRestart: rs.hook})
	marker := filepath.Join(t.TempDir(), "crashed-once")
	plan, err := m.Plan(t.Context(), "alpha", req("crash-once", "marker", marker))
	if err != nil {
		t.Fatal(err)
	}
	if len(plan.GetCanonicalInputs()) == 0 || rs.get("alpha") != 1 {
		t.Fatalf("plan = %v, restarts = %d", plan, rs.get("alpha"))
	}
}

func TestProgressHandlerErrorCancelsRun(t *testing.T) {
	m := newManager(t, Options{BuiltIn: []string{"alpha"}})
	marker := filepath.Join(t.TempDir(), "aborted")
	stop := errors.New("chat message could not be updated")
	_, err := runWithin(t, 5*time.Second, func() (*lifecyclev1.Result, error) {
		return m.Run(t.Context(), "alpha", req("wait-cancel", "marker", marker), func(p *lifecyclev1.Progress) error {
			if p.GetStep() != nil {
				return stop
			}
			return nil
		})
	})
	if !errors.Is(err, stop) {
		t.Fatalf("err = %v", err)
	}
	waitFor(t, "the plugin to see its ctx cancelled (marker file)", 5*time.Second, fileExists(marker))
}

func TestConcurrentCallsShareOneProcess(t *testing.T) {
	m := newManager(t, Options{BuiltIn: []string{"alpha"}})
	var wg sync.WaitGroup
	errs := make(chan error, 40)
	for i := range 32 {
		wg.Go(func() {
			_, err := m.Plan(t.Context(), "alpha", req("ok", "i", strconv.Itoa(i)))
			errs <- err
		})
	}
	for range 4 {
		wg.Go(func() {
			res, err := m.Run(t.Context(), "alpha", req("ok"), nil)
			if err == nil && !res.GetOk() {
				err = fmt.Errorf("result %v", res)
			}
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if pidOf(m, "alpha") == 0 {
		t.Fatal("no process")
	}
}

func TestCloseKillsChildren(t *testing.T) {
	m := newManager(t, Options{BuiltIn: []string{"alpha", "beta"}})
	if _, err := m.Manifests(t.Context()); err != nil {
		t.Fatal(err)
	}
	pids := []int{pidOf(m, "alpha"), pidOf(m, "beta")}
	m.Close()
	for _, pid := range pids {
		if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
			t.Fatalf("pid %d still exists after Close (kill -0: %v)", pid, err)
		}
	}
	if _, err := m.Plan(t.Context(), "alpha", req("ok")); !errors.Is(err, ErrClosed) {
		t.Fatalf("Plan after Close: %v", err)
	}
	m.Close() // idempotent
}

func TestRequestsNeverLogged(t *testing.T) {
	var buf syncBuffer
	log := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	m := newManager(t, Options{BuiltIn: []string{"alpha"}, Logger: log})
	const secret = "SECRET-talosconfig-7f3a9c"
	withCreds := func(r *lifecyclev1.OperationRequest) *lifecyclev1.OperationRequest {
		r.Credentials = &lifecyclev1.Credentials{Talosconfig: []byte(secret), Kubeconfig: []byte(secret + "-kube")}
		return r
	}
	ctx := t.Context()
	_, _ = m.Plan(ctx, "alpha", withCreds(req("ok")))
	_, _ = m.Plan(ctx, "alpha", withCreds(req("plan-error")))
	_, _ = m.Run(ctx, "alpha", withCreds(req("ok")), nil)
	_, _ = m.Run(ctx, "alpha", withCreds(req("fail")), nil)
	_, _ = m.Run(ctx, "alpha", withCreds(req("crash-mid-run")), nil)
	_, _ = m.Run(ctx, "alpha", withCreds(req("ok")), nil)
	m.Close()
	waitFor(t, "the unexpected-exit warning", 5*time.Second, func() bool {
		return strings.Contains(buf.String(), `level=WARN msg="plugin process exited unexpectedly; it will be restarted on next use" plugin=alpha`)
	})
	out := buf.String()
	// Plugin stderr reaches the logger at debug level.
	if !strings.Contains(out, "level=DEBUG") || !strings.Contains(out, "testplugin alpha: run mode=ok") {
		t.Fatalf("plugin stderr not forwarded to the logger:\n%s", out)
	}
	if strings.Contains(out, "SECRET") {
		t.Fatalf("credentials leaked into the log:\n%s", out)
	}
}

func TestNewValidation(t *testing.T) {
	sum := strings.Repeat("0", 64)
	cases := []struct {
		name string
		opts Options
		want string
	}{
		{"builtin without executable", Options{BuiltIn: []string{"a"}}, "Options.Executable"},
		{"duplicate", Options{Executable: "x", BuiltIn: []string{"a"}, External: []External{{Name: "a", Path: "/p", SHA256: sum}}}, `plugin "a" is configured twice`},
		{"bad sum", Options{External: []External{{Name: "e", Path: "/p", SHA256: "abc"}}}, "sha256sum /p"},
		{"no path", Options{External: []External{{Name: "e", SHA256: sum}}}, "plugins[].path is empty"},
		{"bad name", Options{Executable: "x", BuiltIn: []string{"a b"}}, "invalid"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := New(tc.opts); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want it to mention %q", err, tc.want)
			}
		})
	}

	m := newManager(t, Options{BuiltIn: []string{"alpha"}, External: []External{{Name: "gone", Path: "/nonexistent/plugin", SHA256: sum}}})
	if _, err := m.Plan(t.Context(), "nope", req("ok")); !errors.Is(err, ErrUnknownPlugin) || !strings.Contains(err.Error(), "alpha, gone") {
		t.Fatalf("unknown plugin: %v", err)
	}
	if _, err := m.Manifest(t.Context(), "gone"); err == nil || !strings.Contains(err.Error(), `plugin "gone" (/nonexistent/plugin)`) {
		t.Fatalf("missing executable: %v", err)
	}
	mfs, err := m.Manifests(t.Context())
	if len(mfs) != 1 || mfs[0].GetName() != "alpha" || err == nil {
		t.Fatalf("Manifests = %v, %v; want alpha plus an error for gone", mfs, err)
	}
}

func TestDigest(t *testing.T) {
	// sha256("abc"), as printed by `printf abc | sha256sum`.
	const abc = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
	p := &lifecyclev1.OperationPlan{Summary: "one", CanonicalInputs: []byte("abc")}
	if got := Digest(p); got != abc {
		t.Fatalf("Digest = %s, want %s", got, abc)
	}
	// Display-only fields do not change the digest.
	q := &lifecyclev1.OperationPlan{Summary: "two", Warnings: []string{"w"}, Steps: []*lifecyclev1.Step{{Id: "s"}}, CanonicalInputs: []byte("abc")}
	if Digest(q) != abc {
		t.Fatal("digest depends on fields outside canonical_inputs")
	}
	if Digest(&lifecyclev1.OperationPlan{CanonicalInputs: []byte("abd")}) == abc {
		t.Fatal("digest insensitive to canonical_inputs")
	}
	empty := "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
	if Digest(nil) != empty || Digest(&lifecyclev1.OperationPlan{}) != empty {
		t.Fatal("empty inputs must hash the empty string")
	}
	if ShortDigest(abc) != "ba7816bf8f01" || ShortDigest("abc") != "abc" {
		t.Fatalf("ShortDigest = %q", ShortDigest(abc))
	}
}

func TestHCLogAdapterRespectsLevel(t *testing.T) {
	var buf syncBuffer
	info := newHCLogger(slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelInfo})))
	info.Error("plugin said something", "k", "v")
	if buf.String() != "" || info.GetLevel().String() != "off" {
		t.Fatalf("debug output leaked at info level: %q", buf.String())
	}
	debug := newHCLogger(slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug})))
	debug.Named("stdio").With("a", 1).Warn("hello", "k", "v")
	if out := buf.String(); !strings.Contains(out, "level=DEBUG msg=hello a=1 k=v logger=stdio") {
		t.Fatalf("adapter output = %q", out)
	}
	// go-plugin names the executable "plugin"; the Manager's logger already
	// says which plugin by name, so the path goes out as "path". Only keys
	// are renamed, never a value that happens to read "plugin".
	var paths syncBuffer
	newHCLogger(slog.New(slog.NewTextHandler(&paths, &slog.HandlerOptions{Level: slog.LevelDebug}))).
		Debug("starting plugin", "args", "x", "plugin", "/usr/lib/talosbot/x", "cmd", "plugin")
	if out := paths.String(); !strings.Contains(out, "args=x path=/usr/lib/talosbot/x cmd=plugin") || strings.Contains(out, "plugin=") {
		t.Fatalf("go-plugin's executable key was not renamed: %q", out)
	}
	w := newLineLogger(slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug})), "stderr")
	_, _ = io.WriteString(w, "part")
	_, _ = io.WriteString(w, "ial line\nnext")
	if !strings.Contains(buf.String(), `msg="partial line" stream=stderr`) || strings.Contains(buf.String(), "next") {
		t.Fatalf("line logger output = %q", buf.String())
	}
}

// TestDescribeInProcessStartsNothing: with Options.Describe, reading a
// built-in's manifest does not start its process (the executable here does
// not even exist), so an idle bot runs no plugin processes.
func TestDescribeInProcessStartsNothing(t *testing.T) {
	m, err := New(Options{Executable: "/nonexistent/talosbot", BuiltIn: []string{"health"},
		Describe: func(_ context.Context, name string) (*lifecyclev1.Manifest, error) {
			return &lifecyclev1.Manifest{Name: name, Commands: []*lifecyclev1.Command{{Name: "health"}}}, nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	mf, err := m.Manifest(context.Background(), "health")
	if err != nil || mf.GetName() != "health" || len(mf.GetCommands()) != 1 {
		t.Fatalf("manifest = %v, %v", mf, err)
	}
	if _, err := m.Plan(context.Background(), "health", &lifecyclev1.OperationRequest{}); err == nil {
		t.Fatal("Plan must start the (missing) process and fail")
	}
}

// TestBuiltInFromAnotherBuildIsRefused: a started built-in whose manifest
// differs from the bot's catalogue (a talosbot-plugins binary from another
// build) is refused before any call reaches it; an exact match is used.
func TestBuiltInFromAnotherBuildIsRefused(t *testing.T) {
	live, err := newManager(t, Options{BuiltIn: []string{"alpha"}}).Manifest(t.Context(), "alpha")
	if err != nil {
		t.Fatal(err)
	}
	same := newManager(t, Options{BuiltIn: []string{"alpha"},
		Describe: func(context.Context, string) (*lifecyclev1.Manifest, error) { return proto.CloneOf(live), nil }})
	if _, err := same.Plan(t.Context(), "alpha", req("ok")); err != nil {
		t.Fatalf("matching built-in refused: %v", err)
	}
	other := proto.CloneOf(live)
	other.Version = "v9.9.9"
	skewed := newManager(t, Options{BuiltIn: []string{"alpha"},
		Describe: func(context.Context, string) (*lifecyclev1.Manifest, error) { return proto.CloneOf(other), nil }})
	_, err = skewed.Plan(t.Context(), "alpha", req("ok"))
	if !errors.Is(err, ErrBuiltInMismatch) || !strings.Contains(err.Error(), "install talosbot and talosbot-plugins from the same build") {
		t.Fatalf("skewed built-in: err = %v", err)
	}
}

// TestBuiltInChecksum: the built-ins' binary is verified like an external
// plugin. A wrapper in its place is never run (so it sees no request and no
// credentials), and without a recorded sum nothing is started at all.
func TestBuiltInChecksum(t *testing.T) {
	dir := t.TempDir()
	ran := filepath.Join(dir, "wrapper-ran")
	wrapper := filepath.Join(dir, "talosbot-plugins")
	if err := os.WriteFile(wrapper, []byte("#!/bin/sh\ntouch "+ran+"\nexec "+testPluginPath+" \"$@\"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	want, got := sha256File(t, testPluginPath), sha256File(t, wrapper)
	m := newManager(t, Options{Executable: wrapper, ExecutableSHA256: want, BuiltIn: []string{"alpha"}})
	_, err := m.Plan(t.Context(), "alpha", req("ok"))
	if !errors.Is(err, ErrChecksumMismatch) || !strings.Contains(err.Error(), "expected sha256 "+want+", got "+got) ||
		!strings.Contains(err.Error(), "install talosbot and talosbot-plugins from the same build") {
		t.Fatalf("wrapper as the built-ins: %v", err)
	}
	unknown := newManager(t, Options{Executable: testPluginPath, ExecutableSHA256: " ", BuiltIn: []string{"alpha"}})
	if _, err := unknown.Plan(t.Context(), "alpha", req("ok")); !errors.Is(err, ErrChecksumMismatch) || !strings.Contains(err.Error(), "make build") {
		t.Fatalf("no recorded sum: %v", err)
	}
	if _, err := os.Stat(ran); !os.IsNotExist(err) {
		t.Fatalf("the wrapper ran (%v)", err)
	}
	if _, err := New(Options{Executable: wrapper, ExecutableSHA256: "skip", BuiltIn: []string{"alpha"}}); err == nil {
		t.Fatal("New took a sha256 that is not one")
	}
}

// TestHungStartHoldsNothing: an external plugin that starts a child
// inheriting its stderr and then hangs before the handshake
// (testdata/hangplugin) delays only the calls to it. Another plugin answers
// meanwhile, Close returns (it used to wait on the plugin's lock, held by the
// start for StartTimeout and then for good by go-plugin's Kill, which waits
// for the pipe the child holds), and the plugin and its child are killed.
func TestHungStartHoldsNothing(t *testing.T) {
	dir := t.TempDir()
	hang := filepath.Join(dir, "hangplugin")
	build := exec.Command(goTool(), "build", "-o", hang, "./testdata/hangplugin")
	if b, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building testdata/hangplugin: %v\n%s", err, b)
	}
	marker := filepath.Join(dir, "marker")
	if err := os.WriteFile(marker, []byte("hang at start"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("HANG_MARKER", marker)
	m := newManager(t, Options{BuiltIn: []string{"alpha"}, External: []External{{Name: "hang", Path: hang, SHA256: sha256File(t, hang)}},
		PassEnv: []string{"HANG_MARKER"}, CallTimeout: time.Hour})

	planned := make(chan error, 1)
	go func() {
		_, err := m.Plan(context.Background(), "hang", req("ok"))
		planned <- err
	}()
	var pluginPID, childPID int
	waitFor(t, "the plugin to start its child and hang", 30*time.Second, func() bool {
		raw, err := os.ReadFile(marker + ".pids")
		if err != nil {
			return false
		}
		_, err = fmt.Sscan(string(raw), &pluginPID, &childPID)
		return err == nil
	})
	if _, err := m.Plan(t.Context(), "alpha", req("ok")); err != nil {
		t.Fatalf("another plugin while one hangs: %v", err)
	}
	// A caller's ctx bounds its wait for the hung start.
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := m.Plan(ctx, "hang", req("ok")); !errors.Is(err, context.Canceled) {
		t.Fatalf("a cancelled call to the hung plugin: %v", err)
	}

	closed := make(chan struct{})
	go func() { m.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(30 * time.Second): // Close is bounded far below this
		t.Fatal("Close did not return while a plugin hung in its start")
	}
	select {
	case err := <-planned:
		if !errors.Is(err, ErrClosed) {
			t.Fatalf("the call waiting for the hung start: %v, want ErrClosed", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the call waiting for the hung start did not fail on Close")
	}
	waitFor(t, "the plugin and its child to be gone", 30*time.Second, func() bool {
		return !alive(pluginPID) && !alive(childPID)
	})
}

// alive reports whether pid runs (a zombie counts as dead).
func alive(pid int) bool {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	s := string(raw)
	fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	return len(fields) > 0 && fields[0] != "Z"
}

// TestSwapAfterTheCheckDoesNotRun: a wrapper renamed over the plugin's path
// between the checksum check and the exec (the attacker's swap, here at the
// exact point through afterVerify) is never what runs: the host executes the
// file it verified, through the descriptor it hashed. Executed by its path,
// the launch would read the wrapper (go-plugin's own check then refuses it,
// or, in the window after that check, runs it). The rename unlinks the
// verified file, which changes its ctime, so the launch may also be refused
// as a file changed during the launch (verified.go); either way the wrapper
// never runs.
func TestSwapAfterTheCheckDoesNotRun(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "talosbot-plugins")
	b, err := os.ReadFile(testPluginPath)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o700); err != nil {
		t.Fatal(err)
	}
	ran := filepath.Join(dir, "wrapper-ran")
	wrapper := filepath.Join(dir, "wrapper")
	if err := os.WriteFile(wrapper, []byte("#!/bin/sh\ntouch "+ran+"\nexec "+testPluginPath+" \"$@\"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	m := newManager(t, Options{Executable: path, ExecutableSHA256: sha256File(t, path), BuiltIn: []string{"alpha"}})
	swapped := false
	m.afterVerify = func(p string) {
		if !swapped {
			swapped = true
			if err := os.Rename(wrapper, p); err != nil {
				t.Error(err)
			}
		}
	}
	if _, err := m.Plan(t.Context(), "alpha", req("ok")); err != nil && !errors.Is(err, ErrChecksumMismatch) {
		t.Fatalf("the verified binary did not run after the swap, nor was the launch refused: %v", err)
	}
	if !swapped {
		t.Fatal("the swap never happened")
	}
	if _, err := os.Stat(ran); !os.IsNotExist(err) {
		t.Fatalf("the wrapper ran (%v)", err)
	}
}
