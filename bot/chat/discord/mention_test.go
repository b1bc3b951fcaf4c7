package discord_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/talosbot/talosbot/bot/chat"
	"github.com/talosbot/talosbot/bot/chat/discord/discordfake"
)

// TestMentionsPingExactlyThoseUsers: a message's Mentions reach Discord as
// user mentions <@id> in the content (an embed pings nobody, so they go
// there for an embed message too) with allowed_mentions naming exactly
// those users and parsing nothing else; the text stays escaped, and an entry
// that is not a user id is shown escaped and allowed to ping nobody.
func TestMentionsPingExactlyThoseUsers(t *testing.T) {
	h := newStub()
	fake, a, ctx := startGateway(t, h)
	ch := "discord:600000000000000001"
	mentions := []string{"500000000000000001", "@500000000000000002", "<@&700000000000000001>", "oncall"}
	if _, err := a.Post(ctx, ch, "", chat.Message{Text: "late: " + evil, Mentions: mentions}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Post(ctx, ch, "", chat.Message{Title: "late", Text: evil, Fields: []chat.Field{{Label: "a", Value: "b"}}, Mentions: mentions}); err != nil {
		t.Fatal(err)
	}
	recs, err := fake.WaitFor(ctx, func(rs []discordfake.Record) bool {
		n := 0
		for _, r := range rs {
			if r.Kind == "rest" && r.Method == "POST" && strings.HasSuffix(r.Path, "/messages") {
				n++
			}
		}
		return n == 2
	})
	if err != nil {
		t.Fatal(err)
	}
	const line = `<@500000000000000001> <@500000000000000002> @\<@&700000000000000001> @oncall`
	n := 0
	for _, r := range recs {
		if r.Kind != "rest" || r.Method != "POST" || !strings.HasSuffix(r.Path, "/messages") {
			continue
		}
		var b struct {
			Content         string
			AllowedMentions struct {
				Parse *[]string `json:"parse"`
				Users []string  `json:"users"`
				Roles []string  `json:"roles"`
			} `json:"allowed_mentions"`
		}
		if err := json.Unmarshal(r.Body, &b); err != nil {
			t.Fatal(err)
		}
		am := b.AllowedMentions
		if am.Parse == nil || len(*am.Parse) != 0 || len(am.Roles) != 0 || strings.Join(am.Users, ",") != "500000000000000001,500000000000000002" {
			t.Fatalf("allowed_mentions %+v, want the two users only", am)
		}
		if !strings.HasSuffix(b.Content, line) {
			t.Fatalf("content %q does not end with the mentions %q", b.Content, line)
		}
		if n == 0 && !strings.HasPrefix(b.Content, `late: \<@&`) {
			t.Fatalf("text not escaped: %q", b.Content)
		}
		n++
	}
	if n != 2 {
		t.Fatalf("%d posts", n)
	}
}
