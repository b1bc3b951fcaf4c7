package main

import (
	"context"
	"crypto/ed25519"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/talosbot/talosbot/bot/alerts"
	"github.com/talosbot/talosbot/bot/chat/discord/discordfake"
	"github.com/talosbot/talosbot/bot/chat/slack/slackfake"
	"github.com/talosbot/talosbot/internal/servetest"
)

// TestServeChatInputIsNotMarkup attacks a real `talosbot serve` the way
// anyone in a channel can (issue 29, defect 3): with text that Slack reads
// as a mention or a disguised link, that Discord would ping, or that a
// browser would run. Whatever the bot repeats — a cluster name it does not
// know, a freeze reason, an alert's labels and summary — reaches Slack
// escaped (&lt; &gt; &amp;), reaches Discord with allowed_mentions parsing
// nothing and its mention syntax escaped, and reaches the console as text.
// A 60 KB cluster name is echoed as a short prefix.
func TestServeChatInputIsNotMarkup(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	const (
		discordTok  = "MARKUP.discord-bot-token.5a6b"
		discordUser = "500000000000000002"
		discordChan = "600000000000000002"
		alertsTok   = "markup-alerts-token-11cc-0123456789abcdef"
		slackBot    = "xoxb-MARKUP-slack-bot-7d8e"
		slackSecret = "markup-slack-signing-secret-2f3a"
		slackUser   = "U0MARKUPOP"
		slackChan   = "C0MARKUP"
		here        = "<!here>"
		channel     = "<!channel>"
		disguised   = "<https://evil.example|Approve here>"
	)
	sf, err := slackfake.Start(slackfake.Options{BotToken: slackBot})
	must(t, err)
	t.Cleanup(sf.Close)
	df, err := discordfake.Start(discordfake.Options{Token: discordTok})
	must(t, err)
	t.Cleanup(df.Close)
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	must(t, err)

	// Slack is the cluster's first channel, so its alerts are posted there.
	b := servetest.Config{Dir: dir, Users: []string{"alice"},
		Clusters: []servetest.Cluster{{Name: "production", Channels: []string{"slack:" + slackChan, "ops", "discord:" + discordChan},
			Endpoints: []string{"127.0.0.1"}, Talosconfig: []byte("context: e2e\n"), Nodes: []string{"{name: cp-1, address: 127.0.0.1, role: controlplane, host: pve1}"}}},
		Policy: fmt.Sprintf(`{production: {approvers: [alice], operators: [alice, "%s", %s]}}`, discordUser, slackUser),
		Chat: fmt.Sprintf("  discord: {token: env:TB_DISCORD, application_id: \"%s\", public_key: %s, api_url: \"%s\"}\n"+
			"  slack: {mode: http, bot_token: env:TB_SLACK_BOT, signing_secret: env:TB_SLACK_SIGNING, api_url: \"%s\"}\n",
			df.ApplicationID(), hex.EncodeToString(pub), df.URL(), sf.APIURL()),
		Extra: "alerts: {token: env:TB_ALERTS, rules: [{name: etcd-no-leader, match_re: {alertname: etcdNoLeader}, text: \"etcd on {{cluster}} has no leader\"}]}\n",
	}.Bot(t, talosbotBinary(t))
	b.Env = []string{"TB_DISCORD=" + discordTok, "TB_ALERTS=" + alertsTok, "TB_SLACK_BOT=" + slackBot, "TB_SLACK_SIGNING=" + slackSecret}
	b.Start()
	t.Cleanup(func() {
		_ = b.Cmd.Process.Signal(syscall.SIGTERM)
		_ = b.Cmd.Wait()
	})

	// slash sends a signed Slack slash command, as Slack would.
	slash := func(t *testing.T, text string) {
		t.Helper()
		body := url.Values{"command": {"/talos"}, "text": {text}, "user_id": {slackUser}, "channel_id": {slackChan},
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
			t.Fatalf("slash command %q: %d %s", text, resp.StatusCode, raw)
		}
	}
	// posted waits for a chat.postMessage or chat.update to the Slack
	// channel whose text and blocks contain want, and returns both.
	posted := func(t *testing.T, want string) string {
		t.Helper()
		wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
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
	// noRaw fails when any Slack call carried raw.
	noRaw := func(t *testing.T, raw ...string) {
		t.Helper()
		for _, r := range sf.Records() {
			for _, s := range raw {
				if r.Kind == "api" && strings.Contains(slackText(t, r), s) {
					t.Fatalf("%s to Slack carried %q unescaped: %s", r.Method, s, slackText(t, r))
				}
			}
		}
	}

	t.Run("slack: an unknown cluster is echoed escaped", func(t *testing.T) {
		slash(t, "status "+here)
		got := posted(t, "unknown cluster")
		if !strings.Contains(got, "&lt;!here&gt;") {
			t.Fatalf("the reply does not show the escaped name: %s", got)
		}
		noRaw(t, here)
	})

	t.Run("slack: a freeze reason is escaped", func(t *testing.T) {
		slash(t, fmt.Sprintf("freeze production %q", channel+" "+disguised))
		got := posted(t, "production is frozen")
		if !strings.Contains(got, "&lt;!channel&gt; &lt;https://evil.example|Approve here&gt;") {
			t.Fatalf("the freeze reason is not escaped: %s", got)
		}
		noRaw(t, here, channel, disguised)
		slash(t, "unfreeze production")
		posted(t, "production is unfrozen")
	})

	t.Run("slack: an alert's labels and summary are escaped", func(t *testing.T) {
		payload := map[string]any{"version": "4", "groupKey": `{}:{alertname="etcdNoLeader"}`, "status": "firing", "receiver": "talosbot",
			"commonLabels": map[string]string{"alertname": "etcdNoLeader", "cluster": "production"},
			"alerts": []map[string]any{{"status": "firing", "startsAt": "2026-11-30T12:00:00Z",
				"labels":      map[string]string{"alertname": "etcdNoLeader", "cluster": "production", "node": channel},
				"annotations": map[string]string{"summary": here + " " + disguised}}}}
		raw, _ := json.Marshal(payload)
		req, _ := http.NewRequest("POST", "http://"+b.Addr+alerts.Path, strings.NewReader(string(raw)))
		req.Header.Set("Authorization", "Bearer "+alertsTok)
		resp, err := http.DefaultClient.Do(req)
		must(t, err)
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("alert: %d %s", resp.StatusCode, body)
		}
		got := posted(t, "etcdNoLeader")
		for _, want := range []string{"node=&lt;!channel&gt;", "&lt;!here&gt; &lt;https://evil.example|Approve here&gt;"} {
			if !strings.Contains(got, want) {
				t.Fatalf("the alert message lacks %q: %s", want, got)
			}
		}
		noRaw(t, here, channel, disguised)
	})

	t.Run("console: a 60 KB cluster name is echoed as a short prefix", func(t *testing.T) {
		long := strings.Repeat("x", 60<<10)
		b.Command("alice", "ops", "status "+long)
		var reply servetest.Message
		b.WaitFor("the unknown-cluster reply", func() bool {
			for _, m := range b.Messages("ops") {
				if strings.Contains(m.Text, "unknown cluster") {
					reply = m
					return true
				}
			}
			return false
		})
		if len(reply.Text) > 1024 || !strings.Contains(reply.Text, `"`+strings.Repeat("x", 64)+`"…`) {
			t.Fatalf("the reply (%d bytes) is not a short prefix of the input: %.300s", len(reply.Text), reply.Text)
		}
	})

	t.Run("console: HTML in chat text is shown as text", func(t *testing.T) {
		const img = `<img src=x onerror=alert(1)>`
		b.Command("alice", "ops", fmt.Sprintf("freeze production %q", img+" "+disguised))
		b.WaitFor("the freeze", func() bool {
			return b.HasMessage("ops", func(m servetest.Message) bool { return strings.Contains(m.Text, "Reason: "+img) })
		})
		req, _ := http.NewRequest("GET", "http://"+b.Addr+"/api/console/messages?channel=ops", nil)
		req.Header.Set("Authorization", "Bearer "+b.Tokens["alice"])
		resp, err := http.DefaultClient.Do(req)
		must(t, err)
		var out struct{ Messages []struct{ Text, HTML string } }
		must(t, json.NewDecoder(resp.Body).Decode(&out))
		resp.Body.Close()
		found := false
		for _, m := range out.Messages {
			if strings.Contains(m.HTML, "<img") || strings.Contains(m.HTML, ">Approve here<") {
				t.Fatalf("the console page would render the user's markup: %s", m.HTML)
			}
			found = found || strings.Contains(m.HTML, "Reason: &lt;img src=x onerror=alert(1)&gt;")
		}
		if !found {
			t.Fatalf("no console message shows the reason as text: %+v", out.Messages)
		}
		b.Command("alice", "ops", "unfreeze production")
		b.WaitFor("the unfreeze", func() bool {
			return b.HasMessage("ops", func(m servetest.Message) bool { return strings.Contains(m.Text, "production is unfrozen") })
		})
	})

	// replies counts the bot's "unknown cluster" replies in the Discord channel.
	replies := func(rs []discordfake.Record) int {
		n := 0
		for _, r := range rs {
			if r.Kind == "rest" && r.Method == "POST" && strings.HasSuffix(r.Path, "/channels/"+discordChan+"/messages") &&
				strings.Contains(string(r.Body), "unknown cluster") {
				n++
			}
		}
		return n
	}
	// discordStatus sends /talos status with a cluster name that is markup,
	// as Discord would, and waits for its "unknown cluster" reply.
	discordStatus := func(t *testing.T, typed string) []discordfake.Record {
		t.Helper()
		before := replies(df.Records())
		_, p := df.SlashCommandPayload(discordUser, discordChan, typed)
		body, _ := json.Marshal(p)
		stamp := strconv.FormatInt(time.Now().Unix(), 10)
		req, _ := http.NewRequest("POST", "http://"+b.Addr+"/discord/interactions", strings.NewReader(string(body)))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-Signature-Timestamp", stamp)
		req.Header.Set("X-Signature-Ed25519", hex.EncodeToString(ed25519.Sign(priv, append([]byte(stamp), body...))))
		resp, err := http.DefaultClient.Do(req)
		must(t, err)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("discord interaction: %d", resp.StatusCode)
		}
		wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		rs, err := df.WaitFor(wctx, func(rs []discordfake.Record) bool { return replies(rs) > before })
		if err != nil {
			t.Fatalf("no Discord reply to %q: %v", typed, err)
		}
		return rs
	}

	t.Run("discord: nothing pings and mentions are escaped", func(t *testing.T) {
		_, p := df.SlashCommandPayload(discordUser, discordChan, `status "<@&700000000000000001> @everyone [Approve here](https://evil.example)"`)
		body, _ := json.Marshal(p)
		stamp := strconv.FormatInt(time.Now().Unix(), 10)
		req, _ := http.NewRequest("POST", "http://"+b.Addr+"/discord/interactions", strings.NewReader(string(body)))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-Signature-Timestamp", stamp)
		req.Header.Set("X-Signature-Ed25519", hex.EncodeToString(ed25519.Sign(priv, append([]byte(stamp), body...))))
		resp, err := http.DefaultClient.Do(req)
		must(t, err)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("discord interaction: %d", resp.StatusCode)
		}
		wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		rs, err := df.WaitFor(wctx, func(rs []discordfake.Record) bool {
			reply, echo := false, false
			for _, r := range rs {
				if r.Kind == "rest" && r.Method == "POST" && strings.HasSuffix(r.Path, "/channels/"+discordChan+"/messages") &&
					strings.Contains(string(r.Body), "unknown cluster") {
					reply = true
				}
				echo = echo || r.Kind == "rest" && r.Method == "PATCH" && strings.HasSuffix(r.Path, "/messages/@original")
			}
			return reply && echo
		})
		if err != nil {
			t.Fatalf("no Discord reply: %v", err)
		}
		sent := 0
		for _, r := range rs {
			if r.Kind != "rest" || (r.Method != "POST" && r.Method != "PATCH") || !strings.Contains(r.Path, "/messages") {
				continue
			}
			var m struct {
				Content         string          `json:"content"`
				AllowedMentions json.RawMessage `json:"allowed_mentions"`
			}
			must(t, json.Unmarshal(r.Body, &m))
			if m.Content == "" {
				continue
			}
			sent++
			var am struct{ Parse *[]string }
			if json.Unmarshal(m.AllowedMentions, &am) != nil || am.Parse == nil || len(*am.Parse) != 0 {
				t.Fatalf("%s %s has allowed_mentions %s, want an empty parse list: %s", r.Method, r.Path, m.AllowedMentions, r.Body)
			}
			if strings.Contains(r.Path, "/channels/") {
				for _, bad := range []string{"<@&", "@everyone", "[Approve here]"} {
					if strings.Contains(m.Content, bad) && !strings.Contains(m.Content, `\`+bad) {
						t.Fatalf("the reply shows %q unescaped: %s", bad, m.Content)
					}
				}
				if !strings.Contains(m.Content, `\<@&700000000000000001>`) || !strings.Contains(m.Content, "@\u200beveryone") {
					t.Fatalf("the reply does not escape the mentions: %q", m.Content)
				}
			}
		}
		if sent < 2 { // the reply in the channel and the interaction's echo
			t.Fatalf("saw %d Discord messages with content, want the reply and the echo", sent)
		}
	})

	// A backtick that Discord does not pair (one backtick, then a run of
	// two) opens no code span, so the masked link after it is shown as a
	// link unless it is escaped. Escape used to take any backtick as the
	// close and left the link verbatim.
	t.Run("discord: an unpaired backtick does not shield a masked link", func(t *testing.T) {
		rs := discordStatus(t, "status \"`[Approve here](https://evil.example)``\"")
		found := false
		for _, r := range rs {
			if r.Kind != "rest" || r.Method != "POST" || !strings.HasSuffix(r.Path, "/channels/"+discordChan+"/messages") {
				continue
			}
			var m struct{ Content string }
			must(t, json.Unmarshal(r.Body, &m))
			if !strings.Contains(m.Content, "(https://evil.example)") {
				continue
			}
			found = true
			if !strings.Contains(m.Content, `\[Approve here]`) {
				t.Fatalf("the reply shows a masked link Discord would render: %q", m.Content)
			}
		}
		if !found {
			t.Fatal("no reply quoted the typed cluster name")
		}
	})
}

// slackText is what a Slack call shows: its text and every string in its
// blocks (decoded: the JSON escapes '<' and '&' as \u003c and \u0026).
func slackText(t *testing.T, r slackfake.Record) string {
	t.Helper()
	out := []string{r.Params.Get("text")}
	var walk func(v any)
	walk = func(v any) {
		switch v := v.(type) {
		case string:
			out = append(out, v)
		case []any:
			for _, e := range v {
				walk(e)
			}
		case map[string]any:
			for _, e := range v {
				walk(e)
			}
		}
	}
	if raw := r.Params.Get("blocks"); raw != "" {
		var v any
		must(t, json.Unmarshal([]byte(raw), &v))
		walk(v)
	}
	return strings.Join(out, "\n")
}
