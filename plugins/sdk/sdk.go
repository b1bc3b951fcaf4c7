// Package sdk is the plugin side of the talosbot lifecycle protocol
// (plugins/sdk/proto/lifecycle/v1).
//
// A plugin is a program whose main calls Serve with an implementation of
// Plugin. Built-in plugins are compiled into the talosbot-plugins binary and
// the host starts them as `talosbot-plugins plugin NAME`; external plugins are separate
// executables that the host verifies by sha256 before every launch.
//
// Lifecycle, as seen from the plugin:
//
//   - The host starts the process lazily, on the first Describe, Plan or Run
//     for that plugin, and reuses it for every later call, concurrently. A
//     plugin must therefore keep no per-call state in globals.
//   - Serve performs the go-plugin handshake (HandshakeConfig, protocol
//     version 1, gRPC, automatic mTLS) and then serves until the host closes
//     it. Running the binary by hand prints a hint and exits.
//   - If the process dies (panic in a goroutine, os.Exit, OOM kill), the host
//     fails the calls in flight with "plugin exited during run" and starts a
//     fresh process on the next use. Runs are idempotent (a step already in
//     effect reports SKIPPED), which is what makes a restart safe.
//   - Cancelling a Run on the host cancels the ctx given to Plugin.Run.
//
// Serve dispatches by command: a Plan or Run whose command is not in the
// manifest is refused before the plugin sees it, so a plugin need not check
// req.Command itself (a plugin with several commands still switches on it).
//
// Run reports through a Reporter. The last event of every run is a Result:
// if Run returns without sending one, Serve sends Result{OK: false,
// Error: err.Error()} for a non-nil error and Result{OK: true} otherwise.
// The reporter keeps the first error any report returned (a broken stream,
// a malformed event): when Run returns nil after a report failed, the run
// fails with that error, so a plugin may ignore report errors safely.
//
// Types: a plugin works on the Go types of this package (Manifest,
// OperationRequest, OperationPlan, Result, StepEvent, ...), which mirror the
// wire messages; Serve's gRPC adapter converts them, so protobuf never
// appears in plugin code.
//
// Secrets: OperationRequest carries credentials. The SDK never logs requests;
// plugins must never write credentials to logs, errors, events or files that
// outlive the run. Anything a plugin writes to stderr ends up in the host log.
//
// Helpers: NewCanonical builds OperationPlan.CanonicalInputs (the bytes of
// the plan digest) deterministically; Refuse/Refusal is the refusal type,
// turned into a refused plan by RefusalPlan and into a refused Result by
// RefusedResult. docs/PLUGINS.md is the author's guide.
//
// Unit tests of plugins use package sdktest, which records events in process
// with the same validation and end-of-run rules.
package sdk

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/debug"
	"slices"
	"sync"
	"time"

	"github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	lifecyclev1 "github.com/talosbot/talosbot/plugins/sdk/proto/lifecycle/v1"
)

// PluginName is the key of the lifecycle plugin in the go-plugin plugin map.
const PluginName = "lifecycle"

// ProtocolVersion is the lifecycle protocol version negotiated by go-plugin.
const ProtocolVersion = 1

// Plugin is implemented by every lifecycle plugin.
type Plugin interface {
	// Describe returns the manifest: the commands this plugin serves.
	Describe(ctx context.Context) (*Manifest, error)
	// Plan computes what Run would do, without side effects. req is never nil.
	Plan(ctx context.Context, req *OperationRequest) (*OperationPlan, error)
	// Run executes the operation, reporting progress through r. ctx is
	// cancelled when the host cancels the run or its timeout expires.
	Run(ctx context.Context, req *OperationRequest, r Reporter) error
}

// HandshakeConfig is the go-plugin handshake shared by host and plugins. It is
// a function so that nobody can change the shared value at run time. The
// cookie is not a security measure; it only stops the binary from serving
// when started by hand.
func HandshakeConfig() plugin.HandshakeConfig {
	return plugin.HandshakeConfig{
		ProtocolVersion:  ProtocolVersion,
		MagicCookieKey:   "TALOSBOT_PLUGIN",
		MagicCookieValue: "5f0c8a4e2b7d4e19a3c6d1f08b92e7a4-talosbot-lifecycle",
	}
}

// Serve serves p over go-plugin (gRPC, protocol version 1) and returns when
// the host closes the plugin. Call it from main.
func Serve(p Plugin) {
	plugin.Serve(&plugin.ServeConfig{
		HandshakeConfig: HandshakeConfig(),
		VersionedPlugins: map[int]plugin.PluginSet{
			ProtocolVersion: {PluginName: &grpcPlugin{impl: p}},
		},
		GRPCServer:  newGRPCServer,
		TLSProvider: hostTLS(), // nil: go-plugin's automatic mTLS (tls.go)
	})
}

// newGRPCServer is go-plugin's server with what makes a call cheaper here:
//   - stream workers: gRPC otherwise starts a goroutine per call, whose stack
//     then grows (copied) on the way into the plugin; a worker keeps its
//     grown stack for the next call;
//   - a fixed flow-control window: at or above 64 KiB gRPC turns off its
//     bandwidth-delay estimator, which otherwise answers received data with
//     an extra PING frame (and the peer with a PING ack) per call. The
//     messages here are small; 1 MiB is what the estimator would grow to.
func newGRPCServer(opts []grpc.ServerOption) *grpc.Server {
	return grpc.NewServer(append(opts,
		grpc.NumStreamWorkers(uint32(runtime.GOMAXPROCS(0))),
		grpc.InitialWindowSize(WindowSize),
		grpc.InitialConnWindowSize(WindowSize),
	)...)
}

// WindowSize is the gRPC flow-control window of the plugin connection, on
// both sides (plugins/host sets the same on its side).
const WindowSize = 1 << 20

// grpcPlugin is the go-plugin glue for the plugin side only.
type grpcPlugin struct {
	plugin.NetRPCUnsupportedPlugin
	impl Plugin
}

func (g *grpcPlugin) GRPCServer(_ *plugin.GRPCBroker, s *grpc.Server) error {
	lifecyclev1.RegisterLifecycleServer(s, newServer(g.impl, time.Now, os.Stderr))
	return nil
}

func (g *grpcPlugin) GRPCClient(context.Context, *plugin.GRPCBroker, *grpc.ClientConn) (any, error) {
	return nil, errors.New("sdk: the plugin side cannot dispense a client; use plugins/host")
}

// server adapts a Plugin to the generated gRPC service: it converts the wire
// messages to the author's Go types and back (convert.go), so a plugin never
// sees protobuf.
type server struct {
	lifecyclev1.UnimplementedLifecycleServer
	impl   Plugin
	now    func() time.Time
	stderr io.Writer // panic stacks; os.Stderr in production

	mu       sync.Mutex
	commands []string // from the first successful Describe
}

func newServer(p Plugin, now func() time.Time, stderr io.Writer) *server {
	return &server{impl: p, now: now, stderr: stderr}
}

// recovered turns a panic in plugin code into an error so one bad call does
// not kill runs in flight on the same process. The stack goes to stderr (the
// host's debug log); it holds code locations, not request contents.
func (s *server) recovered(what string, err *error) {
	if v := recover(); v != nil {
		fmt.Fprintf(s.stderr, "plugin panic in %s: %v\n%s", what, v, debug.Stack())
		*err = fmt.Errorf("plugin panicked in %s: %v", what, v)
	}
}

// plainError hides a plugin error's gRPC status code from the host: plugins
// often wrap errors of Talos or Kubernetes gRPC clients, and a wrapped
// codes.Unavailable ("cluster down") must not look like a broken connection
// to the plugin process. Only the message crosses the boundary.
func plainError(err error) error {
	if err == nil {
		return nil
	}
	return status.Error(codes.Unknown, err.Error())
}

func (s *server) Describe(ctx context.Context, _ *lifecyclev1.DescribeRequest) (m *lifecyclev1.Manifest, err error) {
	defer s.recovered("Describe", &err)
	gm, err := s.impl.Describe(ctx)
	err = plainError(err)
	if err == nil && gm == nil {
		err = status.Error(codes.Internal, "plugin returned no manifest and no error")
	}
	if err != nil {
		return nil, err
	}
	return ManifestToWire(gm), nil
}

// served returns the manifest's command names, asking Describe once.
func (s *server) served(ctx context.Context) (_ []string, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.commands != nil {
		return s.commands, nil
	}
	defer s.recovered("Describe", &err)
	m, err := s.impl.Describe(ctx)
	if err != nil {
		return nil, fmt.Errorf("describe: %w", err)
	}
	s.commands = CommandNames(m)
	return s.commands, nil
}

// CommandNames lists the manifest's command names; m may be nil.
func CommandNames(m *Manifest) []string {
	names := []string{}
	if m == nil {
		return names
	}
	for _, c := range m.Commands {
		if c != nil {
			names = append(names, c.Name)
		}
	}
	return names
}

// CheckCommand refuses a command that names do not include, naming the ones
// served; Serve (and sdktest) apply it before Plan and Run.
func CheckCommand(names []string, command string) error {
	if slices.Contains(names, command) {
		return nil
	}
	return fmt.Errorf("this plugin serves %q, not %q: the host routed a command the manifest does not declare", names, command)
}

func (s *server) check(ctx context.Context, command string) error {
	names, err := s.served(ctx)
	if err != nil {
		return status.Error(codes.Internal, err.Error())
	}
	if err := CheckCommand(names, command); err != nil {
		return status.Error(codes.InvalidArgument, err.Error())
	}
	return nil
}

func (s *server) Plan(ctx context.Context, req *lifecyclev1.OperationRequest) (p *lifecyclev1.OperationPlan, err error) {
	if err := s.check(ctx, req.GetCommand()); err != nil {
		return nil, err
	}
	defer s.recovered("Plan", &err)
	gp, err := s.impl.Plan(ctx, RequestFromWire(req))
	err = plainError(err)
	if err == nil && gp == nil {
		err = status.Error(codes.Internal, "plugin returned no plan and no error")
	}
	if err != nil {
		return nil, err
	}
	return PlanToWire(gp), nil
}

func (s *server) Run(req *lifecyclev1.OperationRequest, stream grpc.ServerStreamingServer[lifecyclev1.Progress]) error {
	ctx := stream.Context()
	if err := s.check(ctx, req.GetCommand()); err != nil {
		return err
	}
	rep := NewEventReporter(func(e *Event) error { return stream.Send(EventToWire(e)) }, s.now)
	runErr := s.run(ctx, RequestFromWire(req), rep)
	if ctx.Err() != nil {
		// The host cancelled or went away: nobody can read a Result any more.
		rep.Close()
		return status.FromContextError(ctx.Err()).Err()
	}
	if err := rep.Finish(runErr); err != nil {
		return status.Errorf(codes.Unavailable, "sending final result: %v", err)
	}
	return nil
}

func (s *server) run(ctx context.Context, req *OperationRequest, rep Reporter) (err error) {
	defer s.recovered("Run", &err)
	return s.impl.Run(ctx, req, rep)
}
