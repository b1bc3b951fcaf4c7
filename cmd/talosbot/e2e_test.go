package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
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

	"github.com/talosbot/talosbot/state"
)

// binPath is the binary under test: $TALOSBOT_BIN (make test sets it) or a
// build made once by TestMain.
var binPath string

func TestMain(m *testing.M) {
	binPath = os.Getenv("TALOSBOT_BIN")
	var tmp string
	if binPath == "" {
		var err error
		if tmp, err = os.MkdirTemp("", "talosbot-bin"); err != nil {
			panic(err)
		}
		binPath = filepath.Join(tmp, "talosbot")
		if b, err := exec.Command("go", "build", "-o", binPath, ".").CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "build talosbot: %v\n%s", err, b)
			os.Exit(1)
		}
	}
	code := m.Run()
	if tmp != "" {
		_ = os.RemoveAll(tmp)
	}
	os.Exit(code)
}

func talosbotBinary(*testing.T) string { return binPath }

func buildEnginePlugin(t *testing.T) (path, sum string) {
	t.Helper()
	path = filepath.Join(t.TempDir(), "engineplugin")
	if b, err := exec.Command("go", "build", "-o", path, "../../bot/testdata/engineplugin").CombinedOutput(); err != nil {
		t.Fatalf("build engineplugin: %v\n%s", err, b)
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	h := sha256.Sum256(raw)
	return path, hex.EncodeToString(h[:])
}

func freeAddr(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

type botProc struct {
	t      *testing.T
	bin    string
	cfg    string
	addr   string
	token  string
	cmd    *exec.Cmd
	stderr *bytes.Buffer
}

func (b *botProc) start() {
	b.t.Helper()
	b.cmd = exec.Command(b.bin, "serve", "--config", b.cfg)
	b.stderr = &bytes.Buffer{}
	b.cmd.Stderr = b.stderr
	b.cmd.Env = append(os.Environ(), "TB_CONSOLE_TOKEN="+b.token)
	if err := b.cmd.Start(); err != nil {
		b.t.Fatal(err)
	}
	b.waitFor("readyz", func() bool {
		resp, err := http.Get("http://" + b.addr + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	})
}

func (b *botProc) waitFor(what string, cond func() bool) {
	b.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			var msgs []string
			for _, m := range b.messages() {
				msgs = append(msgs, m.Title+" | "+m.Text)
			}
			b.t.Fatalf("timed out waiting for %s; console:\n%s\nbot stderr:\n%s", what, strings.Join(msgs, "\n"), b.stderr)
		}
		<-tick.C
	}
}

func (b *botProc) post(path string, body any) int {
	b.t.Helper()
	raw, _ := json.Marshal(body)
	req, _ := http.NewRequest("POST", "http://"+b.addr+path, bytes.NewReader(raw))
	req.Header.Set("Authorization", "Bearer "+b.token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		b.t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// childPIDs lists the processes whose parent is pid.
func childPIDs(pid int) []int {
	var out []int
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		raw, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid …; comm may contain spaces, so cut at the last ')'.
		s := string(raw)
		fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		if len(fields) > 1 && fields[1] == fmt.Sprint(pid) {
			var child int
			fmt.Sscan(e.Name(), &child)
			out = append(out, child)
		}
	}
	return out
}

// alive reports whether pid runs (a zombie counts as dead).
func alive(pid int) bool {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	s := string(raw)
	fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	return len(fields) > 0 && fields[0] != "Z"
}

type apiMsg struct {
	ID      string `json:"id"`
	Text    string `json:"text"`
	Title   string `json:"title"`
	Fields  []struct{ Label, Value string }
	Buttons []struct {
		ActionID string `json:"action_id"`
		Label    string `json:"label"`
	} `json:"buttons"`
}

func (b *botProc) messages() []apiMsg {
	req, _ := http.NewRequest("GET", "http://"+b.addr+"/api/console/messages?channel=ops", nil)
	req.Header.Set("Authorization", "Bearer "+b.token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil
	}
	defer resp.Body.Close()
	var out struct{ Messages []apiMsg }
	_ = json.NewDecoder(resp.Body).Decode(&out)
	return out.Messages
}

func (b *botProc) hasMessage(pred func(apiMsg) bool) bool {
	for _, m := range b.messages() {
		if pred(m) {
			return true
		}
	}
	return false
}

// TestServeSIGKILLLeavesInterruptedOperation runs `talosbot serve` as a real
// process, kills it with SIGKILL while a disruptive operation runs, restarts
// it and checks that the operation is interrupted (not running, not lost),
// that its lock still holds, and that the audit chain verifies.
func TestServeSIGKILLLeavesInterruptedOperation(t *testing.T) {
	dir := t.TempDir()
	plugin, sum := buildEnginePlugin(t)
	tc := filepath.Join(dir, "talosconfig")
	if err := os.WriteFile(tc, []byte("context: e2e\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	addr := freeAddr(t)
	cfg := filepath.Join(dir, "talosbot.yaml")
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf(`
data_dir: %s/data
listen: %s
clusters:
  - name: staging
    environment: staging
    channels: [ops]
    endpoints: [127.0.0.1]
    nodes: [{name: cp-1, address: 127.0.0.1, role: controlplane, host: pve1}]
    credentials: {source: files, talosconfig: "file:%s"}
chat:
  web: {enabled: true, token: env:TB_CONSOLE_TOKEN}
plugins:
  external: [{name: eng, path: %s, sha256: %s}]
`, dir, addr, tc, plugin, sum)), 0o600); err != nil {
		t.Fatal(err)
	}
	b := &botProc{t: t, bin: talosbotBinary(t), cfg: cfg, addr: addr, token: "console-secret-e2e"}
	b.start()
	if code := b.post("/api/console/commands", map[string]string{"user": "alice", "channel": "ops", "text": "/talos roll v2 staging --mode wait"}); code != 202 {
		t.Fatalf("command: HTTP %d", code)
	}
	var opID string
	b.waitFor("the roll to run", func() bool {
		return b.hasMessage(func(m apiMsg) bool {
			running := false
			for _, f := range m.Fields {
				if f.Label == "Operation" {
					opID = f.Value
				}
				running = running || (f.Label == "State" && f.Value == "running")
			}
			return running
		})
	})
	children := childPIDs(b.cmd.Process.Pid)
	if len(children) == 0 {
		t.Fatal("the running operation has no plugin process")
	}
	if err := b.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = b.cmd.Wait()
	// An orphaned plugin would go on changing the cluster untracked.
	b.waitFor("the plugin processes to die with the bot", func() bool {
		for _, pid := range children {
			if alive(pid) {
				return false
			}
		}
		return true
	})

	b.start()
	if code := b.post("/api/console/commands", map[string]string{"user": "alice", "channel": "ops", "text": "/talos status staging"}); code != 202 {
		t.Fatalf("status: HTTP %d", code)
	}
	b.waitFor("status to show the interrupted operation", func() bool {
		return b.hasMessage(func(m apiMsg) bool {
			return strings.Contains(m.Text, "locked by `"+opID+"`") && strings.Contains(m.Text, "/talos resume "+opID)
		})
	})
	// Bad input over the API gets 400 and a reason, never a crash.
	if code := b.post("/api/console/commands", map[string]string{"user": "alice", "channel": "nowhere", "text": "/talos status"}); code != 400 {
		t.Fatalf("unbound channel: HTTP %d, want 400", code)
	}
	_ = b.cmd.Process.Signal(syscall.SIGTERM)
	_ = b.cmd.Wait()

	db := filepath.Join(dir, "data", "talosbot.db")
	st, err := state.Open(db, state.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ctx := context.Background()
	var op *state.Operation
	if err := st.View(ctx, func(tx *state.Tx) error { op, err = tx.Operation(opID); return err }); err != nil {
		t.Fatal(err)
	}
	if op.State != state.StateInterrupted {
		t.Fatalf("op state = %s, want interrupted", op.State)
	}
	recs, err := st.QueryAudit(ctx, state.AuditQuery{OpID: opID, Action: "interrupted"})
	if err != nil || len(recs) != 1 {
		t.Fatalf("interrupted audit record: %v %v", recs, err)
	}
	if _, err := st.VerifyAudit(ctx); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(b.stderr.String(), b.token) {
		t.Fatal("the console token reached the log")
	}
}
