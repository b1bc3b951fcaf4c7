// Package host is the bot side of the talosbot plugin runtime: it launches
// lifecycle plugins as subprocesses (hashicorp/go-plugin, gRPC only, automatic
// mTLS) and calls Describe, Plan and Run on them.
//
// Lifecycle of a plugin process:
//
//   - Catalogue. New receives the built-in plugin names (compiled into the
//     talosbot-plugins binary and launched as `Executable plugin NAME`) and
//     the external plugins from the config (name, path, sha256). Nothing is
//     started by New.
//   - Lazy start. The first call for a plugin starts its process; later calls
//     reuse it, concurrently (each call is its own gRPC stream).
//   - Checksums. Before every launch of an external plugin, including
//     restarts, the host hashes the executable and refuses to start it if the
//     sha256 differs from the configured one; go-plugin's SecureConfig checks
//     it again right before exec. Built-ins are installed with the bot (the
//     same directory, same trust) and are not hashed; instead each started
//     built-in must describe itself exactly as the bot's catalogue says
//     (Options.Describe), which refuses a plugin binary from another build.
//   - Crash and restart. When a process exits on its own, every call in
//     flight on it fails promptly with "plugin "x" exited during run: …"
//     (or during plan/describe). Describe and Plan have no side effects and
//     are retried once on a fresh process; Run is never retried. The next use
//     starts a fresh process and calls Options.OnRestart.
//   - Timeouts and cancellation. Describe and Plan are bounded by
//     CallTimeout, Run by RunTimeout (a request cannot extend it). Cancelling
//     the caller's ctx, or a timeout, cancels the gRPC stream, which cancels
//     the plugin's ctx.
//   - Close kills every plugin process (graceful shutdown, then SIGKILL after
//     two seconds).
//
// Secrets: OperationRequest carries credentials. This package never logs
// requests, and plugin processes get a minimal environment (see Options.PassEnv)
// so that chat tokens in the bot's environment do not reach plugins.
package host

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	lifecyclev1 "github.com/talosbot/talosbot/plugins/proto/lifecycle/v1"
	"github.com/talosbot/talosbot/plugins/sdk"
)

// Defaults for Options.
const (
	DefaultCallTimeout = 60 * time.Second
	DefaultRunTimeout  = 2 * time.Hour
)

// exitGrace bounds how long a failed call waits for the process exit to be
// confirmed (pipes drained, process reaped) before giving up on naming the
// exit as the cause. A crash is normally confirmed within milliseconds.
const exitGrace = 3 * time.Second

// Errors callers can test with errors.Is.
var (
	// ErrPluginExited: the plugin process exited while the call was in flight.
	ErrPluginExited = errors.New("plugin process exited")
	// ErrChecksumMismatch: an external plugin's executable is not the configured one.
	ErrChecksumMismatch = errors.New("checksum mismatch")
	// ErrBuiltInMismatch: a built-in plugin process describes itself
	// differently from the catalogue the bot was built with.
	ErrBuiltInMismatch = errors.New("built-in plugin binary does not match this bot")
	// ErrUnknownPlugin: no plugin with that name is configured.
	ErrUnknownPlugin = errors.New("unknown plugin")
	// ErrClosed: the Manager has been closed.
	ErrClosed = errors.New("plugin manager closed")
)

// ExitError reports that a plugin process exited while a call was in
// flight. errors.Is(err, ErrPluginExited) holds for it.
type ExitError struct {
	Plugin string
	Op     string // "describe", "plan" or "run"
	Status string // how the process ended, e.g. "exit status 3" or "signal: killed"
}

func (e *ExitError) Error() string {
	return fmt.Sprintf("plugin %q exited during %s: %s (a fresh process starts on next use; its stderr is in the debug log)", e.Plugin, e.Op, e.Status)
}

// Is makes errors.Is(err, ErrPluginExited) true.
func (e *ExitError) Is(target error) bool { return target == ErrPluginExited }

// errAborted cancels a run whose progress handler failed.
var errAborted = errors.New("run aborted by the progress handler")

// External is a plugin executable from the config; it is checksum-verified.
type External struct {
	Name   string
	Path   string
	SHA256 string // hex sha256 of the executable
}

// Options configure a Manager.
type Options struct {
	// Executable is the binary of the built-in plugins (talosbot-plugins);
	// built-ins launch as `Executable plugin NAME`.
	Executable string
	// BuiltIn lists the built-in plugin names.
	BuiltIn []string
	// External lists checksum-verified plugin executables.
	External []External
	// CallTimeout bounds Describe and Plan (default 60s).
	CallTimeout time.Duration
	// RunTimeout bounds each Run (default 2h). An OperationRequest cannot override it.
	RunTimeout time.Duration
	// Logger receives plugin stderr and go-plugin's own log at debug level,
	// plus warnings about unexpected exits. Nil discards.
	Logger *slog.Logger
	// OnRestart is called when a plugin process is started because the
	// previous one exited unexpectedly (a metrics hook). Must not block.
	OnRestart func(plugin string)
	// PassEnv names extra environment variables passed to plugin processes
	// (e.g. a Terraform backend's AWS_PROFILE). By default plugins only get
	// PATH, HOME, USER, LOGNAME, TMPDIR, TZ, LANG, LC_ALL, SSL_CERT_FILE,
	// SSL_CERT_DIR, the proxy variables, XDG_CACHE_HOME, XDG_CONFIG_HOME and
	// GOCOVERDIR, so that secrets in the bot's environment stay in the bot.
	PassEnv []string
	// Describe, when set, returns a built-in plugin's manifest without
	// starting its process (from plugins/catalog, generated from the plugins
	// at build time). Processes then start on the first Plan or Run, so an
	// idle bot runs no plugin processes; each started built-in must describe
	// itself exactly so, or it is refused (ErrBuiltInMismatch).
	Describe func(ctx context.Context, name string) (*lifecyclev1.Manifest, error)
}

var defaultEnv = []string{
	"PATH", "HOME", "USER", "LOGNAME", "TMPDIR", "TZ", "LANG", "LC_ALL",
	"SSL_CERT_FILE", "SSL_CERT_DIR",
	"HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "http_proxy", "https_proxy", "no_proxy",
	"XDG_CACHE_HOME", "XDG_CONFIG_HOME", "GOCOVERDIR",
}

// Manager launches, supervises and calls lifecycle plugins. Safe for
// concurrent use.
type Manager struct {
	opts    Options
	log     *slog.Logger
	env     []string
	names   []string
	plugins map[string]*managed
	closed  atomic.Bool
	bgMu    sync.Mutex     // orders bg.Add before Close's bg.Wait
	bg      sync.WaitGroup // kills of discarded processes
}

// managed is one configured plugin and its current process, if any.
type managed struct {
	name   string
	path   string
	args   []string
	sha256 string // lower-case hex; empty for built-ins

	mu       sync.Mutex // guards everything below; held while starting
	cur      *instance
	lost     bool // the previous process exited unexpectedly or was discarded
	manifest *lifecyclev1.Manifest
}

// instance is one running plugin process.
type instance struct {
	client *plugin.Client
	cmd    *exec.Cmd
	rpc    lifecyclev1.LifecycleClient
	conn   *grpc.ClientConn
	// exited is cancelled by go-plugin once the process has exited and been
	// reaped; after that cmd.ProcessState is safe to read.
	exited   context.Context
	pid      int
	stopping atomic.Bool // set before an intentional kill
}

// New validates opts and returns a Manager. No plugin is started.
func New(opts Options) (*Manager, error) {
	if opts.CallTimeout <= 0 {
		opts.CallTimeout = DefaultCallTimeout
	}
	if opts.RunTimeout <= 0 {
		opts.RunTimeout = DefaultRunTimeout
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	m := &Manager{opts: opts, log: log, plugins: map[string]*managed{}}

	add := func(p *managed) error {
		if err := validName(p.name); err != nil {
			return err
		}
		if _, dup := m.plugins[p.name]; dup {
			return fmt.Errorf("plugin %q is configured twice; plugin names must be unique across built-ins and plugins[]", p.name)
		}
		m.plugins[p.name] = p
		m.names = append(m.names, p.name)
		return nil
	}
	if len(opts.BuiltIn) > 0 && opts.Executable == "" {
		return nil, errors.New("plugins: Options.Executable (the talosbot-plugins binary) is required to launch built-in plugins")
	}
	for _, name := range opts.BuiltIn {
		if err := add(&managed{name: name, path: opts.Executable, args: []string{"plugin", name}}); err != nil {
			return nil, err
		}
	}
	for _, e := range opts.External {
		if e.Path == "" {
			return nil, fmt.Errorf("plugin %q: plugins[].path is empty; set it to the plugin executable", e.Name)
		}
		sum := strings.ToLower(strings.TrimSpace(e.SHA256))
		if b, err := hex.DecodeString(sum); err != nil || len(b) != sha256.Size {
			return nil, fmt.Errorf("plugin %q (%s): plugins[].sha256 must be the 64-character hex sha256 of the executable (run: sha256sum %s)", e.Name, e.Path, e.Path)
		}
		if err := add(&managed{name: e.Name, path: e.Path, sha256: sum}); err != nil {
			return nil, err
		}
	}

	for _, k := range append(append([]string(nil), defaultEnv...), opts.PassEnv...) {
		if v, ok := os.LookupEnv(k); ok {
			m.env = append(m.env, k+"="+v)
		}
	}
	return m, nil
}

func validName(name string) error {
	if name == "" || strings.ContainsAny(name, " \t\n/\\") {
		return fmt.Errorf("plugin name %q is invalid: use a single word such as \"healthgate\"", name)
	}
	return nil
}

// Names returns the configured plugin names: built-ins first, then externals,
// each in configuration order.
func (m *Manager) Names() []string {
	return append([]string(nil), m.names...)
}

// Verify checks the sha256 of every external plugin without starting any,
// for `config check`. It returns all mismatches joined.
func (m *Manager) Verify() error {
	var errs []error
	for _, name := range m.names {
		p := m.plugins[name]
		if p.sha256 != "" {
			errs = append(errs, verifyChecksum(p.name, p.path, p.sha256))
		}
	}
	return errors.Join(errs...)
}

// Manifest returns the plugin's manifest, calling Describe (and so starting
// the plugin) only the first time.
func (m *Manager) Manifest(ctx context.Context, name string) (*lifecyclev1.Manifest, error) {
	p, err := m.lookup(name)
	if err != nil {
		return nil, err
	}
	p.mu.Lock()
	cached := p.manifest
	p.mu.Unlock()
	if cached != nil {
		return proto.CloneOf(cached), nil
	}
	var mf *lifecyclev1.Manifest
	if p.sha256 == "" && m.opts.Describe != nil {
		mf, err = m.opts.Describe(ctx, name)
	} else {
		err = m.unary(ctx, p, "describe", func(ctx context.Context, c lifecyclev1.LifecycleClient) error {
			var err error
			mf, err = c.Describe(ctx, &lifecyclev1.DescribeRequest{})
			return err
		})
	}
	if err != nil {
		return nil, err
	}
	p.mu.Lock()
	if p.manifest == nil {
		p.manifest = mf
	}
	mf = p.manifest
	p.mu.Unlock()
	return proto.CloneOf(mf), nil
}

// Manifests returns the manifests of all plugins in Names order, starting
// plugins in parallel. A plugin that fails is left out and its error is
// included in the joined error, so the bot can still serve the others.
func (m *Manager) Manifests(ctx context.Context) ([]*lifecyclev1.Manifest, error) {
	out := make([]*lifecyclev1.Manifest, len(m.names))
	errs := make([]error, len(m.names))
	var wg sync.WaitGroup
	for i, name := range m.names {
		wg.Go(func() { out[i], errs[i] = m.Manifest(ctx, name) })
	}
	wg.Wait()
	ok := out[:0]
	for _, mf := range out {
		if mf != nil {
			ok = append(ok, mf)
		}
	}
	return ok, errors.Join(errs...)
}

// Plan asks the plugin for the plan of req. Plan has no side effects; if the
// process dies during the call it is retried once on a fresh process.
func (m *Manager) Plan(ctx context.Context, name string, req *lifecyclev1.OperationRequest) (*lifecyclev1.OperationPlan, error) {
	p, err := m.lookup(name)
	if err != nil {
		return nil, err
	}
	var plan *lifecyclev1.OperationPlan
	err = m.unary(ctx, p, "plan", func(ctx context.Context, c lifecyclev1.LifecycleClient) error {
		var err error
		plan, err = c.Plan(ctx, req)
		return err
	})
	return plan, err
}

// Run executes req on the plugin, calling onProgress (if non-nil) for every
// event in order, the final Result included, and returns that Result. An
// error means the run's outcome is unknown or it did not complete: the
// plugin exited (ErrPluginExited), ctx was cancelled, RunTimeout expired
// (context.DeadlineExceeded), onProgress failed (the run is cancelled), or the
// plugin broke the protocol. A failed operation is a Result with Ok false,
// not an error. Run is never retried.
func (m *Manager) Run(ctx context.Context, name string, req *lifecyclev1.OperationRequest, onProgress func(*lifecyclev1.Progress) error) (*lifecyclev1.Result, error) {
	p, err := m.lookup(name)
	if err != nil {
		return nil, err
	}
	inst, err := m.acquire(p)
	if err != nil {
		return nil, err
	}
	tctx, cancelTimeout := context.WithTimeout(ctx, m.opts.RunTimeout)
	defer cancelTimeout()
	rctx, cancel := context.WithCancelCause(tctx)
	defer cancel(nil)
	stop := context.AfterFunc(inst.exited, func() { cancel(ErrPluginExited) })
	defer stop()

	stream, err := inst.rpc.Run(rctx, req)
	if err != nil {
		return nil, m.callError(ctx, rctx, p, inst, "run", m.opts.RunTimeout, err)
	}
	var result *lifecyclev1.Result
	for {
		ev, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			if result != nil {
				// The outcome is known; a transport error after it changes nothing.
				m.log.Warn("plugin stream failed after the final result", "plugin", p.name, "error", status.Convert(err).Message())
				return result, nil
			}
			return nil, m.callError(ctx, rctx, p, inst, "run", m.opts.RunTimeout, err)
		}
		if r := ev.GetResult(); r != nil {
			result = r
		}
		if onProgress != nil {
			if err := onProgress(ev); err != nil {
				cancel(errAborted)
				return nil, fmt.Errorf("plugin %q: run cancelled because the progress handler failed: %w", p.name, err)
			}
		}
	}
	if result == nil {
		return nil, fmt.Errorf("plugin %q: run ended without a final result; the plugin is broken (rebuild it with plugins/sdk)", p.name)
	}
	return result, nil
}

// Close kills all plugin processes and makes every later call fail with
// ErrClosed. Calls in flight fail. Safe to call more than once.
func (m *Manager) Close() {
	m.closed.Store(true)
	var wg sync.WaitGroup
	for _, p := range m.plugins {
		p.mu.Lock()
		inst := p.cur
		p.cur = nil
		p.mu.Unlock()
		if inst != nil {
			wg.Go(inst.kill)
		}
	}
	wg.Wait()
	// After this barrier, discard sees closed and kills synchronously.
	m.bgMu.Lock()
	//lint:ignore SA2001 the empty critical section is the barrier
	m.bgMu.Unlock()
	m.bg.Wait()
}

func (m *Manager) lookup(name string) (*managed, error) {
	p, ok := m.plugins[name]
	if !ok {
		return nil, fmt.Errorf("%w %q; configured plugins: %s", ErrUnknownPlugin, name, strings.Join(m.names, ", "))
	}
	return p, nil
}

// acquire returns p's live process, starting one if needed.
func (m *Manager) acquire(p *managed) (*instance, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if m.closed.Load() {
		return nil, fmt.Errorf("plugin %q: %w", p.name, ErrClosed)
	}
	if p.cur != nil && p.cur.exited.Err() == nil {
		return p.cur, nil
	}
	if p.cur != nil {
		// Exited already; Kill only releases go-plugin's goroutines and
		// sockets. Not inst.kill: that would mark the exit as intended and
		// could suppress the unexpected-exit warning.
		p.cur.client.Kill()
		p.cur = nil
		p.lost = true
	}
	inst, err := m.start(p)
	if err != nil {
		return nil, err
	}
	p.cur = inst
	if p.lost {
		p.lost = false
		m.log.Info("plugin restarted after an unexpected exit", "plugin", p.name, "pid", inst.pid)
		if m.opts.OnRestart != nil {
			m.opts.OnRestart(p.name)
		}
	}
	return inst, nil
}

// discard drops inst if it is still p's current process and kills it; used
// when the connection broke but the process did not exit.
func (m *Manager) discard(p *managed, inst *instance) {
	p.mu.Lock()
	if p.cur == inst {
		p.cur = nil
		p.lost = true
	}
	p.mu.Unlock()
	// In the background, so the caller does not wait for a wedged process;
	// Close waits for these kills.
	m.bgMu.Lock()
	defer m.bgMu.Unlock()
	if m.closed.Load() {
		inst.kill()
		return
	}
	m.bg.Go(inst.kill)
}

// start launches one process for p. Called with p.mu held.
func (m *Manager) start(p *managed) (*instance, error) {
	cmd := exec.Command(p.path, p.args...)
	if cmd.Err != nil {
		return nil, fmt.Errorf("plugin %q (%s): %w; check the plugin path in the config", p.name, p.path, cmd.Err)
	}
	cmd.Env = append([]string(nil), m.env...)
	dieWithParent(cmd)

	var secure *plugin.SecureConfig
	if p.sha256 != "" {
		// Our own check first, for an error message that says what to do;
		// SecureConfig repeats it immediately before exec.
		if err := verifyChecksum(p.name, cmd.Path, p.sha256); err != nil {
			return nil, err
		}
		want, _ := hex.DecodeString(p.sha256) // validated in New
		secure = &plugin.SecureConfig{Checksum: want, Hash: sha256.New()}
	}

	log := m.log.With("plugin", p.name)
	client := plugin.NewClient(&plugin.ClientConfig{
		HandshakeConfig: sdk.HandshakeConfig(),
		VersionedPlugins: map[int]plugin.PluginSet{
			sdk.ProtocolVersion: {sdk.PluginName: clientPlugin{}},
		},
		Cmd:              cmd,
		SecureConfig:     secure,
		AllowedProtocols: []plugin.Protocol{plugin.ProtocolGRPC},
		AutoMTLS:         true,
		SkipHostEnv:      true,
		StartTimeout:     m.opts.CallTimeout,
		Logger:           newHCLogger(log),
		SyncStdout:       newLineLogger(log, "stdout"),
		SyncStderr:       newLineLogger(log, "stderr"),
	})
	began := time.Now()
	rpcClient, err := client.Client()
	if err != nil {
		client.Kill()
		if errors.Is(err, plugin.ErrChecksumsDoNotMatch) {
			return nil, fmt.Errorf("plugin %q (%s): %w: the executable changed while it was being launched; check who writes to it", p.name, cmd.Path, ErrChecksumMismatch)
		}
		return nil, fmt.Errorf("plugin %q (%s): start failed: %w", p.name, cmd.Path, err)
	}
	raw, err := rpcClient.Dispense(sdk.PluginName)
	if err != nil {
		client.Kill()
		return nil, fmt.Errorf("plugin %q (%s): %w; is it built with plugins/sdk?", p.name, cmd.Path, err)
	}
	d, ok := raw.(*dispensed)
	if !ok {
		client.Kill()
		return nil, fmt.Errorf("plugin %q: unexpected client type %T", p.name, raw)
	}
	if p.sha256 == "" && m.opts.Describe != nil {
		if err := m.checkBuiltIn(p, d.rpc); err != nil {
			client.Kill()
			return nil, err
		}
	}
	inst := &instance{client: client, cmd: cmd, rpc: d.rpc, conn: d.conn, exited: d.exited, pid: cmd.Process.Pid}
	log.Debug("plugin ready", "pid", inst.pid, "took", time.Since(began))
	context.AfterFunc(inst.exited, func() {
		if !inst.stopping.Load() {
			log.Warn("plugin process exited unexpectedly; it will be restarted on next use",
				"pid", inst.pid, "status", inst.exitStatus())
		}
	})
	return inst, nil
}

// checkBuiltIn compares a freshly started built-in's own manifest with the
// one the bot built its grammar and policy from (Options.Describe). They
// differ only when the plugin binary comes from another build, and then the
// bot's idea of a command (read-only or disruptive, its arguments) may be
// wrong, so the process is refused rather than used.
func (m *Manager) checkBuiltIn(p *managed, rpc lifecyclev1.LifecycleClient) error {
	ctx, cancel := context.WithTimeout(context.Background(), m.opts.CallTimeout)
	defer cancel()
	want, err := m.opts.Describe(ctx, p.name)
	if err != nil {
		return fmt.Errorf("plugin %q: %w", p.name, err)
	}
	got, err := rpc.Describe(ctx, &lifecyclev1.DescribeRequest{})
	if err != nil {
		return fmt.Errorf("plugin %q (%s): describe after start: %s", p.name, p.path, status.Convert(err).Message())
	}
	if !proto.Equal(got, want) {
		return fmt.Errorf("plugin %q (%s): %w: its manifest (version %q) differs from the one this bot was built with (version %q); install talosbot and talosbot-plugins from the same build", p.name, p.path, ErrBuiltInMismatch, got.GetVersion(), want.GetVersion())
	}
	return nil
}

// kill ends the process (graceful, then SIGKILL) and waits for it.
func (i *instance) kill() {
	i.stopping.Store(true)
	i.client.Kill()
}

// healthy reports whether the connection to the process still answers the
// go-plugin health check. It separates a broken connection from a plugin
// that merely returned an error with codes.Unavailable (plugins/sdk hides
// plugin error codes, but a plugin built otherwise might not).
func (i *instance) healthy() bool {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_, err := grpc_health_v1.NewHealthClient(i.conn).Check(ctx, &grpc_health_v1.HealthCheckRequest{Service: plugin.GRPCServiceName})
	return err == nil
}

// exitStatus describes how the process ended, e.g. "exit status 3" or
// "signal: killed". Only meaningful once exited is done.
func (i *instance) exitStatus() string {
	if i.exited.Err() == nil || i.cmd.ProcessState == nil {
		return "process exited"
	}
	return i.cmd.ProcessState.String()
}

// unary runs one Describe or Plan call with CallTimeout, retrying once on a
// fresh process if the process died under it (both calls are side-effect free).
func (m *Manager) unary(ctx context.Context, p *managed, op string, call func(context.Context, lifecyclev1.LifecycleClient) error) error {
	for attempt := 0; ; attempt++ {
		inst, err := m.acquire(p)
		if err != nil {
			return err
		}
		err = func() error {
			tctx, cancelTimeout := context.WithTimeout(ctx, m.opts.CallTimeout)
			defer cancelTimeout()
			cctx, cancel := context.WithCancelCause(tctx)
			defer cancel(nil)
			stop := context.AfterFunc(inst.exited, func() { cancel(ErrPluginExited) })
			defer stop()
			if err := call(cctx, inst.rpc); err != nil {
				return m.callError(ctx, cctx, p, inst, op, m.opts.CallTimeout, err)
			}
			return nil
		}()
		if attempt == 0 && errors.Is(err, ErrPluginExited) && !m.closed.Load() {
			m.log.Warn("plugin exited during a side-effect-free call; retrying once on a fresh process", "plugin", p.name, "call", op)
			continue
		}
		return err
	}
}

// callError turns a failed gRPC call into an error that names the plugin and
// the cause. parent is the caller's ctx, callCtx the call's own.
func (m *Manager) callError(parent, callCtx context.Context, p *managed, inst *instance, op string, timeout time.Duration, err error) error {
	code := status.Code(err)
	switch {
	case m.closed.Load():
		return fmt.Errorf("plugin %q: %s interrupted: %w", p.name, op, ErrClosed)
	case errors.Is(context.Cause(callCtx), ErrPluginExited) || (code == codes.Unavailable && !inst.healthy()):
		select {
		case <-inst.exited.Done():
			return &ExitError{Plugin: p.name, Op: op, Status: inst.exitStatus()}
		case <-time.After(exitGrace):
		}
		// The connection broke but the process lives on: replace it.
		m.discard(p, inst)
		return fmt.Errorf("plugin %q: %s: lost the connection to the plugin (%s); the process was killed and will be restarted on next use", p.name, op, status.Convert(err).Message())
	case parent.Err() != nil:
		return fmt.Errorf("plugin %q: %s cancelled: %w", p.name, op, parent.Err())
	case deadlinePassed(parent):
		return fmt.Errorf("plugin %q: %s cancelled: %w", p.name, op, context.DeadlineExceeded)
	case errors.Is(callCtx.Err(), context.DeadlineExceeded) || deadlinePassed(callCtx):
		return fmt.Errorf("plugin %q: %s timed out after %s and was cancelled: %w", p.name, op, timeout, context.DeadlineExceeded)
	}
	return fmt.Errorf("plugin %q: %s: %s", p.name, op, status.Convert(err).Message())
}

// deadlinePassed reports whether ctx's deadline is reached even if its timer
// has not fired yet: gRPC propagates the deadline, and the plugin's copy can
// end the stream (RST_STREAM CANCEL) before the host's own timer runs.
func deadlinePassed(ctx context.Context) bool {
	d, ok := ctx.Deadline()
	return ok && !time.Now().Before(d)
}

// verifyChecksum hashes path and compares it with want (lower-case hex).
func verifyChecksum(name, path, want string) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("plugin %q (%s): cannot read the executable to verify its checksum: %w", name, path, err)
	}
	defer func() { _ = f.Close() }()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return fmt.Errorf("plugin %q (%s): reading the executable: %w", name, path, err)
	}
	got := hex.EncodeToString(h.Sum(nil))
	if got != want {
		return fmt.Errorf("plugin %q (%s): %w: expected sha256 %s, got %s; update plugins[].sha256 in the config or reinstall the plugin",
			name, path, ErrChecksumMismatch, want, got)
	}
	return nil
}

// clientPlugin is the go-plugin glue for the host side.
type clientPlugin struct {
	plugin.NetRPCUnsupportedPlugin
}

// dispensed carries the gRPC client and go-plugin's exit signal: the ctx
// given to GRPCClient is cancelled when the process exits.
type dispensed struct {
	rpc    lifecyclev1.LifecycleClient
	conn   *grpc.ClientConn
	exited context.Context
}

func (clientPlugin) GRPCServer(*plugin.GRPCBroker, *grpc.Server) error {
	return errors.New("the host does not serve plugins")
}

func (clientPlugin) GRPCClient(ctx context.Context, _ *plugin.GRPCBroker, c *grpc.ClientConn) (any, error) {
	return &dispensed{rpc: lifecyclev1.NewLifecycleClient(c), conn: c, exited: ctx}, nil
}
