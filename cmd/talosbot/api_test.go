package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/csv"
	"errors"
	"fmt"
	"github.com/talosbot/talosbot/internal/servetest"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/talosbot/talosbot/bot/auditview"
	"github.com/talosbot/talosbot/state"
)

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	raw, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, raw, 0o600); err != nil {
		t.Fatal(err)
	}
}

func runBin(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	cmd := exec.Command(talosbotBinary(t), args...)
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		code = ee.ExitCode()
	case err != nil:
		t.Fatal(err)
	}
	return o.String(), e.String(), code
}

// TestAuditVerifyFindsTamperedRecordInCopy edits one audit record of a copied
// database directly with bbolt (as an attacker with file access would) and
// expects `talosbot audit verify` to name it, while the original verifies.
func TestAuditVerifyFindsTamperedRecordInCopy(t *testing.T) {
	dir := t.TempDir()
	orig := filepath.Join(dir, "talosbot.db")
	st, err := state.Open(orig, state.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for i := 1; i <= 20; i++ {
		if _, err := st.AppendAudit(ctx, state.AuditEvent{Actor: "alice", Action: "approval", Cluster: "production", OpID: fmt.Sprintf("op%d", i), Result: "ok"}); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	tampered := filepath.Join(dir, "copy.db")
	copyFile(t, orig, tampered)
	db, err := bolt.Open(tampered, 0o600, &bolt.Options{Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	key := make([]byte, 8)
	binary.BigEndian.PutUint64(key, 7)
	err = db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket([]byte("audit"))
		if b == nil {
			return errors.New("no audit bucket")
		}
		v := b.Get(key)
		if !bytes.Contains(v, []byte(`"actor":"alice"`)) {
			return fmt.Errorf("record 7 is %s", v)
		}
		return b.Put(key, bytes.Replace(v, []byte(`"actor":"alice"`), []byte(`"actor":"mallo"`), 1))
	})
	if cerr := db.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatal(err)
	}

	out, _, code := runBin(t, "audit", "verify", "--db", orig)
	if code != 0 || !strings.Contains(out, "audit chain OK: 20 records") {
		t.Fatalf("original: exit %d, %s", code, out)
	}
	out, errOut, code := runBin(t, "audit", "verify", "--db", tampered)
	if code == 0 {
		t.Fatalf("tampered copy verified: %s", out)
	}
	if msg := out + errOut; !strings.Contains(msg, "7") || !strings.Contains(msg, "edited") {
		t.Fatalf("the report does not name record 7 as edited: %s", msg)
	}
}

func TestAuditExportCSVParsesBack(t *testing.T) {
	db := filepath.Join(t.TempDir(), "talosbot.db")
	st, err := state.Open(db, state.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for i := 0; i < 30; i++ {
		cl := []string{"staging", "production"}[i%2]
		if _, err := st.AppendAudit(ctx, state.AuditEvent{Actor: "bob", Action: "requested", Cluster: cl, Command: "upgrade talos",
			Result: "ok", Detail: map[string]string{"text": `say "hi", then` + "\nleave"}}); err != nil {
			t.Fatal(err)
		}
	}
	_ = st.Close()
	out, errOut, code := runBin(t, "audit", "export", "--db", db, "--format", "csv", "--cluster", "production", "--op", "upgrade talos")
	if code != 0 {
		t.Fatalf("export: exit %d %s", code, errOut)
	}
	rows, err := csv.NewReader(strings.NewReader(out)).ReadAll()
	if err != nil {
		t.Fatalf("CSV: %v", err)
	}
	if strings.Join(rows[0], ",") != strings.Join(auditview.CSVHeader(), ",") || len(rows) != 16 {
		t.Fatalf("header %v, %d rows", rows[0], len(rows))
	}
	for _, r := range rows[1:] {
		if r[4] != "production" || r[8] != `text=say "hi", then`+"\nleave" {
			t.Fatalf("row %q", r)
		}
	}
}

// TestServeAuditAPIAlertWebhookAndMetrics runs `talosbot serve` with the
// audit API and the alert webhook configured and checks them end to end.
func TestServeAuditAPIAlertWebhookAndMetrics(t *testing.T) {
	slow(t)
	dir := t.TempDir()
	plugin, sum := buildEnginePlugin(t)
	tc := filepath.Join(dir, "talosconfig")
	auditTok, alertTok := "audit-secret-e2e-0123456789abcdef", "alert-secret-e2e-0123456789abcdef"
	for p, v := range map[string]string{tc: "context: e2e\n", filepath.Join(dir, "audit-token"): auditTok, filepath.Join(dir, "alert-token"): alertTok} {
		if err := os.WriteFile(p, []byte(v), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	addr := servetest.FreeAddr(t)
	cfg := filepath.Join(dir, "talosbot.yaml")
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf(`
data_dir: %[1]s/data
listen: %[2]s
clusters:
  - name: staging
    environment: staging
    channels: [ops]
    endpoints: [127.0.0.1]
    nodes: [{name: cp-1, address: 127.0.0.1, role: controlplane, host: pve1}]
    credentials: {source: files, talosconfig: "file:%[3]s"}
policy: {staging: {operators: ["*"]}}
chat:
  web: {enabled: true, users: [{name: alice, token: env:TB_CONSOLE_TOKEN_ALICE}]}
audit: {token: "file:%[1]s/audit-token", log_retention: 7d}
alerts:
  token: "file:%[1]s/alert-token"
  rules:
    - name: node-not-ready
      match: {alertname: KubeNodeNotReady}
      text: a node of {{cluster}} is not ready
      commands: ["/talos probe {{cluster}}"]
plugins:
  external: [{name: eng, path: %[4]s, sha256: %[5]s}]
`, dir, addr, tc, plugin, sum)), 0o600); err != nil {
		t.Fatal(err)
	}
	b := &servetest.Bot{T: t, Bin: talosbotBinary(t), Config: cfg, Addr: addr, Tokens: servetest.NewTokens(t, "alice")}
	b.Start()
	defer func() { _ = b.Cmd.Process.Signal(syscall.SIGTERM); _ = b.Cmd.Wait() }()
	base := "http://" + addr

	if code := b.Post("/api/console/commands", map[string]string{"user": "alice", "channel": "ops", "text": "/talos probe staging"}); code != 202 {
		t.Fatalf("command: HTTP %d", code)
	}
	b.WaitFor("the probe to succeed", func() bool {
		return b.HasMessage("ops", func(m servetest.Message) bool {
			return strings.Contains(m.Title, "probe") && strings.Contains(m.Title, "✅")
		})
	})

	get := func(path, tok string) (int, string) {
		req, _ := http.NewRequest("GET", base+path, nil)
		if tok != "" {
			req.Header.Set("Authorization", "Bearer "+tok)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(raw)
	}
	for _, tok := range []string{"", alertTok, "console-secret-e2e"} {
		if code, _ := get("/api/audit", tok); code != 401 {
			t.Fatalf("audit API with token %q: %d, want 401", tok, code)
		}
	}
	code, body := get("/api/audit?format=csv&cluster=staging&user=alice", auditTok)
	if code != 200 {
		t.Fatalf("audit API: %d %s", code, body)
	}
	rows, err := csv.NewReader(strings.NewReader(body)).ReadAll()
	if err != nil || len(rows) < 2 || rows[len(rows)-1][3] != "requested" || rows[len(rows)-1][6] != "probe" {
		t.Fatalf("audit CSV %v %v", rows, err)
	}

	alert := `{"version":"4","groupKey":"{}:{alertname=\"KubeNodeNotReady\"}","status":"firing","receiver":"talosbot",
	  "commonLabels":{"alertname":"KubeNodeNotReady","cluster":"staging","node":"w-1"},
	  "alerts":[{"status":"firing","labels":{"alertname":"KubeNodeNotReady","cluster":"staging","node":"w-1"},"startsAt":"2026-05-01T12:00:00Z"}]}`
	postAlert := func(tok string) int {
		req, _ := http.NewRequest("POST", base+"/api/alerts/alertmanager", strings.NewReader(alert))
		req.Header.Set("Authorization", "Bearer "+tok)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := postAlert(auditTok); code != 401 {
		t.Fatalf("alert with the audit token: %d, want 401", code)
	}
	if code := postAlert(alertTok); code != 200 {
		t.Fatalf("alert: %d", code)
	}
	b.WaitFor("the alert suggestion", func() bool {
		return b.HasMessage("ops", func(m servetest.Message) bool {
			return strings.Contains(m.Title, "KubeNodeNotReady") && strings.Contains(m.Text, "a node of staging is not ready")
		})
	})

	code, metrics := get("/metrics", "")
	if code != 200 {
		t.Fatalf("/metrics: %d", code)
	}
	for _, want := range []string{
		`talosbot_operations_total{command="probe",result="succeeded"} 1`,
		`talosbot_operation_duration_seconds_count{command="probe",result="succeeded"} 1`,
		`talosbot_chat_events_total{kind="command",platform="console"} 1`,
		`talosbot_alert_suggestions_total{outcome="posted",rule="node-not-ready"} 1`,
	} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	for _, tok := range []string{auditTok, alertTok} {
		if strings.Contains(b.Stderr.String(), tok) {
			t.Fatal("a token reached the log")
		}
	}
}

func TestDemoTokenIsPrivateAndRandom(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "demo-token")
	// A pre-existing file readable by others is tightened.
	if err := os.WriteFile(p, []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	tok, err := newDemoToken(dir)
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := os.ReadFile(p)
	if fi.Mode().Perm() != 0o600 || strings.TrimSpace(string(raw)) != tok || len(tok) != 48 {
		t.Fatalf("mode %v, file %q, token %q", fi.Mode().Perm(), raw, tok)
	}
	if tok2, _ := newDemoToken(dir); tok2 == tok {
		t.Fatal("two demo tokens are equal")
	}
}
