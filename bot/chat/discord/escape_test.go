package discord_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/talosbot/talosbot/bot/chat"
	"github.com/talosbot/talosbot/bot/chat/discord"
	"github.com/talosbot/talosbot/bot/chat/discord/discordfake"
)

// evil is what anyone in a channel can make the bot repeat: a role and a
// user mention, @everyone, @here and a masked link.
const evil = "<@&700000000000000001> <@500000000000000009> @everyone @here [Approve here](https://evil.example)"

// privateHandler answers a click with a private (ephemeral) message that
// repeats the evil text.
type privateHandler struct {
	*stubHandler
	a *discord.Adapter
}

func (p privateHandler) HandleAction(ctx context.Context, act chat.Action) error {
	_ = p.stubHandler.HandleAction(ctx, act)
	return p.a.PostPrivate(ctx, act.Channel, act.User, chat.Message{Text: "refused: " + evil})
}

// TestEveryMessageMentionsNobody: every message, edit, interaction
// response and follow-up the adapter sends carries allowed_mentions with
// an empty parse list ("parse":[], so Discord pings no one, not
// "parse":null), and the text it shows has mention and link syntax
// escaped, while the bot's own markup is left alone.
func TestEveryMessageMentionsNobody(t *testing.T) {
	h := newStub()
	fake, a, ctx := startGateway(t, h)
	a.SetHandler(privateHandler{h, a})
	ch := "discord:600000000000000001"
	m := chat.Message{Title: "🧊 production", Text: "*frozen* by `alice`: " + evil, Fields: []chat.Field{{Label: "Reason", Value: evil}},
		Table: &chat.Table{Columns: []string{"node"}, Rows: [][]string{{"```" + evil}}}}
	ref, err := a.Post(ctx, ch, "", m)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Edit(ctx, ch, ref, m); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Post(ctx, ch, ref, chat.Message{Text: evil}); err != nil { // a thread reply, plain content
		t.Fatal(err)
	}
	if _, err := fake.SlashCommand("500000000000000001", "600000000000000001", "status "+evil); err != nil { // the echo
		t.Fatal(err)
	}
	if _, err := fake.Click("500000000000000001", "600000000000000001", ref, "tok-x"); err != nil { // the follow-up
		t.Fatal(err)
	}
	in, p := fake.SlashCommandPayload("500000000000000001", "600000000000000001", "status")
	p["data"].(map[string]any)["name"] = strings.Repeat(evil, 3) // an ephemeral refusal that echoes it
	if err := fake.Dispatch(p); err != nil {
		t.Fatal(err)
	}
	type body struct {
		Content         string          `json:"content"`
		AllowedMentions json.RawMessage `json:"allowed_mentions"`
		Embeds          []struct {
			Description string
			Fields      []struct{ Name, Value string }
		}
	}
	var seen map[string]int
	recs, err := fake.WaitFor(ctx, func(rs []discordfake.Record) bool {
		seen = map[string]int{}
		for _, r := range rs {
			if r.Kind != "rest" || (r.Method != "POST" && r.Method != "PATCH") {
				continue
			}
			switch {
			case strings.HasSuffix(r.Path, "/callback") && strings.Contains(r.Path, in.ID):
				seen["ephemeral"]++
			case strings.Contains(r.Path, "/messages/@original"):
				seen["echo"]++
			case strings.Contains(r.Path, "/webhooks/"):
				seen["follow-up"]++
			case strings.Contains(r.Path, "/channels/") && strings.HasSuffix(r.Path, "/messages"):
				seen["post"]++
			case strings.Contains(r.Path, "/channels/") && strings.Contains(r.Path, "/messages/"):
				seen["edit"]++
			}
		}
		return seen["ephemeral"] == 1 && seen["echo"] == 1 && seen["follow-up"] == 1 && seen["post"] == 2 && seen["edit"] >= 1
	})
	if err != nil {
		t.Fatalf("not every kind of message was sent: %v (saw %v)", err, seen)
	}
	checked := 0
	for _, r := range recs {
		if r.Kind != "rest" || (r.Method != "POST" && r.Method != "PATCH") || strings.HasSuffix(r.Path, "/threads") || strings.HasSuffix(r.Path, "/commands") {
			continue
		}
		var b body
		if strings.HasSuffix(r.Path, "/callback") {
			var cb struct {
				Type int
				Data *body
			}
			if err := json.Unmarshal(r.Body, &cb); err != nil {
				t.Fatal(err)
			}
			if cb.Data == nil {
				continue // a deferral: no message of its own
			}
			b = *cb.Data
		} else if err := json.Unmarshal(r.Body, &b); err != nil {
			t.Fatal(err)
		}
		checked++
		if !parsesNothing(b.AllowedMentions) {
			t.Errorf("%s %s: allowed_mentions %s, want an empty parse list", r.Method, r.Path, b.AllowedMentions)
		}
		shown := []string{b.Content}
		for _, e := range b.Embeds {
			shown = append(shown, e.Description)
			for _, f := range e.Fields {
				shown = append(shown, f.Name, f.Value)
			}
		}
		for _, s := range shown {
			if strings.Contains(s, "/messages/@original") {
				continue
			}
			if code := strings.Index(s, "`/talos"); code >= 0 { // the echo: the command in a code span, then who ran it
				s = s[strings.LastIndex(s, "`")+1:]
			}
			if i := strings.Index(s, "```"); i >= 0 { // the table: a code block its cells cannot close
				if strings.Count(s[i:], "```") != 2 {
					t.Errorf("%s %s: a table cell closed the code block: %q", r.Method, r.Path, s)
				}
				s = s[:i]
			}
			for _, bad := range []string{"<@&", "<@500000000000000009", "@everyone", "@here", "[Approve"} {
				if strings.Contains(strings.ReplaceAll(s, `\`+bad, ""), bad) {
					t.Errorf("%s %s shows %q unescaped: %q", r.Method, r.Path, bad, s)
				}
			}
		}
	}
	if checked < 6 {
		t.Fatalf("checked %d messages, want at least 6", checked)
	}
}

// TestEscapeLeavesCodeAndMarkup: inside code Discord parses nothing and
// shows backslashes, so code is left alone; so is the bot's markup.
func TestEscapeLeavesCodeAndMarkup(t *testing.T) {
	for in, want := range map[string]string{
		"*bold* _it_ ~s~ `<@1>` and <@1>":        "*bold* _it_ ~s~ `<@1>` and \\<@1>",
		"```\n<@&2> [x](https://e.example)\n```": "```\n<@&2> [x](https://e.example)\n```",
		"a \\<@1> b":                             "a \\\\\\<@1> b",
		"`unclosed <@1>":                         "`unclosed \\<@1>",
		"mail bob@example.com, @here":            "mail bob@example.com, @\u200bhere",
		// A run of another length does not close a span: Discord shows
		// these links, so they are escaped.
		"`[x](https://e.example)``":      "`\\[x](https://e.example)``",
		"``[x](https://e.example)` `":    "``\\[x](https://e.example)` `",
		"`a` [x](https://e.example) ``b": "`a` \\[x](https://e.example) ``b",
	} {
		if got := discord.Escape(in); got != want {
			t.Errorf("Escape(%q) = %q, want %q", in, got, want)
		}
	}
}

// parsesNothing: allowed_mentions is there with "parse":[] and allows no
// user or role by id.
func parsesNothing(raw json.RawMessage) bool {
	var am struct {
		Parse        *[]string `json:"parse"`
		Users, Roles []string
	}
	return json.Unmarshal(raw, &am) == nil && am.Parse != nil && len(*am.Parse) == 0 && len(am.Users) == 0 && len(am.Roles) == 0
}

// TestCutTextKeepsLinksEscaped: a message over Discord's limit is cut before
// it is escaped. Cut after, a code span whose closing backtick fell past the
// limit lost it, and the masked link Escape had left inside (as code) reached
// Discord as a link.
func TestCutTextKeepsLinksEscaped(t *testing.T) {
	h := newStub()
	fake, a, ctx := startGateway(t, h)
	ch := "discord:600000000000000001"
	link := "`[Approve here](https://evil.example)" + strings.Repeat("x", 3000) + "`"
	if _, err := a.Post(ctx, ch, "", chat.Message{Text: strings.Repeat("a", 1900) + link}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Post(ctx, ch, "", chat.Message{Title: "t", Fields: []chat.Field{{Label: "Reason", Value: strings.Repeat("a", 900) + link}}}); err != nil {
		t.Fatal(err)
	}
	var texts []string
	_, err := fake.WaitFor(ctx, func(rs []discordfake.Record) bool {
		texts = texts[:0]
		for _, r := range rs {
			if r.Kind != "rest" || r.Method != "POST" || !strings.HasSuffix(r.Path, "/messages") {
				continue
			}
			var m struct {
				Content string
				Embeds  []struct{ Fields []struct{ Value string } }
			}
			if json.Unmarshal(r.Body, &m) != nil {
				continue
			}
			if m.Content != "" {
				texts = append(texts, m.Content)
			}
			for _, e := range m.Embeds {
				for _, f := range e.Fields {
					texts = append(texts, f.Value)
				}
			}
		}
		return len(texts) >= 2
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range texts {
		if !strings.Contains(s, `\[Approve here]`) {
			t.Errorf("a cut text shows the masked link unescaped: %.120q…", s[max(0, strings.Index(s, "`")-10):])
		}
	}
}
