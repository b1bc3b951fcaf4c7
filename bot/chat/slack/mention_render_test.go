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

// TestMentionsAreRealMentions: a message's Mentions reach Slack as user
// mentions <@U…> in the section and the notification text (Slack notifies
// from those), while its text stays escaped; an entry that is not a user id
// ("U1> <!here", a plain name) is shown escaped and pings nobody.
func TestMentionsAreRealMentions(t *testing.T) {
	fake, err := slackfake.Start(slackfake.Options{BotToken: botToken})
	if err != nil {
		t.Fatal(err)
	}
	defer fake.Close()
	a, err := slack.New(slack.Options{BotToken: botToken, Mode: slack.ModeHTTP, SigningSecret: "s", APIURL: fake.APIURL()})
	if err != nil {
		t.Fatal(err)
	}
	m := chat.Message{Text: "late: <@U0EVIL> <!here>", Mentions: []string{"U0BOB", "@W0CAROL", "U1> <!here", "oncall"}}
	if _, err := a.Post(context.Background(), "slack:C1", "", m); err != nil {
		t.Fatal(err)
	}
	const want = "late: &lt;@U0EVIL&gt; &lt;!here&gt;\n<@U0BOB> <@W0CAROL> @U1&gt; &lt;!here @oncall"
	posts := 0
	for _, r := range fake.Records() {
		if r.Kind != "api" || r.Method != "chat.postMessage" {
			continue
		}
		posts++
		var blocks []struct{ Text *struct{ Type, Text string } }
		if err := json.Unmarshal([]byte(r.Params.Get("blocks")), &blocks); err != nil {
			t.Fatal(err)
		}
		if len(blocks) != 1 || blocks[0].Text == nil || blocks[0].Text.Text != want {
			t.Fatalf("section %q, want %q", r.Params.Get("blocks"), want)
		}
		if got := r.Params.Get("text"); got != want {
			t.Fatalf("notification text %q, want %q", got, want)
		}
		if strings.Count(r.Params.Get("text"), "<@") != 2 {
			t.Fatalf("%q pings other than the two users", r.Params.Get("text"))
		}
	}
	if posts != 1 {
		t.Fatalf("%d posts", posts)
	}
}
