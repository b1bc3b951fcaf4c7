package main

import (
	"bufio"
	"fmt"
	"github.com/talosbot/talosbot/internal/servetest"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// BenchmarkServeStartToReady starts `talosbot serve` (built-in plugins, a
// one-cluster config, no chat) and measures the time until /readyz answers,
// then the bot's own resident memory after a few idle seconds.
func BenchmarkServeStartToReady(b *testing.B) {
	dir := b.TempDir()
	tc := filepath.Join(dir, "talosconfig")
	if err := os.WriteFile(tc, []byte("context: bench\n"), 0o600); err != nil {
		b.Fatal(err)
	}
	var readyTotal time.Duration
	var rssSum, pssSum, treeSum float64
	for i := 0; b.Loop(); i++ {
		addr := servetest.FreeAddr(b)
		cfg := filepath.Join(dir, fmt.Sprintf("talosbot-%d.yaml", i))
		_ = os.WriteFile(cfg, []byte(fmt.Sprintf(`
data_dir: %s/data-%d
listen: %s
clusters:
  - name: staging
    environment: staging
    endpoints: [127.0.0.1]
    nodes: [{name: cp-1, address: 127.0.0.1, role: controlplane, host: pve1}]
    credentials: {source: files, talosconfig: "file:%s"}
policy: {staging: {operators: ["*"]}}
`, dir, i, addr, tc)), 0o600)
		start := time.Now()
		cmd := exec.Command(binPath, "serve", "--config", cfg)
		if err := cmd.Start(); err != nil {
			b.Fatal(err)
		}
		for {
			resp, err := http.Get("http://" + addr + "/readyz")
			if err == nil {
				resp.Body.Close()
				if resp.StatusCode == 200 {
					break
				}
			}
			if time.Since(start) > 30*time.Second {
				b.Fatal("not ready after 30s")
			}
			time.Sleep(2 * time.Millisecond) // polling resolution of the measurement
		}
		readyTotal += time.Since(start)
		time.Sleep(3 * time.Second) // the idle period being measured
		rss := rssMiB(cmd.Process.Pid)
		tree := rss
		for _, c := range servetest.ChildPIDs(cmd.Process.Pid) {
			tree += rssMiB(c)
		}
		rssSum += rss
		pssSum += procMiB(fmt.Sprintf("/proc/%d/smaps_rollup", cmd.Process.Pid), "Pss:")
		treeSum += tree
		_ = cmd.Process.Signal(os.Interrupt)
		_ = cmd.Wait()
	}
	n := float64(b.N)
	b.ReportMetric(float64(readyTotal.Milliseconds())/n, "ready-ms")
	b.ReportMetric(rssSum/n, "idle-rss-MiB")
	b.ReportMetric(pssSum/n, "idle-pss-MiB")
	b.ReportMetric(treeSum/n, "idle-rss-with-plugins-MiB")
}

func rssMiB(pid int) float64 { return procMiB(fmt.Sprintf("/proc/%d/status", pid), "VmRSS:") }

// procMiB reads a "Field:   N kB" line from a /proc file.
func procMiB(path, field string) float64 {
	f, err := os.Open(path)
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), field); ok {
			kb, _ := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
			return kb / 1024
		}
	}
	return 0
}
