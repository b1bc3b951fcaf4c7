//go:build demo

package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/netip"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/talosbot/talosbot/bot/alerts"
	"github.com/talosbot/talosbot/bot/engine"
	"github.com/talosbot/talosbot/config"
	"github.com/talosbot/talosbot/internal/testenv"
	lifecyclev1 "github.com/talosbot/talosbot/plugins/sdk/proto/lifecycle/v1"
)

// demoUsers are the console's users: an operator, an approver and a viewer.
func demoUsers() []string { return []string{"alice", "bob", "carol"} }

// demoOptions are the demo's flags (demo.go).
type demoOptions struct {
	listen, dataDir string
	keep            bool
	rebootDelay     time.Duration
}

func runDemo(ctx context.Context, out io.Writer, o demoOptions) error {
	if err := loopbackOnly(o.listen); err != nil {
		return err
	}
	if o.rebootDelay <= 0 {
		return &exitError{code: 2, err: fmt.Errorf("--reboot-delay %s: give a positive duration, e.g. --reboot-delay 8s", o.rebootDelay)}
	}
	// A busy port is found before anything starts: two clusters take a
	// minute to start and would only be stopped again.
	if err := portFree(o.listen); err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	dataDir, cleanup, err := demoDataDir(o.dataDir, o.keep)
	if err != nil {
		return err
	}
	// Registered first, so it runs last: after the clusters and the bot stopped.
	defer cleanup(out)
	_, kubeErr := testenv.KubeAPIServerPath()
	withKube := kubeErr == nil
	fmt.Fprintf(out, "talosbot demo: starting two simulated clusters under %s (a node takes %s to reboot: --reboot-delay) …\n", dataDir, o.rebootDelay)
	if !withKube {
		fmt.Fprintf(out, "  no kube-apiserver in the tools cache (%v):\n  Kubernetes probes will report \"not checked: no Kubernetes API\". Run `make tools` to get one.\n", kubeErr)
	}
	specs := []struct {
		name, env string
		cps, ws   int
	}{{"staging", config.EnvStaging, 1, 1}, {"production", config.EnvProduction, 3, 2}}
	clusters := make([]*simCluster, len(specs))
	errs := make([]error, len(specs))
	var wg sync.WaitGroup
	for i, s := range specs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			clusters[i], errs[i] = startSimCluster(ctx, simOptions{
				dir: filepath.Join(dataDir, "clusters", s.name), name: s.name, controlPlanes: s.cps, workers: s.ws,
				talosVersion: "v1.12.6", kubernetesVersion: "v1.35.2", kube: withKube, rebootDelay: o.rebootDelay,
				// As on real clusters, a node's names differ: inventory, hostname, Node, etcd member.
				distinctNames: true,
			})
		}()
	}
	wg.Wait()
	defer func() {
		for _, c := range clusters {
			if c != nil {
				c.close()
			}
		}
	}()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	storage, err := startDemoStorage(ctx, out, clusters[1], o.rebootDelay) // demo_storage.go
	if err != nil {
		return err
	}
	defer storage.summary()
	cfg := demoConfig(dataDir, o.listen)
	for i, s := range specs {
		cfg.Clusters = append(cfg.Clusters, clusters[i].inventory(s.name, s.env, nil))
	}
	cfg.Alerts.Rules = alerts.DefaultRules()
	cfg.ApplyDefaults()
	if errs := cfg.Validate(); len(errs) > 0 {
		return &config.Errors{List: errs}
	}
	// The demo's config, for reference: it holds references to secrets, not secrets.
	if raw, err := yaml.Marshal(cfg); err == nil {
		_ = os.WriteFile(filepath.Join(dataDir, "talosbot.yaml"), raw, 0o600)
	}
	// One generated token for the audit API and the alert webhook; the
	// console itself stays open (loopback only).
	token, err := newDemoToken(dataDir)
	if err != nil {
		return err
	}
	ao := appOptions{consoleOn: true, consoleOpen: true, channels: []string{"ops"}, users: demoUsers(),
		userLabels: map[string]string{"alice": "operator", "bob": "approver", "carol": "viewer"},
		auditToken: token, alertsToken: token, alertsFallback: "ops"}
	if !withKube {
		ao.plugins = func(p engine.Plugins) engine.Plugins { return makeToolsRemedy{p} }
	}
	a, err := startApp(ctx, cfg, ao)
	if err != nil {
		if errors.Is(err, syscall.EADDRINUSE) {
			return portBusy(o.listen, err) // taken while the clusters started
		}
		return err
	}
	defer a.close()
	url := "http://" + a.ln.Addr().String()
	fmt.Fprintf(out, `
talosbot demo is ready: open %s
  channel "ops"; users alice (operator), bob (approver), carol (viewer)
  staging:    1 control plane + 1 worker, Talos v1.12.6, Kubernetes v1.35.2
  production: 3 control planes + 2 workers, Talos v1.12.6, Kubernetes v1.35.2
  talosconfigs: %s/clusters/<name>/talosconfig (endpoints and a default node set), e.g.
    TALOSCONFIG=%s/clusters/staging/talosconfig talosctl version
Try:
  /talos help
  /talos health staging
  /talos status
Scripts can use the console API, e.g.
  curl -s -XPOST %s/api/console/commands -d '{"user":"alice","channel":"ops","text":"/talos health production"}'
  curl -s '%s/api/console/messages?channel=ops'
Audit API and Alertmanager webhook (token %s, also in %s/demo-token):
  curl -s -H "Authorization: Bearer $(cat %s/demo-token)" '%s/api/audit?since=1d&format=csv'
  Alertmanager webhook_configs url: %s/api/alerts/alertmanager
    http_config: {authorization: {type: Bearer, credentials_file: %s/demo-token}}
  metrics: %s/metrics
Press Ctrl-C to stop; everything lives under %s (%s).
`, url, dataDir, dataDir, url, url, token, dataDir, dataDir, url, url, dataDir, url, dataDir, keptOrRemoved(o.keep))
	<-ctx.Done()
	fmt.Fprintln(out, "stopping the demo")
	return nil
}

// makeToolsRemedy is the demo's plugin host when the tools cache has no
// kube-apiserver: its clusters then have no kubeconfig, and a refusal or
// warning that says so (R20 "no kubeconfig", the drill's "no kubeconfig")
// gets the fix only the demo knows. The plugins cannot know it and a real
// deployment must not say it.
type makeToolsRemedy struct{ engine.Plugins }

// makeToolsFix is what the demo adds where a Kubernetes API is missing.
const makeToolsFix = "in the demo: run `make tools` once (about 20 minutes: it builds kube-apiserver) and restart the demo for a Kubernetes API"

func (p makeToolsRemedy) Plan(ctx context.Context, name string, req *lifecyclev1.OperationRequest) (*lifecyclev1.OperationPlan, error) {
	plan, err := p.Plugins.Plan(ctx, name, req)
	if plan != nil {
		addMakeTools(plan.GetRefusal())
		for i, w := range plan.GetWarnings() {
			if needsKube(w) {
				plan.Warnings[i] = w + " (" + makeToolsFix + ")"
			}
		}
	}
	return plan, err
}

func (p makeToolsRemedy) Run(ctx context.Context, name string, req *lifecyclev1.OperationRequest, onProgress func(*lifecyclev1.Progress) error) (*lifecyclev1.Result, error) {
	res, err := p.Plugins.Run(ctx, name, req, onProgress)
	addMakeTools(res.GetRefusal())
	return res, err
}

func addMakeTools(r *lifecyclev1.Refusal) {
	if r != nil && needsKube(r.GetReason()+" "+r.GetFix()) {
		r.Fix = strings.TrimSuffix(r.GetFix(), ".") + "; " + makeToolsFix
	}
}

func needsKube(s string) bool {
	s = strings.ToLower(s)
	return strings.Contains(s, "kubeconfig") || strings.Contains(s, "no kubernetes api")
}

func keptOrRemoved(keep bool) string {
	if keep {
		return "kept on exit: --keep"
	}
	return "removed on exit unless --keep"
}

// portFree refuses a --listen address another process holds, with how to
// choose another.
func portFree(listen string) error {
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		if errors.Is(err, syscall.EADDRINUSE) {
			return portBusy(listen, err)
		}
		return &exitError{code: 2, err: fmt.Errorf("--listen %s: %w", listen, err)}
	}
	return ln.Close()
}

func portBusy(listen string, err error) error {
	host, _, _ := net.SplitHostPort(listen)
	return &exitError{code: 2, err: fmt.Errorf("--listen %s: the port is in use (%w); choose another port: --listen %s, or with make: make demo DEMO_ARGS='--listen %s'",
		listen, err, net.JoinHostPort(host, "PORT"), net.JoinHostPort(host, "9090"))}
}

// demoDataDir creates the demo's data dir (a new temp dir unless dir is
// given) and returns the cleanup to run on exit. The demo's clusters, etcd
// data and snapshots take hundreds of MB, so a dir the demo created is
// removed unless keep; a dir that existed before is left as it was found,
// never removed wholesale. The demo's token, a secret, never outlives the run.
func demoDataDir(dir string, keep bool) (string, func(io.Writer), error) {
	created := false
	if dir == "" {
		d, err := os.MkdirTemp("", "talosbot-demo-")
		if err != nil {
			return "", nil, fmt.Errorf("demo data dir: %w", err)
		}
		dir, created = d, true
	} else {
		_, err := os.Stat(dir)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			created = true
		case err != nil:
			return "", nil, fmt.Errorf("--data-dir: %w", err)
		}
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return "", nil, fmt.Errorf("--data-dir: %w", err)
		}
	}
	return dir, func(out io.Writer) {
		_ = os.Remove(filepath.Join(dir, "demo-token"))
		switch {
		case keep:
			fmt.Fprintf(out, "kept the demo's data dir %s (--keep)\n", dir)
		case !created:
			fmt.Fprintf(out, "left %s in place: it existed before the demo (remove it yourself)\n", dir)
		default:
			if err := os.RemoveAll(dir); err != nil {
				fmt.Fprintf(out, "could not remove the demo's data dir: %v\n", err)
				return
			}
			fmt.Fprintf(out, "removed the demo's data dir %s\n", dir)
		}
	}, nil
}

// loopbackOnly refuses a demo listen address other people can reach: the
// demo's console has no tokens and lets whoever opens it pick any user.
func loopbackOnly(listen string) error {
	host, _, err := net.SplitHostPort(listen)
	if err != nil {
		return fmt.Errorf("--listen %q is not host:port (e.g. 127.0.0.1:8080): %w", listen, err)
	}
	if host == "localhost" {
		return nil
	}
	if ip, err := netip.ParseAddr(host); err == nil && ip.IsLoopback() {
		return nil
	}
	return fmt.Errorf("--listen %q: the demo console has no tokens and lets anyone act as any user, so it listens on loopback only (127.0.0.1, ::1, localhost); for a shared console run talosbot serve with chat.web.users", listen)
}

func demoConfig(dataDir, listen string) *config.Config {
	return &config.Config{
		DataDir: dataDir, SnapshotDir: filepath.Join(dataDir, "snapshots"), Listen: listen,
		Policy: map[string]config.Policy{
			config.EnvStaging:    {Operators: []string{"alice", "bob"}, Viewers: []string{"carol"}},
			config.EnvProduction: {Operators: []string{"alice", "bob"}, Viewers: []string{"carol"}, Approvers: []string{"bob"}, MinApprovals: 1},
		},
		// The demo has no network: its releases are declared, and only a
		// known release is an upgrade target (docs/RELEASES.md).
		Releases: config.Releases{Talos: []string{"v1.11.6", "v1.12.6", "v1.13.9", "v1.14.0", "v1.14.1"}, Kubernetes: []string{"1.35.2", "1.36.3"}},
	}
}
