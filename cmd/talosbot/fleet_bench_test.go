package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/talosbot/talosbot/internal/servetest"
	"github.com/talosbot/talosbot/sim"
)

// The fleet of P9 (issue 33): one bot against fleetClusters simulated
// clusters of fleetNodes nodes each. The sims run in their own process
// (this test binary, re-executed as TestFleetSimsHelper), so the figures
// are the bot's and its plugins', not the simulator's.
const (
	fleetClusters = 20
	fleetNodes    = 10
	fleetCPs      = 3
	fleetEnvDir   = "TALOSBOT_FLEET_DIR"
)

type fleetNode struct{ Name, IP, Role, Host string }

type fleetCluster struct {
	Name        string
	Talosconfig []byte
	Nodes       []fleetNode
}

// TestFleetSimsHelper is not a test: re-executed by BenchmarkFleet with
// TALOSBOT_FLEET_DIR set, it starts the fleet's sims, writes DIR/fleet.json
// and serves until its stdin closes.
func TestFleetSimsHelper(t *testing.T) {
	dir := os.Getenv(fleetEnvDir)
	if dir == "" {
		t.Skip("the sims' process of BenchmarkFleet")
	}
	ctx := context.Background()
	n, _ := strconv.Atoi(os.Getenv("TALOSBOT_FLEET_N"))
	if n <= 0 {
		n = fleetClusters
	}
	var (
		mu    sync.Mutex
		fleet = make([]fleetCluster, n)
		wg    sync.WaitGroup
		errs  = make(chan error, n)
	)
	sem := make(chan struct{}, 4)
	for i := range n {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			name := fmt.Sprintf("fleet-%02d", i+1)
			c, err := sim.Start(ctx, sim.Options{Dir: filepath.Join(dir, name), Name: name, ControlPlanes: fleetCPs, Workers: fleetNodes - fleetCPs})
			if err != nil {
				errs <- fmt.Errorf("%s: %w", name, err)
				return
			}
			fc := fleetCluster{Name: name, Talosconfig: c.Talosconfig()}
			for _, nd := range c.Nodes() {
				fc.Nodes = append(fc.Nodes, fleetNode{nd.Name, nd.IP, nd.Role, nd.Host})
			}
			mu.Lock()
			fleet[i] = fc
			mu.Unlock()
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	raw, err := json.Marshal(fleet)
	must(t, err)
	must(t, os.WriteFile(filepath.Join(dir, "fleet.json.tmp"), raw, 0o600))
	must(t, os.Rename(filepath.Join(dir, "fleet.json.tmp"), filepath.Join(dir, "fleet.json")))
	_, _ = io.Copy(io.Discard, os.Stdin) // until the benchmark closes it
}

// startFleet runs the sims' process and returns the fleet it serves.
func startFleet(b *testing.B, dir string, n int) []fleetCluster {
	b.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestFleetSimsHelper$", "-test.timeout=0")
	cmd.Env = append(os.Environ(), fleetEnvDir+"="+dir, "TALOSBOT_FLEET_N="+strconv.Itoa(n),
		"TALOSBOT_BIN="+binPath, "TALOSBOT_PLUGINS_BIN="+pluginsBinPath, "TALOSBOT_DEMO_BIN="+demoBinPath)
	stdin, err := cmd.StdinPipe()
	must(b, err)
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	must(b, cmd.Start())
	b.Cleanup(func() { _ = stdin.Close(); _ = cmd.Wait() })
	deadline := time.Now().Add(5 * time.Minute)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		raw, err := os.ReadFile(filepath.Join(dir, "fleet.json"))
		if err == nil {
			var fleet []fleetCluster
			must(b, json.Unmarshal(raw, &fleet))
			return fleet
		}
		if time.Now().After(deadline) || cmd.ProcessState != nil {
			b.Fatalf("the fleet's sims did not start:\n%s", out.String())
		}
		<-tick.C
	}
}

// fleetBot serves the fleet: every cluster on the console channel ops.
func fleetBot(b *testing.B, dir string, fleet []fleetCluster) *servetest.Bot {
	b.Helper()
	var cls []servetest.Cluster
	for _, fc := range fleet {
		cl := servetest.Cluster{Name: fc.Name, Environment: "staging", Talosconfig: fc.Talosconfig}
		for _, n := range fc.Nodes {
			cl.Nodes = append(cl.Nodes, fmt.Sprintf("{name: %s, address: %s, role: %s, host: %s}", n.Name, n.IP, n.Role, n.Host))
			if n.Role == "controlplane" {
				cl.Endpoints = append(cl.Endpoints, n.IP)
			}
		}
		cls = append(cls, cl)
	}
	bot := servetest.Config{Dir: filepath.Join(dir, "bot"), Clusters: cls,
		Extra: "certificates: {notice_schedule: \"off\"}\n"}.Bot(b, binPath)
	bot.Start()
	b.Cleanup(func() { _ = bot.Cmd.Process.Signal(syscall.SIGTERM); _ = bot.Cmd.Wait() })
	return bot
}

// runAll submits command on every named cluster at once and waits until
// each has a terminal operation message; it returns the wall time.
func runAll(b *testing.B, bot *servetest.Bot, command string, clusters []string) time.Duration {
	b.Helper()
	before := map[string]bool{}
	for _, m := range bot.Messages("ops") {
		if id := m.Field("Operation"); id != "" {
			before[id] = true
		}
	}
	start := time.Now()
	var wg sync.WaitGroup
	for _, cl := range clusters {
		wg.Go(func() { bot.Command("alice", "ops", command+" "+cl) })
	}
	wg.Wait()
	ended := map[string]string{}
	bot.WaitForWithin(fmt.Sprintf("%s on %d clusters", command, len(clusters)), 5*time.Minute, func() bool {
		for _, m := range bot.Messages("ops") {
			id := m.Field("Operation")
			if id == "" || before[id] {
				continue
			}
			switch s := m.Field("State"); s {
			case "succeeded", "failed", "refused", "cancelled", "denied", "expired":
				ended[id] = s
			}
		}
		return len(ended) >= len(clusters)
	})
	took := time.Since(start)
	for id, s := range ended {
		if s != "succeeded" {
			b.Fatalf("%s: operation %s %s:\n%s", command, id, s, bot.Stderr)
		}
	}
	return took
}

// scrape reads a gauge of the bot's /metrics.
func scrape(b *testing.B, bot *servetest.Bot, name string) float64 {
	b.Helper()
	resp, err := http.Get("http://" + bot.Addr + "/metrics")
	must(b, err)
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			f, _ := strconv.ParseFloat(v, 64)
			return f
		}
	}
	return 0
}

// BenchmarkFleet (P9): one `talosbot serve` against 20 simulated clusters of
// 10 nodes (3 control planes with real etcd, 7 workers; no Kubernetes API:
// the gate's Kubernetes probes are "not checked"), the sims in their own
// process. Each iteration fires `/talos health` on all clusters at once,
// then on one, and the per-cluster daily reads (`/talos certs`, `/talos
// etcd status`) likewise. Reported: each wall time, the ratios, and the
// bot's RSS (with its plugin processes) and goroutines after the rounds.
func BenchmarkFleet(b *testing.B) {
	dir := b.TempDir()
	fleet := startFleet(b, dir, fleetClusters)
	bot := fleetBot(b, dir, fleet)
	var names []string
	for _, fc := range fleet {
		names = append(names, fc.Name)
	}
	// Warm: every plugin process started and each cluster's connection
	// made once, as a bot that has been up a day has.
	runAll(b, bot, "/talos health", names)
	runAll(b, bot, "/talos certs", names)
	runAll(b, bot, "/talos etcd status", names)
	var healthAll, healthOne, dailyAll, dailyOne time.Duration
	for b.Loop() {
		healthAll += runAll(b, bot, "/talos health", names)
		healthOne += runAll(b, bot, "/talos health", names[:1])
		dailyAll += runAll(b, bot, "/talos certs", names) + runAll(b, bot, "/talos etcd status", names)
		dailyOne += runAll(b, bot, "/talos certs", names[:1]) + runAll(b, bot, "/talos etcd status", names[:1])
	}
	n := float64(b.N)
	b.ReportMetric(float64(healthAll.Milliseconds())/n, "health-all-ms")
	b.ReportMetric(float64(healthOne.Milliseconds())/n, "health-one-ms")
	b.ReportMetric(float64(healthAll)/float64(healthOne), "health-ratio")
	b.ReportMetric(float64(dailyAll.Milliseconds())/n, "daily-all-ms")
	b.ReportMetric(float64(dailyOne.Milliseconds())/n, "daily-one-ms")
	b.ReportMetric(float64(dailyAll)/float64(dailyOne), "daily-ratio")
	tree := rssMiB(bot.Cmd.Process.Pid)
	for _, c := range servetest.ChildPIDs(bot.Cmd.Process.Pid) {
		tree += rssMiB(c)
	}
	b.ReportMetric(rssMiB(bot.Cmd.Process.Pid), "bot-rss-MiB")
	b.ReportMetric(tree, "rss-with-plugins-MiB")
	b.ReportMetric(scrape(b, bot, "go_goroutines"), "bot-goroutines")
}
