package engine

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"

	"github.com/talosbot/talosbot/bot/chat"
	"github.com/talosbot/talosbot/bot/grammar"
	lifecyclev1 "github.com/talosbot/talosbot/plugins/sdk/proto/lifecycle/v1"
	"github.com/talosbot/talosbot/state"
)

// Status providers (docs/PLUGINS.md "Status providers"): /talos status
// shows facts only a plugin can read from the cluster (the running Talos and
// Kubernetes versions), but the bot links no cluster library and names no
// plugin. So a READ_ONLY command whose manifest sets status_label is asked,
// through its Plan (which has no side effects), for every cluster status
// shows. Each call is bounded by timeouts.status and they all run at once,
// so a cluster that is down costs status one timeout, never a hang; a
// provider that fails, refuses or is late yields "not read (<reason>)",
// never a guess.

// StatusFacts asks every status provider about each cluster and returns,
// per cluster, one line per provider: "<label>: <facts>" or "<label>: not
// read (<reason>)". It never fails: status must answer when a cluster or a
// plugin does not. It does not authorize: each call loads the cluster's
// credentials and plans against it, so the caller passes only the clusters
// the user may read (bot's statusAuthorize).
func (e *Engine) StatusFacts(ctx context.Context, user string, clusters []string) map[string][]string {
	var providers []grammar.CommandSpec
	for _, s := range e.grammar.Specs() {
		if s.Plugin != "" && s.GetStatusLabel() != "" && s.GetEffect() == lifecyclev1.Effect_EFFECT_READ_ONLY {
			providers = append(providers, s)
		}
	}
	out := make(map[string][]string, len(clusters))
	if len(providers) == 0 {
		return out
	}
	timeout := e.o.Config.Timeouts.Status.D()
	lines := make([][]string, len(clusters))
	var wg sync.WaitGroup
	for i, cl := range clusters {
		lines[i] = make([]string, len(providers))
		for j, p := range providers {
			wg.Go(func() {
				cctx, cancel := context.WithTimeout(ctx, timeout)
				defer cancel()
				facts, err := e.statusFacts(cctx, p, cl, user)
				if err != nil {
					reason := err.Error()
					if deadlineCame(cctx) && !deadlineCame(ctx) {
						reason = "no answer within " + chat.Duration(timeout) + ", timeouts.status"
					}
					lines[i][j] = p.GetStatusLabel() + ": not read (" + reason + ")"
					return
				}
				lines[i][j] = p.GetStatusLabel() + ": " + facts
			})
		}
	}
	wg.Wait()
	for i, cl := range clusters {
		out[cl] = lines[i]
	}
	return out
}

// deadlineCame reports whether ctx is done or its deadline has passed. The
// second counts: gRPC passes the deadline to the plugin, whose copy can end
// the call (and the host return) before ctx's own timer has fired; without
// it, a provider that ran out of timeouts.status would read as a plugin
// error (seen as a flake of bot's TestStatusShowsVersionsAndNotRead…).
func deadlineCame(ctx context.Context) bool {
	if ctx.Err() != nil {
		return true
	}
	dl, ok := ctx.Deadline()
	return ok && !time.Now().Before(dl) // wall time, as the deadline is, not the engine's clock
}

// statusFacts plans provider p for cluster and returns its status lines.
func (e *Engine) statusFacts(ctx context.Context, p grammar.CommandSpec, cluster, user string) (string, error) {
	cl := e.o.Config.Cluster(cluster)
	if cl == nil {
		return "", fmt.Errorf("cluster %s is not configured", chat.Echo(cluster))
	}
	// A throwaway operation, never stored: request builds what any Plan
	// gets (inventory, credentials for this call only, settings).
	op := &state.Operation{ID: "status-" + e.o.NewID(), Command: p.Name, Cluster: cluster, Environment: cl.Environment,
		Requester: user, Args: map[string]string{"cluster": cluster}}
	req, err := e.request(ctx, op)
	if err != nil {
		return "", err
	}
	plan, err := e.o.Plugins.Plan(ctx, p.Plugin, req)
	if err != nil {
		return "", errors.New(planError(err))
	}
	if r := plan.GetRefusal(); r != nil {
		return "", errors.New(refusalText(r))
	}
	var facts []string
	for _, l := range plan.GetStatus() {
		if l = strings.TrimSpace(l); l != "" {
			facts = append(facts, l)
		}
	}
	if len(facts) == 0 {
		return "", errors.New("the plugin reported nothing")
	}
	return strings.Join(facts, " · "), nil
}

// planError is a plugin error without its gRPC wrapping, for one line.
func planError(err error) string {
	if s, ok := grpcstatus.FromError(err); ok && s.Code() != codes.OK {
		return strings.ReplaceAll(s.Message(), "\n", " ")
	}
	return strings.ReplaceAll(err.Error(), "\n", " ")
}
