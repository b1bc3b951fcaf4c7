// Package amtest runs the real Alertmanager (the Debian
// prometheus-alertmanager package) for tests: one process on a loopback
// port whose webhook points at the bot, and helpers that speak its API v2.
package amtest

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sync"
	"testing"
	"time"
)

// Binary is where Debian installs Alertmanager.
const Binary = "/usr/bin/prometheus-alertmanager"

// Start runs Alertmanager with one route to webhookURL (Bearer token, with
// resolved notifications; group_wait 1s) and returns its base URL. Without
// the binary the test is skipped, or failed in CI.
func Start(t testing.TB, webhookURL, token string) string {
	t.Helper()
	return StartConfig(t, fmt.Sprintf(`
route:
  receiver: bot
  group_by: [alertname, cluster]
  group_wait: 1s
  group_interval: 1s
  repeat_interval: 1h
receivers:
  - name: bot
    webhook_configs:
      - url: %s
        send_resolved: true
        http_config:
          authorization: {type: Bearer, credentials: %s}
`, webhookURL, token))
}

// StartConfig runs Alertmanager with the configuration cfg on a loopback
// port and returns its base URL, skipping (or failing in CI) without it.
func StartConfig(t testing.TB, cfg string) string {
	t.Helper()
	if _, err := os.Stat(Binary); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s is missing: apt-get install prometheus-alertmanager", Binary)
		}
		t.Skipf("%s is missing (apt-get install prometheus-alertmanager); skipping", Binary)
	}
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "alertmanager.yml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(Binary, "--config.file="+cfgPath, "--storage.path="+filepath.Join(dir, "data"),
		"--web.listen-address=127.0.0.1:0", "--cluster.listen-address=")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var logs bytes.Buffer
	addr := make(chan string, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		re := regexp.MustCompile(`msg="Listening on" address=(\S+)`)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			mu.Lock()
			logs.WriteString(sc.Text() + "\n")
			mu.Unlock()
			if m := re.FindStringSubmatch(sc.Text()); m != nil {
				select {
				case addr <- m[1]:
				default:
				}
			}
		}
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-done
		_ = cmd.Wait()
		if t.Failed() {
			mu.Lock()
			t.Logf("alertmanager log:\n%s", logs.String())
			mu.Unlock()
		}
	})
	var base string
	select {
	case a := <-addr:
		base = "http://" + a
	case <-done:
		t.Fatalf("alertmanager exited before listening:\n%s", logs.String())
	case <-time.After(30 * time.Second):
		t.Fatal("alertmanager did not report its listen address within 30s")
	}
	WaitUntil(t, "alertmanager ready", 30*time.Second, func() bool {
		resp, err := http.Get(base + "/-/ready")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	})
	return base
}

// WaitUntil polls cond until it holds or d passes (then the test fails).
func WaitUntil(t testing.TB, what string, d time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	tick := time.NewTicker(25 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", d, what)
		}
		<-tick.C
	}
}

// PostAlert feeds one firing alert to Alertmanager through POST /api/v2/alerts.
func PostAlert(t testing.TB, base string, labels map[string]string) {
	t.Helper()
	raw, _ := json.Marshal([]any{map[string]any{"labels": labels, "annotations": map[string]string{"summary": "test " + labels["alertname"]},
		"startsAt": time.Now().UTC().Format(time.RFC3339Nano)}})
	resp, err := http.Post(base+"/api/v2/alerts", "application/json", bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("POST /api/v2/alerts: %d %s", resp.StatusCode, b)
	}
}

// Silence is a silence as GET /api/v2/silences lists it.
type Silence struct {
	ID       string `json:"id"`
	Matchers []struct {
		Name    string `json:"name"`
		Value   string `json:"value"`
		IsRegex bool   `json:"isRegex"`
		IsEqual bool   `json:"isEqual"`
	} `json:"matchers"`
	StartsAt  time.Time `json:"startsAt"`
	EndsAt    time.Time `json:"endsAt"`
	CreatedBy string    `json:"createdBy"`
	Comment   string    `json:"comment"`
	Status    struct {
		State string `json:"state"`
	} `json:"status"`
}

// Silences lists every silence Alertmanager holds.
func Silences(t testing.TB, base string) []Silence {
	t.Helper()
	resp, err := http.Get(base + "/api/v2/silences")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out []Silence
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		t.Fatal(err)
	}
	return out
}

// Alert is an alert as GET /api/v2/alerts lists it.
type Alert struct {
	Labels map[string]string `json:"labels"`
	Status struct {
		State      string   `json:"state"`
		SilencedBy []string `json:"silencedBy"`
	} `json:"status"`
}

// Alerts lists the alerts that have not resolved, silenced or not.
func Alerts(t testing.TB, base string) []Alert {
	t.Helper()
	resp, err := http.Get(base + "/api/v2/alerts?active=true&silenced=true&inhibited=true")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out []Alert
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		t.Fatal(err)
	}
	return out
}
