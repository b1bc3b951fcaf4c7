package slack_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/talosbot/talosbot/bot/chat"
	"github.com/talosbot/talosbot/bot/chat/slack"
	"github.com/talosbot/talosbot/bot/chat/slack/slackfake"
)

// TestEscapesEveryTextField: whatever the bot shows — a cluster name
// someone typed, a freeze reason, an alert's labels — reaches Slack with
// '&', '<' and '>' escaped, in the blocks and in the notification text of
// posts, edits and ephemeral answers, so it cannot become @here, @channel,
// a user mention or a link whose label hides its address. The bot's own
// markup (*bold*, `code`) is untouched.
func TestEscapesEveryTextField(t *testing.T) {
	fake, err := slackfake.Start(slackfake.Options{BotToken: botToken})
	if err != nil {
		t.Fatal(err)
	}
	defer fake.Close()
	a, err := slack.New(slack.Options{BotToken: botToken, Mode: slack.ModeHTTP, SigningSecret: "s", APIURL: fake.APIURL()})
	if err != nil {
		t.Fatal(err)
	}
	const evil = `<!here> <!channel> <@U0BOSS> <https://evil.example|Approve here> a&b`
	const escaped = `&lt;!here&gt; &lt;!channel&gt; &lt;@U0BOSS&gt; &lt;https://evil.example|Approve here&gt; a&amp;b`
	m := chat.Message{Title: "🧊 " + evil, Text: "*frozen* by `alice`: " + evil, Fields: []chat.Field{{Label: evil, Value: evil}}}
	ctx := context.Background()
	ts, err := a.Post(ctx, "slack:C1", "", m)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Edit(ctx, "slack:C1", ts, m); err != nil {
		t.Fatal(err)
	}
	if err := a.PostPrivate(ctx, "slack:C1", "U1", m); err != nil {
		t.Fatal(err)
	}
	calls := 0
	for _, r := range fake.Records() {
		if r.Kind != "api" || !strings.HasPrefix(r.Method, "chat.") {
			continue
		}
		calls++
		var blocks []struct {
			Type   string `json:"type"`
			Text   *struct{ Type, Text string }
			Fields []struct{ Type, Text string }
		}
		if err := json.Unmarshal([]byte(r.Params.Get("blocks")), &blocks); err != nil {
			t.Fatal(err)
		}
		var mrkdwn []string
		for _, b := range blocks {
			if b.Text != nil && b.Text.Type == "mrkdwn" {
				mrkdwn = append(mrkdwn, b.Text.Text)
			}
			for _, f := range b.Fields {
				mrkdwn = append(mrkdwn, f.Text)
			}
		}
		mrkdwn = append(mrkdwn, r.Params.Get("text"))
		if len(mrkdwn) != 3 {
			t.Fatalf("%s: %d mrkdwn texts, want the section, the field and the notification text: %q", r.Method, len(mrkdwn), mrkdwn)
		}
		for _, s := range mrkdwn {
			if strings.ContainsAny(strings.ReplaceAll(strings.ReplaceAll(strings.ReplaceAll(s, "&amp;", ""), "&lt;", ""), "&gt;", ""), "<>&") {
				t.Fatalf("%s sent an unescaped '<', '>' or '&': %q", r.Method, s)
			}
			if !strings.Contains(s, escaped) {
				t.Fatalf("%s: %q does not show the text escaped", r.Method, s)
			}
		}
		if !strings.HasPrefix(mrkdwn[0], "*frozen* by `alice`: ") {
			t.Fatalf("%s: the bot's own markup changed: %q", r.Method, mrkdwn[0])
		}
	}
	if calls != 3 {
		t.Fatalf("%d chat.* calls, want post, update and ephemeral", calls)
	}
}

// TestEscapeKeepsEntitiesWhole: a cut never splits an entity.
func TestEscapeKeepsEntitiesWhole(t *testing.T) {
	raw, err := json.Marshal(slack.Blocks(chat.Message{Text: strings.Repeat("x", 2998) + "<<<"}))
	if err != nil {
		t.Fatal(err)
	}
	var blocks []struct{ Text struct{ Text string } }
	if err := json.Unmarshal(raw, &blocks); err != nil {
		t.Fatal(err)
	}
	if got := blocks[0].Text.Text; !strings.HasSuffix(got, "x…") {
		t.Fatalf("cut inside an entity: …%q", got[len(got)-12:])
	}
	if got := slack.Escape("<a href> & *b*"); got != "&lt;a href&gt; &amp; *b*" {
		t.Fatalf("Escape = %q", got)
	}
}
