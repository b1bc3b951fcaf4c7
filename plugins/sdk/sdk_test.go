package sdk

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"

	lifecyclev1 "github.com/talosbot/talosbot/plugins/sdk/proto/lifecycle/v1"
)

// fakePlugin lets each test choose what Run does.
type fakePlugin struct {
	run  func(ctx context.Context, req *OperationRequest, r Reporter) error
	plan func(ctx context.Context, req *OperationRequest) (*OperationPlan, error)
}

func (f *fakePlugin) Describe(context.Context) (*Manifest, error) {
	return &Manifest{Name: "fake", Commands: []*Command{{Name: "x"}}}, nil
}

func (f *fakePlugin) Plan(ctx context.Context, req *OperationRequest) (*OperationPlan, error) {
	if f.plan == nil {
		return &OperationPlan{}, nil
	}
	return f.plan(ctx, req)
}

func (f *fakePlugin) Run(ctx context.Context, req *OperationRequest, r Reporter) error {
	return f.run(ctx, req, r)
}

// fixedClock returns a clock that advances one second per reading.
func fixedClock() func() time.Time {
	var mu sync.Mutex
	t := time.Unix(1_700_000_000, 0)
	return func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		t = t.Add(time.Second)
		return t
	}
}

// dial serves p through the real gRPC stack over an in-memory listener.
func dial(t *testing.T, p Plugin) lifecyclev1.LifecycleClient {
	t.Helper()
	lis := bufconn.Listen(1 << 20)
	s := grpc.NewServer()
	lifecyclev1.RegisterLifecycleServer(s, newServer(p, fixedClock(), io.Discard))
	go func() { _ = s.Serve(lis) }()
	conn, err := grpc.NewClient("passthrough:///bufnet",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close(); s.Stop() })
	return lifecyclev1.NewLifecycleClient(conn)
}

func collect(t *testing.T, c lifecyclev1.LifecycleClient) []*lifecyclev1.Progress {
	t.Helper()
	stream, err := c.Run(t.Context(), &lifecyclev1.OperationRequest{Command: "x"})
	if err != nil {
		t.Fatal(err)
	}
	var out []*lifecyclev1.Progress
	for {
		p, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatalf("recv: %v", err)
		}
		out = append(out, p)
	}
}

func TestRunFinalResult(t *testing.T) {
	cases := []struct {
		name    string
		run     func(ctx context.Context, req *OperationRequest, r Reporter) error
		want    *lifecyclev1.Result
		nEvents int
	}{
		{
			name: "nil error without result sends ok",
			run: func(_ context.Context, _ *OperationRequest, r Reporter) error {
				return r.StepOK("s1", "")
			},
			want: &lifecyclev1.Result{Ok: true}, nEvents: 2,
		},
		{
			name: "error without result sends failure",
			run: func(_ context.Context, _ *OperationRequest, r Reporter) error {
				_ = r.StepFailed("s1", "bad")
				return errors.New("etcd has no leader")
			},
			want: &lifecyclev1.Result{Ok: false, Error: "etcd has no leader"}, nEvents: 2,
		},
		{
			name: "explicit result wins over returned error",
			run: func(_ context.Context, _ *OperationRequest, r Reporter) error {
				_ = r.Result(&Result{OK: false, Summary: "refused"})
				return errors.New("ignored")
			},
			want: &lifecyclev1.Result{Ok: false, Summary: "refused"}, nEvents: 1,
		},
		{
			name: "panic becomes a failed result",
			run: func(context.Context, *OperationRequest, Reporter) error {
				panic("nil map")
			},
			want: &lifecyclev1.Result{Ok: false, Error: "plugin panicked in Run: nil map"}, nEvents: 1,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			events := collect(t, dial(t, &fakePlugin{run: tc.run}))
			if len(events) != tc.nEvents {
				t.Fatalf("got %d events, want %d: %v", len(events), tc.nEvents, events)
			}
			last := events[len(events)-1].GetResult()
			if last == nil {
				t.Fatalf("last event is not a result: %v", events[len(events)-1])
			}
			if last.GetOk() != tc.want.GetOk() || last.GetError() != tc.want.GetError() || last.GetSummary() != tc.want.GetSummary() {
				t.Fatalf("result = %v, want %v", last, tc.want)
			}
			for i, e := range events {
				if e.GetUnixNano() == 0 {
					t.Fatalf("event %d has no timestamp", i)
				}
				if i > 0 && e.GetUnixNano() <= events[i-1].GetUnixNano() {
					t.Fatalf("timestamps not increasing at %d", i)
				}
			}
		})
	}
}

func TestRunCancellationReachesPlugin(t *testing.T) {
	cancelled := make(chan error, 1)
	p := &fakePlugin{run: func(ctx context.Context, _ *OperationRequest, r Reporter) error {
		if err := r.StepStarted("wait", ""); err != nil {
			return err
		}
		<-ctx.Done()
		cancelled <- ctx.Err()
		return ctx.Err()
	}}
	c := dial(t, p)
	ctx, cancel := context.WithCancel(t.Context())
	stream, err := c.Run(ctx, &lifecyclev1.OperationRequest{Command: "x"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Recv(); err != nil {
		t.Fatal(err)
	}
	cancel()
	select {
	case err := <-cancelled:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("plugin ctx error = %v, want Canceled", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("plugin ctx was not cancelled within 5s of the host cancelling")
	}
}

func TestReporterConcurrentAndOrdered(t *testing.T) {
	const workers, each = 8, 50
	p := &fakePlugin{run: func(_ context.Context, _ *OperationRequest, r Reporter) error {
		var wg sync.WaitGroup
		for w := range workers {
			wg.Go(func() {
				for i := range each {
					if err := r.Log("info", "", fmt.Sprintf("w%d-%d", w, i)); err != nil {
						t.Errorf("log: %v", err)
					}
				}
			})
		}
		wg.Wait()
		return nil
	}}
	events := collect(t, dial(t, p))
	if len(events) != workers*each+1 {
		t.Fatalf("got %d events, want %d", len(events), workers*each+1)
	}
	// Per worker, lines must arrive in the order they were sent.
	next := map[string]int{}
	for _, e := range events[:len(events)-1] {
		var w, i int
		if _, err := fmt.Sscanf(e.GetLog().GetMessage(), "w%d-%d", &w, &i); err != nil {
			t.Fatal(err)
		}
		key := fmt.Sprint(w)
		if next[key] != i {
			t.Fatalf("worker %d: got line %d, want %d", w, i, next[key])
		}
		next[key]++
	}
}

func TestReporterValidation(t *testing.T) {
	errs := make(chan error, 8)
	var leaked Reporter
	p := &fakePlugin{run: func(_ context.Context, _ *OperationRequest, r Reporter) error {
		errs <- r.StepOK("", "no id")
		errs <- r.Step(&StepEvent{StepID: "x"})
		errs <- r.Step(nil)
		errs <- r.Artifact(nil)
		errs <- r.Result(&Result{OK: true})
		errs <- r.Log("info", "", "after result")
		leaked = r
		return nil
	}}
	events := collect(t, dial(t, p))
	close(errs)
	var got []error
	for err := range errs {
		got = append(got, err)
	}
	for i, err := range got {
		if i == 4 {
			if err != nil {
				t.Fatalf("result: %v", err)
			}
			continue
		}
		if err == nil {
			t.Fatalf("report %d: expected an error", i)
		}
	}
	if !strings.Contains(got[5].Error(), "result already sent") {
		t.Fatalf("after-result error = %v", got[5])
	}
	if len(events) != 1 || events[0].GetResult() == nil {
		t.Fatalf("events = %v, want the single result", events)
	}
	if err := leaked.Log("info", "", "late"); err == nil || !strings.Contains(err.Error(), "run has returned") {
		t.Fatalf("report after Run returned: %v", err)
	}
}

func TestPlanErrorsAndPanics(t *testing.T) {
	c := dial(t, &fakePlugin{plan: func(context.Context, *OperationRequest) (*OperationPlan, error) {
		panic("boom")
	}})
	_, err := c.Plan(t.Context(), &lifecyclev1.OperationRequest{Command: "x"})
	if err == nil || !strings.Contains(err.Error(), "plugin panicked in Plan: boom") {
		t.Fatalf("err = %v", err)
	}
	c = dial(t, &fakePlugin{plan: func(context.Context, *OperationRequest) (*OperationPlan, error) {
		return nil, nil
	}})
	if _, err := c.Plan(t.Context(), &lifecyclev1.OperationRequest{Command: "x"}); err == nil || !strings.Contains(err.Error(), "no plan") {
		t.Fatalf("nil plan: err = %v", err)
	}
}

func TestPlanErrorCodeIsNotPassedThrough(t *testing.T) {
	c := dial(t, &fakePlugin{plan: func(context.Context, *OperationRequest) (*OperationPlan, error) {
		return nil, fmt.Errorf("talos: %w", status.Error(codes.Unavailable, "connection refused"))
	}})
	_, err := c.Plan(t.Context(), &lifecyclev1.OperationRequest{Command: "x"})
	st := status.Convert(err)
	if st.Code() != codes.Unknown || st.Message() != "talos: rpc error: code = Unavailable desc = connection refused" {
		t.Fatalf("status = %v %q", st.Code(), st.Message())
	}
}

func TestHandshakeConfigIsFixed(t *testing.T) {
	a := HandshakeConfig()
	a.MagicCookieValue = "changed"
	b := HandshakeConfig()
	if b.MagicCookieValue == "changed" || b.MagicCookieKey != "TALOSBOT_PLUGIN" || b.ProtocolVersion != 1 {
		t.Fatalf("handshake = %+v", b)
	}
}

// TestDroppedReportErrorFailsTheRun: a plugin that ignores a report error
// (here a malformed step) and returns nil must not end in Ok: the reporter
// kept the first error and the run fails with it.
func TestDroppedReportErrorFailsTheRun(t *testing.T) {
	p := &fakePlugin{run: func(_ context.Context, _ *OperationRequest, r Reporter) error {
		_ = r.StepOK("", "no id")         // dropped
		_ = r.StepOK("s1", "later, fine") // a later success does not hide it
		return nil
	}}
	events := collect(t, dial(t, p))
	res := events[len(events)-1].GetResult()
	if res == nil || res.GetOk() || !strings.Contains(res.GetError(), "reporting progress: step event has no StepID") {
		t.Fatalf("result = %v, want the first report error", res)
	}
}

// TestUnknownCommandRefusedBySDK: Serve refuses a command the manifest does
// not declare before the plugin's Plan or Run sees it.
func TestUnknownCommandRefusedBySDK(t *testing.T) {
	called := false
	p := &fakePlugin{
		run: func(context.Context, *OperationRequest, Reporter) error { called = true; return nil },
		plan: func(context.Context, *OperationRequest) (*OperationPlan, error) {
			called = true
			return &OperationPlan{}, nil
		},
	}
	c := dial(t, p)
	_, err := c.Plan(t.Context(), &lifecyclev1.OperationRequest{Command: "upgrade everything"})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), `serves ["x"], not "upgrade everything"`) {
		t.Fatalf("plan: %v", err)
	}
	stream, err := c.Run(t.Context(), &lifecyclev1.OperationRequest{Command: "upgrade everything"})
	if err == nil {
		_, err = stream.Recv()
	}
	if status.Code(err) != codes.InvalidArgument {
		t.Fatalf("run: %v", err)
	}
	if called {
		t.Fatal("the plugin saw an undeclared command")
	}
	if _, err := c.Plan(t.Context(), &lifecyclev1.OperationRequest{Command: "x"}); err != nil {
		t.Fatalf("declared command: %v", err)
	}
}

// TestCredentialsPrintNoSecret: a request printed or logged whole shows
// how long each credential is, never its bytes (the wire message's String
// printed them, and so did the plain struct).
func TestCredentialsPrintNoSecret(t *testing.T) {
	req := OperationRequest{Command: "roll", Credentials: Credentials{Talosconfig: []byte("tc-s3cret"), OffsiteSecretAccessKey: []byte("sk-s3cret")}}
	var logged strings.Builder
	slog.New(slog.NewTextHandler(&logged, nil)).Info("req", "creds", req.Credentials, "req", req)
	for _, out := range []string{fmt.Sprintf("%v", req), fmt.Sprintf("%+v", req), fmt.Sprintf("%#v", req), fmt.Sprintf("%s", req.Credentials), fmt.Sprintf("%x", req.Credentials), logged.String()} {
		if strings.Contains(out, "s3cret") || strings.Contains(out, "115 51 99") || strings.Contains(out, "733363726574") {
			t.Errorf("a credential is printed: %s", out)
		}
		if !strings.Contains(out, "9 bytes") {
			t.Errorf("want the lengths: %s", out)
		}
	}
}
