package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"github.com/talosbot/talosbot/internal/servetest"
	"io"
	"io/fs"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	clientconfig "github.com/siderolabs/talos/pkg/machinery/client/config"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/talosbot/talosbot/bot/chat/discord/discordfake"
	"github.com/talosbot/talosbot/bot/chat/slack/slackfake"
	"github.com/talosbot/talosbot/internal/testenv"
	"github.com/talosbot/talosbot/sim"
)

// TestSecretsSweep runs `talosbot serve` end to end with every command, the
// Slack and Discord adapters (against protocol fakes), the alert webhook and
// the audit API, then searches everything it left behind — its log, the chat
// transcript, the bbolt file, the data and snapshot dirs and its TMPDIR — for
// the talosconfig key, the kubeconfig token and every token. Zero hits.
func TestSecretsSweep(t *testing.T) {
	// Waits on processes and the sim's reboots, not the CPU: runs beside the package's other slow tests.
	t.Parallel()
	slow(t)
	kube := testenv.StartKube(t)
	ctx := context.Background()
	dir := t.TempDir()
	c, err := sim.Start(ctx, sim.Options{Dir: filepath.Join(dir, "sim"), Name: "staging", ControlPlanes: 1, Workers: 1,
		RebootDelay: 300 * time.Millisecond, Kube: kube.Client, Kubeconfig: kube.Kubeconfig, StaticPods: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })

	secretsDir := filepath.Join(dir, "secrets") // the only place secrets may be
	must(t, os.MkdirAll(secretsDir, 0o700))
	tcPath, kcPath := filepath.Join(secretsDir, "talosconfig"), filepath.Join(secretsDir, "kubeconfig")
	must(t, os.WriteFile(tcPath, c.Talosconfig(), 0o600))
	must(t, os.WriteFile(kcPath, kube.Kubeconfig, 0o600))

	const (
		slackBot, slackApp = "xoxb-SWEEP-slack-bot-7f3e9a1c", "xapp-1-SWEEP-slack-app-2b8d4e6f"
		discordTok         = "SWEEP.discord-bot-token.9c1a5e3b"
		consoleTok         = "sweep-console-token-4d2f-0123456789abcdef"
		alertsTok          = "sweep-alerts-token-8e1b-0123456789abcdef"
		auditTok           = "sweep-audit-token-5a7c-0123456789abcdef"
	)
	sf, err := slackfake.Start(slackfake.Options{BotToken: slackBot, AppToken: slackApp})
	must(t, err)
	t.Cleanup(sf.Close)
	df, err := discordfake.Start(discordfake.Options{Token: discordTok})
	must(t, err)
	t.Cleanup(df.Close)

	var nodes, endpoints []string
	for _, n := range c.Nodes() {
		nodes = append(nodes, fmt.Sprintf("{name: %s, address: %s, role: %s, host: %s, platform: nocloud, installer_class: default}", n.Name, n.IP, n.Role, n.Host))
		if n.Role == sim.RoleControlPlane {
			endpoints = append(endpoints, n.IP)
		}
	}
	addr := servetest.FreeAddr(t)
	dataDir := filepath.Join(dir, "data")
	cfg := filepath.Join(dir, "talosbot.yaml")
	must(t, os.WriteFile(cfg, []byte(fmt.Sprintf(`
data_dir: %s
listen: %s
clusters:
  - name: staging
    environment: staging
    channels: [ops, slack:CSWEEP, discord:400000000000000001]
    endpoints: [%s]
    nodes: [%s]
    credentials: {source: files, talosconfig: "file:%s", kubeconfig: "file:%s"}
    declared: {schematic_id: %s, talos_version: v1.12.6, kubernetes_version: v1.35.2}
releases:
  talos: [v1.12.6, v1.13.9]
  kubernetes: [1.35.2, 1.36.3]
timeouts: {gate: 20s, node: 2m}
policy: {staging: {operators: ["*"]}}
chat:
  web: {enabled: true, users: [{name: alice, token: env:SWEEP_CONSOLE}]}
  slack: {mode: socket, app_token: env:SWEEP_SLACK_APP, bot_token: env:SWEEP_SLACK_BOT, api_url: "%s"}
  discord: {token: env:SWEEP_DISCORD, application_id: "%s", api_url: "%s"}
alerts: {token: env:SWEEP_ALERTS}
audit: {token: env:SWEEP_AUDIT}
`, dataDir, addr, strings.Join(endpoints, ", "), strings.Join(nodes, ", "), tcPath, kcPath, sim.DefaultSchematic,
		sf.APIURL(), df.ApplicationID(), df.URL())), 0o600))

	tmp := filepath.Join(dir, "tmp")
	must(t, os.MkdirAll(tmp, 0o700))
	logPath := filepath.Join(dir, "talosbot.log")
	logFile, err := os.Create(logPath)
	must(t, err)
	defer logFile.Close()
	b := &servetest.Bot{T: t, Bin: talosbotBinary(t), Config: cfg, Addr: addr, Tokens: map[string]string{"alice": consoleTok}}
	b.Cmd = exec.Command(b.Bin, "serve", "--config", cfg)
	b.Stderr = &bytes.Buffer{}
	b.Cmd.Stderr = io.MultiWriter(b.Stderr, logFile)
	b.Cmd.Stdout = logFile
	b.Cmd.Env = append(os.Environ(), "TMPDIR="+tmp, "TALOSBOT_DEBUG=1",
		"SWEEP_CONSOLE="+consoleTok, "SWEEP_SLACK_APP="+slackApp, "SWEEP_SLACK_BOT="+slackBot,
		"SWEEP_DISCORD="+discordTok, "SWEEP_ALERTS="+alertsTok, "SWEEP_AUDIT="+auditTok)
	must(t, b.Cmd.Start())
	t.Cleanup(func() { _ = b.Cmd.Process.Kill(); _ = b.Cmd.Wait() })
	b.WaitFor("readyz", func() bool {
		resp, err := http.Get("http://" + addr + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	})

	// Every command, one after the other, through the console.
	seen := map[string]bool{}
	run := func(text string) {
		t.Helper()
		if code := b.Post("/api/console/commands", map[string]string{"user": "alice", "channel": "ops", "text": text}); code != 202 {
			t.Fatalf("%s: HTTP %d", text, code)
		}
		words := strings.Fields(strings.TrimPrefix(text, "/talos "))
		title := "/talos " + words[0]
		if len(words) > 1 && (words[0] == "upgrade" || words[0] == "node" || words[0] == "tf" || words[0] == "recover") {
			title += " " + words[1]
		}
		b.WaitForWithin(text+" to finish", 3*time.Minute, func() bool {
			for _, m := range b.Messages("ops") {
				st := m.Field("State")
				if strings.Contains(m.Title, title+" ·") && (st == "succeeded" || st == "failed" || st == "cancelled") && !seen[m.ID] {
					seen[m.ID] = true
					t.Logf("%s → %s", text, st)
					return true
				}
			}
			return false
		})
	}
	say := func(text string) {
		if code := b.Post("/api/console/commands", map[string]string{"user": "alice", "channel": "ops", "text": text}); code != 202 {
			t.Fatalf("%s: HTTP %d", text, code)
		}
	}
	say("/talos help")
	say("/talos status")
	run("/talos health staging")
	run("/talos snapshot staging")
	run("/talos upgrade talos v1.13.9 staging")
	run("/talos upgrade k8s 1.36.3 staging --dry-run")
	run("/talos drift staging")
	run("/talos gates staging")
	run("/talos tf plan staging")
	run("/talos rollback worker-1 staging")
	// Commands are handled concurrently: wait for each answer so that the
	// freeze is lifted before the next disruptive command.
	sayWait := func(text, answer string) {
		say(text)
		b.WaitFor(answer, func() bool {
			return b.HasMessage("ops", func(m servetest.Message) bool { return strings.Contains(m.Text, answer) })
		})
	}
	// recover: the guide opens the snapshot just taken and reads every
	// control plane's etcd; the recovery itself is refused (quorum present).
	run("/talos recover --guide staging")
	sayWait("/talos recover staging", "etcd quorum is present")
	sayWait(`/talos freeze staging "sweep"`, "staging is frozen")
	sayWait("/talos unfreeze staging", "staging is unfrozen")
	say("/talos audit --since 1h")
	run("/talos node remove worker-1 staging")

	// Slack and Discord traffic too.
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	must(t, sf.WaitConnected(wctx, 1))
	_, err = sf.SlashCommand("USWEEP", "CSWEEP", "health staging")
	must(t, err)
	must(t, df.WaitReady(wctx))
	_, err = df.SlashCommand("500000000000000001", "400000000000000001", "status staging")
	must(t, err)
	_, err = sf.WaitFor(wctx, func(rs []slackfake.Record) bool {
		for _, r := range rs {
			if r.Kind == "api" && strings.Contains(r.Method, "chat.") {
				return true
			}
		}
		return false
	})
	must(t, err)

	// The alert webhook and the audit API, with their tokens.
	alert := `{"version":"4","groupKey":"{}:{alertname=\"etcdNoLeader\"}","status":"firing","receiver":"talosbot","groupLabels":{"alertname":"etcdNoLeader"},"commonLabels":{"alertname":"etcdNoLeader","cluster":"staging"},"commonAnnotations":{},"externalURL":"http://am","alerts":[{"status":"firing","labels":{"alertname":"etcdNoLeader","cluster":"staging"},"annotations":{},"startsAt":"2026-11-30T12:00:00Z","endsAt":"0001-01-01T00:00:00Z","fingerprint":"abc"}]}`
	req, _ := http.NewRequest("POST", "http://"+addr+"/api/alerts/alertmanager", strings.NewReader(alert))
	req.Header.Set("Authorization", "Bearer "+alertsTok)
	resp, err := http.DefaultClient.Do(req)
	must(t, err)
	resp.Body.Close()
	if resp.StatusCode >= 300 {
		t.Fatalf("alert webhook: HTTP %d", resp.StatusCode)
	}
	req, _ = http.NewRequest("GET", "http://"+addr+"/api/audit?format=csv&limit=1000", nil)
	req.Header.Set("Authorization", "Bearer "+auditTok)
	resp, err = http.DefaultClient.Do(req)
	must(t, err)
	auditCSV, _ := io.ReadAll(resp.Body)
	resp.Body.Close()

	transcript, _ := json.Marshal(b.Messages("ops"))
	must(t, b.Cmd.Process.Signal(syscall.SIGTERM))
	_ = b.Cmd.Wait()

	needles := map[string]string{
		"slack bot token": slackBot, "slack app token": slackApp, "discord token": discordTok,
		"console token": consoleTok, "alerts token": alertsTok, "audit token": auditTok,
	}
	for k, v := range talosconfigSecrets(t, c.Talosconfig()) {
		needles[k] = v
	}
	kc, err := clientcmd.Load(kube.Kubeconfig)
	must(t, err)
	for name, ai := range kc.AuthInfos {
		if ai.Token != "" {
			needles["kubeconfig token ("+name+")"] = ai.Token
		}
	}
	haystacks := map[string][]byte{"bot log": mustRead(t, logPath), "console transcript": transcript, "audit API export": auditCSV}
	for _, root := range []string{dataDir, tmp} {
		_ = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err == nil && !d.IsDir() {
				haystacks[p] = mustRead(t, p)
			}
			return nil
		})
	}
	if len(haystacks) < 5 {
		t.Fatalf("too little to search: %d places", len(haystacks))
	}
	hits := 0
	for where, hay := range haystacks {
		for what, needle := range needles {
			if bytes.Contains(hay, []byte(needle)) {
				t.Errorf("%s found in %s", what, where)
				hits++
			}
		}
	}
	t.Logf("searched %d places for %d secrets: %d hits", len(haystacks), len(needles), hits)
	// The bot's TMPDIR holds nothing once it is done.
	if entries, _ := os.ReadDir(tmp); len(entries) != 0 {
		t.Errorf("files left in the bot's TMPDIR: %v", entries)
	}
}

// talosconfigSecrets returns the client key (as written in the talosconfig
// and as the PEM's inner base64) for every context.
func talosconfigSecrets(t *testing.T, raw []byte) map[string]string {
	t.Helper()
	cfg, err := clientconfig.FromBytes(raw)
	must(t, err)
	out := map[string]string{}
	for name, ctx := range cfg.Contexts {
		if ctx.Key == "" {
			continue
		}
		out["talosconfig key ("+name+")"] = ctx.Key
		pemBytes, err := base64.StdEncoding.DecodeString(ctx.Key)
		must(t, err)
		if blk, _ := pem.Decode(pemBytes); blk != nil {
			inner := base64.StdEncoding.EncodeToString(blk.Bytes)
			out["talosconfig key material ("+name+")"] = inner[:40]
		}
	}
	if len(out) == 0 {
		t.Fatal("the talosconfig has no key to search for")
	}
	return out
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func mustRead(t testing.TB, p string) []byte {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatalf("read %s: %v", p, err)
	}
	return b
}
