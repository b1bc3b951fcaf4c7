package certnotice_test

import (
	"context"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/talosbot/talosbot/bot/certnotice"
	"github.com/talosbot/talosbot/config"
	"github.com/talosbot/talosbot/internal/certexpiry"
	"github.com/talosbot/talosbot/plugins/certinfo"
	"github.com/talosbot/talosbot/plugins/sdk"
	"github.com/talosbot/talosbot/plugins/sdk/sdktest"
	"github.com/talosbot/talosbot/sim"
	"github.com/talosbot/talosbot/state"
)

const cfgDoc = `
clusters:
  - name: staging
    environment: staging
    channels: [st]
    endpoints: [10.0.20.204]
    nodes: [{name: cp-1, address: 10.0.20.204, role: controlplane, host: pve5}]
    credentials: {source: files, talosconfig: file:/etc/tc}
policy:
  staging: {operators: ["*"]}
`

// simInspector is the certs plugin, in process, reading a sim cluster: the
// certificates are the sim's, issued at its clock as Talos issues them.
type simInspector struct {
	c *sim.Cluster
}

func (i simInspector) Inspect(ctx context.Context, cluster string) (*certexpiry.Inventory, error) {
	req := &sdk.OperationRequest{OperationID: "cert-check", Command: certinfo.Command,
		Cluster:     sdk.Cluster{Name: cluster, Environment: "staging"},
		Credentials: sdk.Credentials{Talosconfig: i.c.Talosconfig()}}
	for _, n := range i.c.Nodes() {
		req.Cluster.Nodes = append(req.Cluster.Nodes, &sdk.Node{Name: n.Name, Address: n.IP, Role: n.Role, Host: n.Host})
	}
	plan, err := sdktest.Plan(ctx, certinfo.New(), req)
	if err != nil {
		return nil, err
	}
	return certexpiry.FromCanonical(plan.CanonicalInputs)
}

type post struct {
	channel, text string
	actions       []certnotice.Action
}

type poster struct {
	mu    sync.Mutex
	posts []post
}

func (p *poster) Post(_ context.Context, channel, text string, actions []certnotice.Action) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.posts = append(p.posts, post{channel, text, actions})
	return nil
}

func (p *poster) take() []post {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := p.posts
	p.posts = nil
	return out
}

func parseConfig(t *testing.T, doc string) *config.Config {
	t.Helper()
	cfg, err := config.Parse([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

func openStore(t *testing.T, path string) *state.Store {
	t.Helper()
	st, err := state.Open(path, state.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func startSim(t *testing.T) *sim.Cluster {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := sim.Start(ctx, sim.Options{ControlPlanes: 1, Workers: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func clientCert(t *testing.T, c *sim.Cluster) certexpiry.Cert {
	t.Helper()
	in, err := simInspector{c}.Inspect(context.Background(), "staging")
	if err != nil {
		t.Fatal(err)
	}
	for _, cert := range in.Certs {
		if cert.Source == "talosconfig client certificate" {
			return cert
		}
	}
	t.Fatalf("no talosconfig client certificate in %+v", in)
	return certexpiry.Cert{}
}

// The sim's talosconfig client certificate lasts a year, as Talos issues
// it. A daily check from 40 days before its expiry to 2 days after, with
// the bot restarted (a new notifier on the reopened store) every 9 days
// and each day checked twice, posts exactly one notice per threshold
// (30, 14, 7, 1) and one when it has expired, each on the day it is
// crossed, naming the renewal step; the gauge follows the clock.
func TestExpiringClientCertificateOneNoticePerThresholdAcrossRestarts(t *testing.T) {
	c := startSim(t)
	client := clientCert(t, c)
	if life := client.NotAfter.Sub(client.NotBefore); life < 364*24*time.Hour || life > 366*24*time.Hour {
		t.Fatalf("the sim's client certificate lasts %s, not a year", life)
	}
	cfg := parseConfig(t, cfgDoc)
	path := filepath.Join(t.TempDir(), "s.db")
	p := &poster{}
	ctx := context.Background()

	var (
		st  *state.Store
		n   *certnotice.Notifier
		reg *prometheus.Registry
	)
	restart := func(now time.Time) {
		if st != nil {
			if err := st.Close(); err != nil {
				t.Fatal(err)
			}
		}
		st = openStore(t, path)
		reg = prometheus.NewRegistry()
		var err error
		n, err = certnotice.New(certnotice.Options{Config: cfg, Store: st, Inspector: simInspector{c}, Poster: p,
			Now: func() time.Time { return now }, Registerer: reg})
		if err != nil {
			t.Fatal(err)
		}
	}
	defer func() { _ = st.Close() }()

	type notice struct {
		day       int // days left on the day of the post
		threshold string
	}
	var got []notice
	start := client.NotAfter.Add(-40 * 24 * time.Hour).Add(-time.Hour)
	for day := 0; day <= 42; day++ {
		now := start.Add(time.Duration(day) * 24 * time.Hour)
		if day%9 == 0 {
			restart(now)
		}
		for range 2 {
			for _, oc := range n.Check(ctx, now) {
				if oc.Err != nil {
					t.Fatalf("day %d: %v", day, oc.Err)
				}
			}
		}
		for _, ps := range p.take() {
			if ps.channel != "st" {
				t.Errorf("posted to %s", ps.channel)
			}
			if strings.Count(ps.text, "talosconfig client certificate") != 1 || !strings.Contains(ps.text, "talosctl config new") ||
				!strings.Contains(ps.text, "the bot cannot act") || !strings.Contains(ps.text, client.Serial) {
				t.Errorf("notice:\n%s", ps.text)
			}
			th := "expired"
			if i := strings.Index(ps.text, "(the "); i >= 0 {
				th = strings.SplitN(ps.text[i+5:], "-", 2)[0]
			}
			got = append(got, notice{client.DaysLeft(now), th})
			if len(ps.actions) != 2 || ps.actions[1].Command != "/talos certs snooze staging" {
				t.Errorf("actions: %+v", ps.actions)
			}
		}
		want := client.Left(now).Seconds()
		if v := gauge(t, reg, "staging", "talosconfig client certificate"); v != want {
			t.Errorf("day %d: gauge %v, want %v", day, v, want)
		}
	}
	want := []notice{{29, "30"}, {13, "14"}, {6, "7"}, {0, "1"}, {-1, "expired"}}
	if len(got) != len(want) {
		t.Fatalf("notices %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("notice %d: %+v, want %+v", i, got[i], want[i])
		}
	}
}

func gauge(t *testing.T, reg *prometheus.Registry, cluster, source string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "talosbot_certificate_expiry_seconds" {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["cluster"] == cluster && labels["certificate"] == source {
				return m.GetGauge().GetValue()
			}
		}
	}
	t.Fatalf("no gauge for %s %s", cluster, source)
	return 0
}

// A snooze holds the notices back; the threshold crossed meanwhile is
// announced once when it ends, and the snooze is audited.
func TestSnoozeHoldsCertificateNotices(t *testing.T) {
	c := startSim(t)
	client := clientCert(t, c)
	cfg := parseConfig(t, cfgDoc)
	st := openStore(t, filepath.Join(t.TempDir(), "s.db"))
	defer func() { _ = st.Close() }()
	p := &poster{}
	ctx := context.Background()
	day := func(left int) time.Time { return client.NotAfter.Add(-time.Duration(left)*24*time.Hour - time.Hour) }
	now := day(20)
	n, err := certnotice.New(certnotice.Options{Config: cfg, Store: st, Inspector: simInspector{c}, Poster: p, Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Snooze(ctx, "staging", "alice", now.Add(10*24*time.Hour)); err != nil {
		t.Fatal(err)
	}
	for left := 20; left >= 9; left-- {
		now = day(left)
		oc := n.Check(ctx, now)
		posts := p.take()
		switch {
		case left > 10 && (len(posts) != 0 || !strings.HasPrefix(oc[0].Skipped, "snoozed until")):
			t.Errorf("%d days left, snoozed: posted %d, outcome %+v", left, len(posts), oc[0])
		case left == 10 && (len(posts) != 1 || !strings.Contains(posts[0].text, "(the 14-day notice)")):
			t.Errorf("%d days left, snooze over: %+v", left, posts)
		case left < 10 && len(posts) != 0:
			t.Errorf("%d days left: repeated %+v", left, posts)
		}
	}
	if err := n.Snooze(ctx, "nope", "alice", now); err == nil || !strings.Contains(err.Error(), "unknown cluster") {
		t.Errorf("snooze of an unknown cluster: %v", err)
	}
	var audited bool
	recs, err := st.QueryAudit(ctx, state.AuditQuery{})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range recs {
		audited = audited || (e.Action == "certs.snoozed" && e.Actor == "alice")
	}
	if !audited {
		t.Error("the snooze is not audited")
	}
}

func TestThreshold(t *testing.T) {
	th := []int{30, 14, 7, 1}
	for _, tc := range []struct {
		left int
		want int
		ok   bool
	}{{45, 0, false}, {30, 0, false}, {29, 30, true}, {14, 30, true}, {13, 14, true}, {8, 14, true}, {6, 7, true}, {0, 1, true}, {-1, certnotice.Expired, true}} {
		if got, ok := certnotice.Threshold(th, tc.left); got != tc.want || ok != tc.ok {
			t.Errorf("%d days left: %d %v, want %d %v", tc.left, got, ok, tc.want, tc.ok)
		}
	}
}

func TestParseSnooze(t *testing.T) {
	if d, err := certnotice.Snoozes.Parse(""); err != nil || d != certnotice.DefaultSnooze {
		t.Errorf("default: %v %v", d, err)
	}
	for _, bad := range []string{"31d", "0m", "soon"} {
		if _, err := certnotice.Snoozes.Parse(bad); err == nil {
			t.Errorf("%s accepted", bad)
		}
	}
}

// barrierInspector answers only once every cluster's read is in flight, so
// a check that reads one cluster after the other never gets an answer.
type barrierInspector struct {
	want    int
	mu      sync.Mutex
	arrived int
	all     chan struct{}
}

func (b *barrierInspector) Inspect(ctx context.Context, cluster string) (*certexpiry.Inventory, error) {
	b.mu.Lock()
	b.arrived++
	if b.arrived == b.want {
		close(b.all)
	}
	b.mu.Unlock()
	select {
	case <-b.all:
		return &certexpiry.Inventory{Cluster: cluster}, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// A fleet is read side by side (P9: the daily check across the fleet in
// about one cluster's time), and the outcomes keep the config's order.
func TestCheckReadsClustersSideBySide(t *testing.T) {
	doc := "clusters:\n"
	for i := range 5 {
		doc += "  - {name: c" + string(rune('0'+i)) + ", environment: staging, channels: [st], endpoints: [10.0.20.204], " +
			"nodes: [{name: cp-1, address: 10.0.20.204, role: controlplane, host: pve5}], credentials: {source: files, talosconfig: file:/etc/tc}}\n"
	}
	cfg := parseConfig(t, doc+"policy:\n  staging: {operators: [\"*\"]}\n")
	st := openStore(t, filepath.Join(t.TempDir(), "s.db"))
	defer func() { _ = st.Close() }()
	in := &barrierInspector{want: 5, all: make(chan struct{})}
	n, err := certnotice.New(certnotice.Options{Config: cfg, Store: st, Inspector: in, Poster: &poster{}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for i, oc := range n.Check(ctx, time.Now()) {
		if oc.Err != nil || oc.Cluster != "c"+string(rune('0'+i)) {
			t.Errorf("outcome %d: %+v", i, oc)
		}
	}
}
