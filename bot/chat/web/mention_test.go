package web_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/talosbot/talosbot/bot/chat"
)

// TestMentionsAreHighlighted: through the console's HTTP API a message's
// Mentions come as highlighted names after the text, HTML-escaped like the
// text itself, so a "name" carrying markup is shown, not run.
func TestMentionsAreHighlighted(t *testing.T) {
	c := newConsole(t, false)
	if _, err := c.Post(context.Background(), "ops", "", chat.Message{Text: "late <b>x</b>", Mentions: []string{"@bob", "<img src=x onerror=alert(1)>"}}); err != nil {
		t.Fatal(err)
	}
	code, body := call(t, c.Handler(), "GET", "/api/console/messages?channel=ops", aliceTok, "")
	if code != 200 {
		t.Fatalf("%d %s", code, body)
	}
	var got struct {
		Messages []struct {
			HTML     string   `json:"html"`
			Mentions []string `json:"mentions"`
		}
	}
	if err := json.Unmarshal([]byte(body), &got); err != nil || len(got.Messages) != 1 {
		t.Fatalf("%v %s", err, body)
	}
	const want = `<p>late &lt;b&gt;x&lt;/b&gt;</p><p class="mentions"><mark class="mention">@bob</mark> <mark class="mention">@&lt;img src=x onerror=alert(1)&gt;</mark></p>`
	if h := got.Messages[0].HTML; h != want {
		t.Fatalf("html\n%s\nwant\n%s", h, want)
	}
	if len(got.Messages[0].Mentions) != 2 {
		t.Fatalf("mentions %v", got.Messages[0].Mentions)
	}
}
