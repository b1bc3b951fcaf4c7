// Command testplugin is a lifecycle plugin for the host tests. Started as
// `testplugin plugin NAME` it plays the built-in NAME; started without
// arguments it is an external plugin named "testplugin". What Plan and Run do
// is chosen by OperationRequest.args["mode"].
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sort"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/talosbot/talosbot/plugins/sdk"
)

type testPlugin struct{ name string }

func main() {
	name := "testplugin"
	if len(os.Args) == 3 && os.Args[1] == "plugin" {
		name = os.Args[2]
	}
	sdk.Serve(&testPlugin{name: name})
}

func (p *testPlugin) Describe(context.Context) (*sdk.Manifest, error) {
	return &sdk.Manifest{
		Name:    p.name,
		Version: "0.0.1-test",
		Commands: []*sdk.Command{{
			Name: "test", Summary: "test command", Effect: sdk.EffectReadOnly,
		}},
	}, nil
}

// Plan modes: "" / "ok" (a plan whose canonical inputs are the sorted
// args), "noop" (an empty plan), "plan-error", "plan-unavailable", "crash-once" (exit the first time, recorded by
// args["marker"]), "env" (a plan whose warnings are the names of the
// environment variables the process got, sorted).
func (p *testPlugin) Plan(_ context.Context, req *sdk.OperationRequest) (*sdk.OperationPlan, error) {
	args := req.Args
	switch args["mode"] {
	case "env":
		var names []string
		for _, kv := range os.Environ() {
			k, _, _ := strings.Cut(kv, "=")
			names = append(names, k)
		}
		sort.Strings(names)
		return &sdk.OperationPlan{Summary: "env", Warnings: names}, nil
	case "noop":
		return &sdk.OperationPlan{}, nil
	case "plan-unavailable":
		// What a Talos client returns while the cluster is down.
		return nil, fmt.Errorf("talos: %w", status.Error(codes.Unavailable, "connection refused"))
	case "plan-error":
		return nil, errors.New("refused by rule R10: skip of a minor version")
	case "crash-once":
		if _, err := os.Stat(args["marker"]); errors.Is(err, os.ErrNotExist) {
			_ = os.WriteFile(args["marker"], []byte("crashed"), 0o600)
			os.Exit(4)
		}
	}
	keys := make([]string, 0, len(args))
	for k := range args {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	fmt.Fprintf(&b, "command=%s\n", req.Command)
	for _, k := range keys {
		fmt.Fprintf(&b, "%s=%s\n", k, args[k])
	}
	return &sdk.OperationPlan{
		Summary:         "test plan by " + p.name,
		Steps:           []*sdk.Step{{ID: "a", Title: "step a"}},
		CanonicalInputs: []byte(b.String()),
		// Proves that credentials arrive without echoing them.
		Warnings: []string{fmt.Sprintf("talosconfig: %d bytes", len(req.Credentials.Talosconfig))},
	}, nil
}

// Run modes: "ok", "fail", "crash-mid-run" (exit after the first event),
// "wait-cancel" (block until ctx is cancelled, then write args["marker"]),
// "sleep" (like wait-cancel, but also ends after args["duration"]).
func (p *testPlugin) Run(ctx context.Context, req *sdk.OperationRequest, r sdk.Reporter) error {
	args := req.Args
	// Lands in the host's debug log through go-plugin's stdio forwarding.
	fmt.Fprintf(os.Stderr, "testplugin %s: run mode=%s\n", p.name, args["mode"])
	if err := r.Log("info", "", fmt.Sprintf("pid=%d", os.Getpid())); err != nil {
		return err
	}
	switch args["mode"] {
	case "ok":
		steps := []func() error{
			func() error { return r.StepStarted("a", "starting") },
			func() error { return r.Log("info", "a", "working") },
			func() error { return r.Artifact(&sdk.Artifact{ID: "art-1", Name: "snapshot", Size: 42}) },
			func() error {
				return r.Step(&sdk.StepEvent{StepID: "a", Status: sdk.StepOK,
					Node: "cp-1", FromVersion: "v1.12.6", ToVersion: "v1.13.9"})
			},
			func() error { return r.StepSkipped("b", "already at target") },
			func() error { return r.Result(&sdk.Result{OK: true, Summary: "done"}) },
		}
		for _, s := range steps {
			if err := s(); err != nil {
				return err
			}
		}
		return nil
	case "fail":
		if err := r.StepFailed("a", "etcd has no leader"); err != nil {
			return err
		}
		return errors.New("gate failed: etcd has no leader")
	case "crash-mid-run":
		_ = r.StepStarted("a", "about to crash")
		os.Exit(3)
	case "wait-cancel", "sleep":
		if err := r.StepStarted("a", "waiting"); err != nil {
			return err
		}
		var timer <-chan time.Time
		if d, err := time.ParseDuration(args["duration"]); err == nil {
			timer = time.After(d)
		}
		select {
		case <-ctx.Done():
			if m := args["marker"]; m != "" {
				if err := os.WriteFile(m, []byte(ctx.Err().Error()), 0o600); err != nil {
					return err
				}
			}
			return ctx.Err()
		case <-timer:
			return r.StepOK("a", "slept")
		}
	}
	return fmt.Errorf("unknown mode %q", args["mode"])
}

// testConfig is the test plugin's section: plugins.NAME.limit.
type testConfig struct {
	Limit int `json:"limit"`
}

// ValidateConfig decodes the section strictly; a limit above 10 is refused.
func (p *testPlugin) ValidateConfig(_ context.Context, raw []byte, clusters []string) error {
	var c testConfig
	if err := sdk.DecodeConfig(raw, &c); err != nil {
		return err
	}
	if c.Limit > 10 {
		return sdk.ConfigErrors{{Path: "limit", Message: fmt.Sprintf("%d is above 10 (clusters: %s)", c.Limit, strings.Join(clusters, ","))}}
	}
	return nil
}
