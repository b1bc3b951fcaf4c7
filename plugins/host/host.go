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
//   - Checksums. Before a launch of a plugin the host hashes the executable,
//     through the descriptor it then executes, and refuses to start it if
//     the sha256 differs from the expected one; a write to the file between
//     the check and the plugin's start refuses the launch too. A file once
//     verified is not hashed again by the same Manager while the kernel's
//     view of it (inode, size, mtime, ctime) stays the same: restarts and
//     the other built-ins of the same binary skip the hash (verified.go says
//     why that is sound). For an external plugin the sum comes from the config;
//     for the built-ins it is the sum of talosbot-plugins recorded when the
//     bot was built (Options.ExecutableSHA256): a wrapper or another build
//     put in its place is never run, so it never sees a request or its
//     credentials. In addition each started built-in must describe itself
//     exactly as the bot's catalogue says (Options.Describe).
//   - Crash and restart. When a process exits on its own, every call in
//     flight on it fails promptly with "plugin "x" exited during run: …"
//     (or during plan/describe). Describe and Plan have no side effects and
//     are retried once on a fresh process; Run is never retried. The next use
//     starts a fresh process and calls Options.OnRestart.
//   - Timeouts and cancellation. Starting a process is bounded by
//     CallTimeout (go-plugin's StartTimeout), Describe and Plan by
//     CallTimeout including the wait for a start, Run by RunTimeout (a
//     request cannot extend it). Cancelling the caller's ctx, or a timeout,
//     cancels the gRPC stream, which cancels the plugin's ctx; the host
//     returns at once even if the plugin ignores it.
//   - Nothing waits on a plugin under a lock. A start runs in the background
//     and callers wait for it with their own ctx; a hung plugin delays only
//     the calls to that plugin.
//   - Process groups. Each plugin leads its own process group, and a kill
//     (graceful shutdown, then SIGKILL to the whole group) also ends what the
//     plugin started; a child holding the plugin's stderr open cannot keep the
//     kill waiting. Kills are bounded: Close returns within closeWait
//     whatever the plugins do.
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
	"syscall"
	"time"

	"github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/talosbot/talosbot/plugins/sdk"
	lifecyclev1 "github.com/talosbot/talosbot/plugins/sdk/proto/lifecycle/v1"
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

// Kill timing. go-plugin's Kill asks the plugin to shut down and waits two
// seconds before it sends SIGKILL, then waits for the process's pipes to
// close; killGrace leaves it that graceful shutdown, after which the whole
// process group gets SIGKILL (what go-plugin kills is the plugin alone, and a
// child of it holding the stderr pipe would keep Kill waiting for good).
// killWait bounds the wait after that; a process that outlives it (one that
// left its process group, or is stuck in the kernel) is reported and given
// up on. closeWait bounds Close as a whole, so that `serve` exits in bounded
// time whatever a plugin does.
const (
	killGrace = 2500 * time.Millisecond
	killWait  = 2 * time.Second
	closeWait = killGrace + killWait + time.Second
)

// Errors callers can test with errors.Is.
var (
	// ErrPluginExited: the plugin process exited while the call was in flight.
	ErrPluginExited = errors.New("plugin process exited")
	// ErrChecksumMismatch: a plugin's executable is not the expected one (the
	// configured sum for an external plugin, the recorded one for the built-ins).
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
	// ExecutableSHA256 is the hex sha256 Executable must have (recorded when
	// the bot was built). A built-in is never started without it: New
	// accepts an empty value (so that `config check`, which starts no
	// built-in, works with any build), but the first start then fails.
	ExecutableSHA256 string
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
	bg      sync.WaitGroup // starts, and kills of discarded processes

	// verified remembers the executables already hashed (verified.go).
	verified verifiedFiles
	// hostCert is the client certificate of the plugin connections (tls.go).
	hostCert hostCert
	// hashes counts the executables hashed for a launch (tests).
	hashes atomic.Int64

	// afterVerify, when set (tests), runs between the checksum check and the
	// exec, where an attacker would swap the file.
	afterVerify func(path string)
}

// managed is one configured plugin and its current process, if any.
type managed struct {
	name   string
	path   string
	args   []string
	sha256 string // lower-case hex; empty for built-ins

	builtIn bool

	// mu guards everything below. It is never held across a start, a call
	// or a kill, which can all take long: Close and the calls to other
	// plugins must not wait behind a plugin that hangs.
	mu       sync.Mutex
	cur      *instance
	starting *startAttempt // the start in progress, if any
	lost     bool          // the previous process exited unexpectedly or was discarded
	manifest *lifecyclev1.Manifest
}

// startAttempt is one start of a plugin process, shared by every caller that
// needs the process while it starts. done is closed once inst or err is set.
type startAttempt struct {
	done  chan struct{}
	abort context.CancelFunc // kills the process (group) being started
	inst  *instance
	err   error
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
	// abort cancels the ctx of cmd: exec then kills the process group
	// (cmd.Cancel), even while go-plugin still holds the process.
	abort context.CancelFunc
	log   *slog.Logger
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
	m := &Manager{opts: opts, log: log, plugins: map[string]*managed{}, verified: verifiedFiles{settle: settleTime}}

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
	builtInSum := strings.ToLower(strings.TrimSpace(opts.ExecutableSHA256))
	if b, err := hex.DecodeString(builtInSum); builtInSum != "" && (err != nil || len(b) != sha256.Size) {
		return nil, fmt.Errorf("plugins: Options.ExecutableSHA256 %q is not a 64-character hex sha256", opts.ExecutableSHA256)
	}
	for _, name := range opts.BuiltIn {
		if err := add(&managed{name: name, path: opts.Executable, args: []string{"plugin", name}, sha256: builtInSum, builtIn: true}); err != nil {
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
		if !p.builtIn {
			errs = append(errs, verifyFile(p))
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
	if p.builtIn && m.opts.Describe != nil {
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
	tctx, cancelTimeout := context.WithTimeout(ctx, m.opts.RunTimeout)
	defer cancelTimeout()
	inst, err := m.acquire(tctx, p)
	if err != nil {
		return nil, err
	}
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

// Close kills all plugin processes, those being started included, and makes
// every later call fail with ErrClosed. Calls in flight fail. It returns
// within closeWait whatever the plugins do (a process that would not die is
// logged). Safe to call more than once.
func (m *Manager) Close() {
	m.closed.Store(true)
	var wg sync.WaitGroup
	for _, p := range m.plugins {
		p.mu.Lock()
		inst := p.cur
		p.cur = nil
		if p.starting != nil {
			// The start fails at once; its goroutine (in bg) cleans up.
			p.starting.abort()
		}
		p.mu.Unlock()
		if inst != nil {
			wg.Go(inst.kill)
		}
	}
	// After this barrier no goroutine joins bg: goBG sees closed.
	m.bgMu.Lock()
	//lint:ignore SA2001 the empty critical section is the barrier
	m.bgMu.Unlock()
	wg.Go(m.bg.Wait)
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	t := time.NewTimer(closeWait)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
		m.log.Warn("plugin processes did not stop in time; giving up on them", "waited", closeWait)
	}
}

// goBG runs f in the background unless the Manager is closed; Close waits
// for it. It reports whether f was started.
func (m *Manager) goBG(f func()) bool {
	m.bgMu.Lock()
	defer m.bgMu.Unlock()
	if m.closed.Load() {
		return false
	}
	m.bg.Go(f)
	return true
}

func (m *Manager) lookup(name string) (*managed, error) {
	p, ok := m.plugins[name]
	if !ok {
		return nil, fmt.Errorf("%w %q; configured plugins: %s", ErrUnknownPlugin, name, strings.Join(m.names, ", "))
	}
	return p, nil
}

// acquire returns p's live process, starting one if needed. The start runs
// in the background, shared by all callers that need the process meanwhile;
// each waits for it only as long as its own ctx allows.
func (m *Manager) acquire(ctx context.Context, p *managed) (*instance, error) {
	p.mu.Lock()
	if m.closed.Load() {
		p.mu.Unlock()
		return nil, fmt.Errorf("plugin %q: %w", p.name, ErrClosed)
	}
	if p.cur != nil && p.cur.exited.Err() == nil {
		inst := p.cur
		p.mu.Unlock()
		return inst, nil
	}
	var gone *instance
	if p.cur != nil {
		gone = p.cur
		p.cur = nil
		p.lost = true
	}
	a := p.starting
	if a == nil {
		pctx, abort := context.WithCancel(context.Background())
		a = &startAttempt{done: make(chan struct{}), abort: abort}
		if !m.goBG(func() { m.runStart(pctx, p, a) }) {
			abort()
			p.mu.Unlock()
			return nil, fmt.Errorf("plugin %q: %w", p.name, ErrClosed)
		}
		p.starting = a
	}
	p.mu.Unlock()
	if gone != nil {
		// Exited already: this only releases go-plugin's goroutines and
		// sockets (the exit hook in start killed its group). Not inst.kill:
		// that would mark the exit as intended and could suppress the
		// unexpected-exit warning.
		if !m.goBG(gone.client.Kill) {
			gone.client.Kill()
		}
	}
	select {
	case <-a.done:
		return a.inst, a.err
	case <-ctx.Done():
		return nil, fmt.Errorf("plugin %q: gave up waiting for the plugin process to start: %w", p.name, context.Cause(ctx))
	}
}

// runStart starts a process for p and publishes it (or the error) to a and,
// unless the Manager was closed meanwhile, as p's current process.
func (m *Manager) runStart(ctx context.Context, p *managed, a *startAttempt) {
	inst, err := m.start(ctx, p, a.abort)
	restarted := false
	p.mu.Lock()
	p.starting = nil
	if err == nil && m.closed.Load() {
		err = fmt.Errorf("plugin %q: %w", p.name, ErrClosed)
	} else if err == nil {
		p.cur = inst
		restarted, p.lost = p.lost, false
	}
	a.err = err
	if err == nil {
		a.inst = inst
	}
	p.mu.Unlock()
	close(a.done)
	if err != nil && inst != nil {
		inst.kill() // started, but Close came first
		return
	}
	if restarted {
		m.log.Info("plugin restarted after an unexpected exit", "plugin", p.name, "pid", inst.pid)
		if m.opts.OnRestart != nil {
			m.opts.OnRestart(p.name)
		}
	}
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
	// Close waits for these kills. Once closed, Close has taken or will take
	// the current process; a discarded one is killed here.
	if !m.goBG(inst.kill) {
		inst.kill()
	}
}

// start launches one process for p, verified against p's sha256. ctx is the
// process's: cancelling it (abort) kills the process group, which also ends
// a start that waits on the plugin.
func (m *Manager) start(ctx context.Context, p *managed, abort context.CancelFunc) (*instance, error) {
	if p.sha256 == "" {
		// Only a built-in can lack a sum (New requires one for externals).
		abort()
		return nil, fmt.Errorf("plugin %q (%s): %w: the sha256 of talosbot-plugins is unknown, so it is not started; build talosbot with make build, which records it", p.name, p.path, ErrChecksumMismatch)
	}
	// The executable is opened once, verified through that descriptor, and
	// executed through it (execPath): the check and the exec see the same
	// file, so renaming another file over p.path after the check (the
	// attacker's swap) cannot change what runs.
	exe, execPath, err := openExecutable(p)
	if err != nil {
		abort()
		return nil, err
	}
	defer func() { _ = exe.Close() }() // the child has exec'd or failed by the time start returns
	// Hashed once per file and Manager (verified.go): a restart, or another
	// built-in of the same binary, finds it remembered.
	id, haveID := statID(exe)
	hashedAt := time.Now()
	remembered := haveID && m.verified.has(id, p.sha256)
	if !remembered {
		m.hashes.Add(1)
		if err := verifyChecksum(p, exe, p.path); err != nil {
			abort()
			return nil, err
		}
	}
	if m.afterVerify != nil {
		m.afterVerify(p.path)
	}
	cmd := exec.CommandContext(ctx, execPath, p.args...)
	if cmd.Err != nil {
		abort()
		return nil, fmt.Errorf("plugin %q (%s): %w; check the plugin path in the config", p.name, p.path, cmd.Err)
	}
	// argv[0] stays the configured path, as the plugin would see it without the descriptor.
	cmd.Args[0] = p.path
	cmd.Env = append([]string(nil), m.env...)
	isolate(cmd)
	// Called by exec when ctx ends while the process runs (and go-plugin has
	// not reaped it yet): the whole group, not only the plugin.
	cmd.Cancel = func() error {
		_ = killProcessGroup(cmd.Process.Pid)
		return cmd.Process.Kill()
	}

	// Where the path is executed (not Linux), SecureConfig checks it again
	// right before exec. On Linux the descriptor just hashed is executed,
	// and the check after the start below covers the whole launch.
	var secure *plugin.SecureConfig
	if !execsVerifiedFile {
		want, _ := hex.DecodeString(p.sha256) // validated in New
		secure = &plugin.SecureConfig{Checksum: want, Hash: sha256.New()}
	}

	tlsConfig, tlsPipe, err := m.launchTLS(cmd)
	if err != nil {
		abort()
		return nil, fmt.Errorf("plugin %q: %w", p.name, err)
	}
	defer func() { _ = tlsPipe.Close() }() // the process has its copy

	log := m.log.With("plugin", p.name)
	client := plugin.NewClient(&plugin.ClientConfig{
		HandshakeConfig: sdk.HandshakeConfig(),
		VersionedPlugins: map[int]plugin.PluginSet{
			sdk.ProtocolVersion: {sdk.PluginName: clientPlugin{}},
		},
		Cmd:              cmd,
		SecureConfig:     secure,
		AllowedProtocols: []plugin.Protocol{plugin.ProtocolGRPC},
		TLSConfig:        tlsConfig, // mTLS with keys the host makes (tls.go)
		// A fixed window turns off gRPC's bandwidth-delay estimator and its
		// PING per call (plugins/sdk sets the same on the plugin's side).
		// Retries are the host's to decide (unary, callError): gRPC's own
		// would only buffer every request for a replay that never helps on
		// a unix socket to one process.
		GRPCDialOptions: []grpc.DialOption{
			grpc.WithInitialWindowSize(sdk.WindowSize),
			grpc.WithInitialConnWindowSize(sdk.WindowSize),
			grpc.WithDisableRetry(),
		},
		SkipHostEnv:  true,
		StartTimeout: m.opts.CallTimeout,
		Logger:       newHCLogger(log),
		SyncStdout:   newLineLogger(log, "stdout"),
		SyncStderr:   newLineLogger(log, "stderr"),
	})
	// fail kills what was started (the process group first, so that
	// go-plugin's Kill does not wait on pipes a child holds) and returns err.
	fail := func(err error) (*instance, error) {
		abort()
		pid := 0
		if cmd.Process != nil { // set by client.Client, in this goroutine
			pid = cmd.Process.Pid
		}
		(&instance{client: client, pid: pid, abort: abort, log: log}).kill()
		return nil, err
	}
	began := time.Now()
	rpcClient, err := client.Client()
	if err != nil {
		if errors.Is(err, plugin.ErrChecksumsDoNotMatch) {
			return fail(fmt.Errorf("plugin %q (%s): %w: the executable changed while it was being launched; check who writes to it", p.name, p.path, ErrChecksumMismatch))
		}
		if ctx.Err() != nil {
			return fail(fmt.Errorf("plugin %q (%s): start aborted: %w", p.name, p.path, ErrClosed))
		}
		return fail(fmt.Errorf("plugin %q (%s): start failed: %w", p.name, p.path, err))
	}
	// The plugin runs, and has been sent nothing yet. Any write to the file
	// since it was checked changed its ctime (verified.go): refuse it.
	if haveID {
		if now, ok := statID(exe); !ok || now != id {
			return fail(fmt.Errorf("plugin %q (%s): %w: the executable changed while it was being launched; check who writes to it", p.name, p.path, ErrChecksumMismatch))
		}
		if !remembered {
			m.verified.add(id, p.sha256, hashedAt)
		}
	}
	raw, err := rpcClient.Dispense(sdk.PluginName)
	if err != nil {
		return fail(fmt.Errorf("plugin %q (%s): %w; is it built with plugins/sdk?", p.name, p.path, err))
	}
	d, ok := raw.(*dispensed)
	if !ok {
		return fail(fmt.Errorf("plugin %q: unexpected client type %T", p.name, raw))
	}
	if p.builtIn && m.opts.Describe != nil {
		if err := m.checkBuiltIn(ctx, p, d.rpc); err != nil {
			return fail(err)
		}
	}
	inst := &instance{client: client, cmd: cmd, rpc: d.rpc, conn: d.conn, exited: d.exited, pid: cmd.Process.Pid, abort: abort, log: log}
	log.Debug("plugin ready", "pid", inst.pid, "took", time.Since(began))
	context.AfterFunc(inst.exited, func() {
		// What the plugin started must not outlive it. Right after the reap:
		// while the group has members its pid cannot be reused, and an
		// empty group's pid is not reused this soon.
		_ = killProcessGroup(inst.pid)
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
func (m *Manager) checkBuiltIn(ctx context.Context, p *managed, rpc lifecyclev1.LifecycleClient) error {
	ctx, cancel := context.WithTimeout(ctx, m.opts.CallTimeout)
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

// kill ends the process: go-plugin's graceful shutdown, then SIGKILL to the
// whole process group, and waits for it, but not beyond killGrace+killWait.
func (i *instance) kill() {
	i.stopping.Store(true)
	done := make(chan struct{})
	go func() {
		defer close(done)
		i.client.Kill()
	}()
	t := time.NewTimer(killGrace)
	defer t.Stop()
	select {
	case <-done:
		// The plugin was reaped; the exit hook in start has killed what it
		// left in its group. abort is a no-op for a reaped process.
		i.abort()
		return
	case <-t.C:
	}
	// Kill is stuck: the plugin ignored the shutdown, or it is gone but a
	// child holds its pipes, which go-plugin drains before it reaps the
	// plugin. Either way the plugin is not reaped, so its pid still names
	// its group.
	i.abort()
	if err := killProcessGroup(i.pid); err != nil {
		i.log.Warn("cannot kill the plugin's process group", "pid", i.pid, "error", err)
	}
	t.Reset(killWait)
	select {
	case <-done:
	case <-t.C:
		i.log.Warn("plugin process did not go away after SIGKILL to its process group; giving up on it", "pid", i.pid)
	}
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
		err := func() error {
			tctx, cancelTimeout := context.WithTimeout(ctx, m.opts.CallTimeout)
			defer cancelTimeout()
			inst, err := m.acquire(tctx, p)
			if err != nil {
				return err
			}
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

// openRegular opens path for reading if it is a regular file. Anything else
// is refused before a byte is read: hashing /dev/zero never ends, and opening
// a FIFO waits for a writer, so either would hang config check and serve's
// start. O_NONBLOCK keeps the open itself from waiting on a FIFO; the Stat of
// the open file then refuses it.
func openRegular(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	st, err := f.Stat()
	if err != nil {
		_ = f.Close()
		return nil, err
	}
	if !st.Mode().IsRegular() {
		_ = f.Close()
		return nil, fmt.Errorf("not a regular file (%s)", fileKind(st.Mode()))
	}
	return f, nil
}

// fileKind names what a non-regular file is, for the refusal.
func fileKind(m os.FileMode) string {
	switch {
	case m&os.ModeNamedPipe != 0:
		return "a FIFO"
	case m&os.ModeDevice != 0:
		return "a device"
	case m.IsDir():
		return "a directory"
	case m&os.ModeSocket != 0:
		return "a socket"
	}
	return "mode " + m.Type().String()
}

// verifyChecksum hashes path and compares it with p's sha256 (lower-case hex).
// verifyFile checks the sha256 of the file at p.path (config check).
func verifyFile(p *managed) error {
	f, err := openRegular(p.path)
	if err != nil {
		return fmt.Errorf("plugin %q (%s): cannot read the executable to verify its checksum: %w", p.name, p.path, err)
	}
	defer func() { _ = f.Close() }()
	return verifyChecksum(p, f, p.path)
}

func verifyChecksum(p *managed, f *os.File, path string) error {
	h := sha256.New()
	if _, err := io.Copy(h, io.NewSectionReader(f, 0, 1<<62)); err != nil {
		return fmt.Errorf("plugin %q (%s): reading the executable: %w", p.name, path, err)
	}
	got := hex.EncodeToString(h.Sum(nil))
	if got != p.sha256 {
		fix := "update plugins[].sha256 in the config or reinstall the plugin"
		if p.builtIn {
			fix = "install talosbot and talosbot-plugins from the same build (make build, the release archive or the image)"
		}
		return fmt.Errorf("plugin %q (%s): %w: expected sha256 %s, got %s; %s",
			p.name, path, ErrChecksumMismatch, p.sha256, got, fix)
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
