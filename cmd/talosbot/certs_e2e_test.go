package main

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/talosbot/talosbot/bot/chat/slack/slackfake"
	"github.com/talosbot/talosbot/internal/servetest"
	"github.com/talosbot/talosbot/sim"
)

// TestServeCertsAndExpiryNotice: through `talosbot serve` and Slack (the
// fake), `/talos certs` lists the simulated cluster's certificates, and the
// every-minute expiry check (notice_days [366]: the sim's one-year
// talosconfig is inside it from the start) posts one notice with its
// buttons. The sim's CAs are named after it, and its name carries Slack
// markup: it reaches Slack escaped. No key material reaches chat.
func TestServeCertsAndExpiryNotice(t *testing.T) {
	t.Parallel()
	slow(t)
	ctx := context.Background()
	dir := t.TempDir()
	const (
		slackBot    = "xoxb-CERTS-slack-bot-1a2b"
		slackSecret = "certs-slack-signing-secret-3c4d"
		slackUser   = "U0CERTSOP"
		slackChan   = "C0CERTS"
		markup      = "<!channel>"
	)
	c, err := sim.Start(ctx, sim.Options{Dir: filepath.Join(dir, "sim"), Name: "lab" + markup, ControlPlanes: 1})
	must(t, err)
	t.Cleanup(func() { _ = c.Close() })
	sf, err := slackfake.Start(slackfake.Options{BotToken: slackBot})
	must(t, err)
	t.Cleanup(sf.Close)
	b := servetest.Config{Dir: dir, Clusters: []servetest.Cluster{{Sim: c, Channels: []string{"slack:" + slackChan, "ops"}}},
		Policy: fmt.Sprintf(`{staging: {operators: [alice, %s]}}`, slackUser),
		Chat:   "  slack: {mode: http, bot_token: env:TB_SLACK_BOT, signing_secret: env:TB_SLACK_SIGNING, api_url: \"" + sf.APIURL() + "\"}\n",
		Extra:  "certificates: {notice_schedule: \"* * * * *\", notice_days: [366]}\n",
	}.Bot(t, talosbotBinary(t))
	b.Env = []string{"TB_SLACK_BOT=" + slackBot, "TB_SLACK_SIGNING=" + slackSecret}
	b.Start()
	t.Cleanup(func() { _ = b.Cmd.Process.Signal(syscall.SIGTERM); _ = b.Cmd.Wait() })

	body := url.Values{"command": {"/talos"}, "text": {"certs staging"}, "user_id": {slackUser}, "channel_id": {slackChan},
		"trigger_id": {strconv.FormatInt(time.Now().UnixNano(), 10)}}.Encode()
	stamp := strconv.FormatInt(time.Now().Unix(), 10)
	mac := hmac.New(sha256.New, []byte(slackSecret))
	mac.Write([]byte("v0:" + stamp + ":" + body))
	req, _ := http.NewRequest("POST", "http://"+b.Addr+"/slack/commands", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("X-Slack-Request-Timestamp", stamp)
	req.Header.Set("X-Slack-Signature", "v0="+hex.EncodeToString(mac.Sum(nil)))
	resp, err := http.DefaultClient.Do(req)
	must(t, err)
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("slash command: %d %s", resp.StatusCode, raw)
	}

	// posted waits for a Slack message to the channel containing want.
	posted := func(want string, within time.Duration) string {
		t.Helper()
		wctx, cancel := context.WithTimeout(ctx, within)
		defer cancel()
		var got string
		_, err := sf.WaitFor(wctx, func(rs []slackfake.Record) bool {
			for _, r := range rs {
				if (r.Method == "chat.postMessage" || r.Method == "chat.update") && r.Params.Get("channel") == slackChan {
					if s := slackText(t, r); strings.Contains(s, want) {
						got = s
						return true
					}
				}
			}
			return false
		})
		if err != nil {
			t.Fatalf("no Slack message containing %q: %v", want, err)
		}
		return got
	}
	report := posted("talosconfig client certificate [client]: expires", 60*time.Second)
	for _, want := range []string{"Talos API of cp-1 (TLS handshake) [server]", "talosconfig CA bundle [ca]", "&lt;!channel", "days left"} {
		if !strings.Contains(report, want) {
			t.Errorf("the report lacks %q:\n%s", want, report)
		}
	}
	notice := posted("Certificates of staging expire soon", 2*time.Minute)
	for _, want := range []string{"talosconfig client certificate expires on", "(the 366-day notice)", "talosctl config new", "&lt;!channel"} {
		if !strings.Contains(notice, want) {
			t.Errorf("the notice lacks %q:\n%s", want, notice)
		}
	}
	notices := 0
	for _, r := range sf.Records() {
		if r.Kind != "api" {
			continue
		}
		s := slackText(t, r)
		if r.Method == "chat.postMessage" && strings.Contains(s, "Certificates of staging expire soon") {
			notices++
		}
		for _, bad := range []string{markup, "PRIVATE KEY", "BEGIN CERTIFICATE"} {
			if strings.Contains(s, bad) {
				t.Fatalf("%s to Slack carried %q: %s", r.Method, bad, s)
			}
		}
	}
	if notices != 1 {
		t.Errorf("%d notices, want 1", notices)
	}
}
