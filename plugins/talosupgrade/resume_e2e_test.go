package talosupgrade

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/talosbot/talosbot/sim"
)

// talosbotBinary is $TALOSBOT_BIN or a fresh build of ./cmd/talosbot.
func talosbotBinary(t *testing.T) string {
	t.Helper()
	if bin := os.Getenv("TALOSBOT_BIN"); bin != "" {
		return bin
	}
	bin := filepath.Join(t.TempDir(), "talosbot")
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/talosbot")
	cmd.Dir = "../.."
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build talosbot: %v\n%s", err, out)
	}
	return bin
}

type bot struct {
	t      *testing.T
	bin    string
	cfg    string
	addr   string
	token  string
	cmd    *exec.Cmd
	stderr *bytes.Buffer
}

func (b *bot) start() {
	b.t.Helper()
	b.cmd = exec.Command(b.bin, "serve", "--config", b.cfg)
	b.stderr = &bytes.Buffer{}
	b.cmd.Stderr = b.stderr
	b.cmd.Env = append(os.Environ(), "TB_CONSOLE_TOKEN="+b.token)
	if err := b.cmd.Start(); err != nil {
		b.t.Fatal(err)
	}
	b.waitFor("readyz", 30*time.Second, func() bool {
		resp, err := http.Get("http://" + b.addr + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	})
}

func (b *bot) waitFor(what string, d time.Duration, cond func() bool) {
	b.t.Helper()
	deadline := time.Now().Add(d)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			b.t.Fatalf("timed out waiting for %s; bot stderr:\n%s", what, b.stderr)
		}
		<-tick.C
	}
}

func (b *bot) command(text string) {
	b.t.Helper()
	raw, _ := json.Marshal(map[string]string{"user": "alice", "channel": "ops", "text": text})
	req, _ := http.NewRequest("POST", "http://"+b.addr+"/api/console/commands", bytes.NewReader(raw))
	req.Header.Set("Authorization", "Bearer "+b.token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		b.t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		b.t.Fatalf("%s: HTTP %d", text, resp.StatusCode)
	}
}

type consoleMsg struct {
	Text   string
	Title  string
	Fields []struct{ Label, Value string }
}

func (m consoleMsg) field(label string) string {
	for _, f := range m.Fields {
		if f.Label == label {
			return f.Value
		}
	}
	return ""
}

func (b *bot) messages() []consoleMsg {
	req, _ := http.NewRequest("GET", "http://"+b.addr+"/api/console/messages?channel=ops", nil)
	req.Header.Set("Authorization", "Bearer "+b.token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil
	}
	defer resp.Body.Close()
	var out struct{ Messages []consoleMsg }
	_ = json.NewDecoder(resp.Body).Decode(&out)
	return out.Messages
}

func (b *bot) find(pred func(consoleMsg) bool) (consoleMsg, bool) {
	for _, m := range b.messages() {
		if pred(m) {
			return m, true
		}
	}
	return consoleMsg{}, false
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// TestResumeAfterSIGKILL drives a real `talosbot serve` through the console
// API: the roll of 5 nodes is killed with SIGKILL right after node 2 is
// done, the bot restarts, `/talos resume` continues it: nodes 1–2 are
// skipped and nodes 3–5 are upgraded, each exactly once (the sim's counts).
func TestResumeAfterSIGKILL(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs talosbot")
	}
	bin := talosbotBinary(t)
	e := start(t, 3, 2, false, nil)
	dir := t.TempDir()
	tc := filepath.Join(dir, "talosconfig")
	if err := os.WriteFile(tc, e.c.Talosconfig(), 0o600); err != nil {
		t.Fatal(err)
	}
	var nodes []string
	for _, n := range e.c.Nodes() {
		nodes = append(nodes, fmt.Sprintf("{name: %s, address: %s, role: %s, host: %s, platform: %s, installer_class: default}",
			n.Name, n.IP, n.Role, n.Host, n.Platform))
	}
	addr := freeAddr(t)
	cfg := filepath.Join(dir, "talosbot.yaml")
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf(`
data_dir: %[1]s/data
snapshot_dir: %[1]s/snapshots
listen: %[2]s
clusters:
  - name: staging
    environment: staging
    channels: [ops]
    endpoints: [%[3]s]
    nodes:
      - %[4]s
    credentials: {source: files, talosconfig: "file:%[5]s"}
    declared: {schematic_id: %[6]s, talos_version: %[7]s}
releases:
  talos: [%[7]s, %[8]s]
timeouts:
  gate: 8s
  node: 30s
chat:
  web: {enabled: true, token: env:TB_CONSOLE_TOKEN}
`, dir, addr, e.c.Nodes()[0].IP, strings.Join(nodes, "\n      - "), tc, sim.DefaultSchematic, from, target)), 0o600); err != nil {
		t.Fatal(err)
	}
	b := &bot{t: t, bin: bin, cfg: cfg, addr: addr, token: "console-secret-resume"}
	b.start()
	t.Cleanup(func() {
		if b.cmd.ProcessState == nil {
			_ = b.cmd.Process.Kill()
			_ = b.cmd.Wait()
		}
	})
	b.command("/talos upgrade talos " + target + " staging")

	// Hold the roll after node 2 of 5 so the kill lands between nodes 2 and
	// 3 whatever the timing: once worker-2's upgrade is requested, cp-1
	// reports an unhealthy service, so the gate after worker-2 keeps failing
	// and retries (up to the 8 s gate timeout) instead of moving on.
	b.waitFor("node 2 of 5 to start", 2*time.Minute, func() bool { return e.upgradeCalls("worker-2") == 1 })
	if err := e.c.Inject(ctxFor(t, time.Minute), "cp-1", sim.Fault{UnhealthyService: "syslogd"}); err != nil {
		t.Fatal(err)
	}
	var opID string
	b.waitFor("node 2 of 5 to be done", time.Minute, func() bool {
		m, ok := b.find(func(m consoleMsg) bool {
			return m.field("Operation") != "" && strings.Contains(m.Text, "✅ node 2/5 worker-2")
		})
		opID = m.field("Operation")
		return ok
	})
	atKill := b.messages()
	if err := b.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = b.cmd.Wait()
	if opID == "" {
		t.Fatal("no operation id seen")
	}
	killed := map[string]int{}
	for _, n := range e.names() {
		killed[n] = e.upgradeCalls(n)
	}
	if killed["worker-1"] != 1 || killed["worker-2"] != 1 || killed["cp-1"]+killed["cp-2"]+killed["cp-3"] != 0 {
		t.Fatalf("at the kill: %v, want only the workers upgraded\n%v", killed, atKill)
	}

	if err := e.c.ClearAll(ctxFor(t, time.Minute)); err != nil {
		t.Fatal(err)
	}
	b.start()
	b.command("/talos resume " + opID)
	var final consoleMsg
	b.waitFor("the resumed roll to succeed", 3*time.Minute, func() bool {
		m, ok := b.find(func(m consoleMsg) bool {
			return m.field("Operation") == opID && (m.field("State") == "succeeded" || m.field("State") == "failed")
		})
		final = m
		return ok
	})
	if final.field("State") != "succeeded" {
		t.Fatalf("resumed roll: %+v\nbot stderr:\n%s", final, b.stderr)
	}
	_ = b.cmd.Process.Signal(syscall.SIGTERM)
	_ = b.cmd.Wait()

	for _, n := range e.names() {
		if got := e.upgradeCalls(n); got != 1 {
			t.Errorf("%s: %d upgrade calls over both runs, want exactly 1 (at the kill: %d)", n, got, killed[n])
		}
		if v := e.c.NodeVersion(n); v != target {
			t.Errorf("%s runs %s", n, v)
		}
	}
	// The resumed run skipped nodes 1–2 (already at the target).
	for _, want := range []string{"3 upgraded, 2 already there", "⏭️ node 1/5 worker-1", "⏭️ node 2/5 worker-2"} {
		if !strings.Contains(final.Text, want) {
			t.Fatalf("final message lacks %q: %s", want, final.Text)
		}
	}
	if strings.Contains(b.stderr.String(), b.token) {
		t.Fatal("the console token reached the log")
	}
}
