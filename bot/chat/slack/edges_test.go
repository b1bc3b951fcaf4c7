package slack

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/talosbot/talosbot/bot/chat"
)

// padJSON returns a JSON object of exactly size bytes: fields, then a
// "pad" string that fills the rest.
func padJSON(t *testing.T, fields string, size int) []byte {
	t.Helper()
	head := "{" + fields + `,"pad":"`
	n := size - len(head) - len(`"}`)
	if n < 0 {
		t.Fatalf("size %d too small for %q", size, fields)
	}
	b := []byte(head + strings.Repeat("x", n) + `"}`)
	if len(b) != size {
		t.Fatalf("built %d bytes, want %d", len(b), size)
	}
	return b
}

// padForm returns a form body of exactly size bytes: the fields, then a pad
// parameter that fills the rest.
func padForm(t *testing.T, fields string, size int) []byte {
	t.Helper()
	head := fields + "&pad="
	b := []byte(head + strings.Repeat("x", size-len(head)))
	if len(b) != size {
		t.Fatalf("built %d bytes, want %d", len(b), size)
	}
	return b
}

// TestPayloadsUpToTheLimitAreDecoded: the size bound refuses what is larger
// than maxPayload and decodes everything up to it, including a payload of
// exactly maxPayload bytes (the HTTP handler reads at most that many).
func TestPayloadsUpToTheLimitAreDecoded(t *testing.T) {
	slashJSON := `"user_id":"U1","channel_id":"C1","text":"status"`
	slashForm := "user_id=U1&channel_id=C1&text=status"
	interaction := `"type":"block_actions","user":{"id":"U1"},"channel":{"id":"C1"},"actions":[{"action_id":"tok","block_id":"b","type":"button"}]`
	event := `"type":"event_callback","event_id":"Ev1","event":{"type":"app_mention","user":"U1","channel":"C1","text":"<@U0BOT> status"}`
	interactionForm := func(size int) []byte {
		// payload=<url-encoded JSON>: pad the JSON so the form is size bytes.
		enc := url.QueryEscape("{" + interaction + `,"pad":"`)
		tail := url.QueryEscape(`"}`)
		return []byte("payload=" + enc + strings.Repeat("x", size-len("payload=")-len(enc)-len(tail)) + tail)
	}
	for _, c := range []struct {
		name   string
		build  func(size int) []byte
		decode func([]byte) error
	}{
		{"slash JSON", func(n int) []byte { return padJSON(t, slashJSON, n) }, func(b []byte) error { _, err := decodeSlashJSON(b); return err }},
		{"slash form", func(n int) []byte { return padForm(t, slashForm, n) }, func(b []byte) error { _, err := decodeSlashForm(b); return err }},
		{"interaction JSON", func(n int) []byte { return padJSON(t, interaction, n) }, func(b []byte) error { _, err := decodeInteractionJSON(b); return err }},
		{"interaction form", interactionForm, func(b []byte) error { _, err := decodeInteractionForm(b); return err }},
		{"event", func(n int) []byte { return padJSON(t, event, n) }, func(b []byte) error {
			d, err := decodeEvent(b, "U0BOT")
			if err == nil && (d.Command == nil || d.Command.Text != "status") {
				return fmt.Errorf("decoded %+v, want the status command", d)
			}
			return err
		}},
	} {
		at := c.build(maxPayload)
		if len(at) != maxPayload {
			t.Fatalf("%s: built %d bytes, want %d", c.name, len(at), maxPayload)
		}
		if err := c.decode(at); err != nil {
			t.Errorf("%s of exactly %d bytes refused: %v", c.name, maxPayload, err)
		}
		if err := c.decode(c.build(maxPayload + 1)); err == nil || !strings.Contains(err.Error(), "too large") {
			t.Errorf("%s of %d bytes: %v, want too large", c.name, maxPayload+1, err)
		}
	}
}

// TestButtonTokenIsTheActionIDThenTheValue: the bot's buttons carry the
// token as both action_id and value; the action_id is the token, and a
// client that sends only the value still gets through.
func TestButtonTokenIsTheActionIDThenTheValue(t *testing.T) {
	for _, c := range []struct{ actions, want string }{
		{`[{"action_id":"tok-a","block_id":"b","type":"button","value":"other"}]`, "tok-a"},
		{`[{"value":"tok-v","block_id":"b","type":"button"}]`, "tok-v"},
	} {
		acts, err := decodeInteractionJSON([]byte(`{"type":"block_actions","user":{"id":"U1"},"channel":{"id":"C1"},"actions":` + c.actions + `}`))
		if err != nil {
			t.Fatal(err)
		}
		if len(acts) != 1 || acts[0].ActionID != c.want {
			t.Errorf("actions %s: %+v, want token %q", c.actions, acts, c.want)
		}
	}
}

// TestChannelOfAnotherPlatformIsRefused: a channel qualified for another
// platform is never posted to as a Slack channel id.
func TestChannelOfAnotherPlatformIsRefused(t *testing.T) {
	for ch, want := range map[string]string{"slack:C1": "C1", "C1": "C1"} {
		if got, err := channelID(ch); err != nil || got != want {
			t.Errorf("channelID(%q) = %q, %v; want %q", ch, got, err, want)
		}
	}
	for _, ch := range []string{"discord:123", "web:ops", "slack:"} {
		if got, err := channelID(ch); err == nil {
			t.Errorf("channelID(%q) = %q, want an error", ch, got)
		}
	}
}

// blockCounts renders m and returns the block types in order and each
// block's number of fields and elements.
func blockCounts(t *testing.T, m chat.Message) (types []string, fields, elements []int, raw []byte) {
	t.Helper()
	raw, err := json.Marshal(Blocks(m))
	if err != nil {
		t.Fatal(err)
	}
	var bs []struct {
		Type     string `json:"type"`
		Fields   []any  `json:"fields"`
		Elements []any  `json:"elements"`
	}
	if err := json.Unmarshal(raw, &bs); err != nil {
		t.Fatal(err)
	}
	for _, b := range bs {
		types = append(types, b.Type)
		fields = append(fields, len(b.Fields))
		elements = append(elements, len(b.Elements))
	}
	return types, fields, elements, raw
}

// TestBlocksAtExactLimits: exactly ten fields fill one section, exactly 25
// buttons one action block, an action id of exactly 255 characters is kept,
// and a message of exactly 50 blocks keeps all of them (51 are cut to 50).
func TestBlocksAtExactLimits(t *testing.T) {
	m := chat.Message{}
	for i := range fieldsPerBlock {
		m.Fields = append(m.Fields, chat.Field{Label: fmt.Sprint("f", i), Value: "v"})
	}
	for i := range buttonsPerBlock - 1 {
		m.Buttons = append(m.Buttons, chat.Button{ActionID: fmt.Sprint("tok", i), Label: "b"})
	}
	m.Buttons = append(m.Buttons, chat.Button{ActionID: strings.Repeat("z", maxActionID), Label: "longest"})
	types, fields, elements, raw := blockCounts(t, m)
	if len(types) != 2 || fields[0] != fieldsPerBlock || types[1] != "actions" || elements[1] != buttonsPerBlock {
		t.Fatalf("blocks %v fields %v elements %v, want one full field section and one full action block: %s", types, fields, elements, raw)
	}

	for _, c := range []struct{ sections, want int }{{maxBlocks, maxBlocks}, {maxBlocks + 1, maxBlocks}} {
		m := chat.Message{}
		for i := range c.sections * fieldsPerBlock {
			m.Fields = append(m.Fields, chat.Field{Label: fmt.Sprint("f", i), Value: "v"})
		}
		if types, _, _, _ := blockCounts(t, m); len(types) != c.want {
			t.Errorf("%d field sections rendered as %d blocks, want %d", c.sections, len(types), c.want)
		}
	}
}

// TestTableRowsAndShortRows: a table block holds at most 100 rows, the
// header included, and a row shorter than the header is filled with "—".
func TestTableRowsAndShortRows(t *testing.T) {
	tab := &chat.Table{Columns: []string{"node", "version", "state"}}
	tab.Rows = append(tab.Rows, []string{"cp-1"}) // short row
	for i := range 150 {
		tab.Rows = append(tab.Rows, []string{fmt.Sprint("w-", i), "v1.13.9", "ready"})
	}
	raw, err := json.Marshal(table(tab))
	if err != nil {
		t.Fatal(err)
	}
	var b struct {
		Rows [][]map[string]any `json:"rows"`
	}
	if err := json.Unmarshal(raw, &b); err != nil {
		t.Fatal(err)
	}
	if len(b.Rows) != maxTableRows {
		t.Fatalf("%d rows, want %d (header included)", len(b.Rows), maxTableRows)
	}
	short, _ := json.Marshal(b.Rows[1])
	if !strings.Contains(string(short), "cp-1") || strings.Count(string(short), "—") != 2 {
		t.Errorf("short row rendered %s, want cp-1 and two dashes", short)
	}
}

// TestTruncationKeepsExactFitsAndWholeEntities: a text of exactly the limit
// is sent whole; a longer one is cut to the limit with "…", never inside an
// entity, also when the entity starts the text.
func TestTruncationKeepsExactFitsAndWholeEntities(t *testing.T) {
	exact := strings.Repeat("a", 10)
	if got := escapeTruncate(exact, 10); got != exact {
		t.Errorf("escapeTruncate of exactly the limit = %q", got)
	}
	if got := truncate(exact, 10); got != exact {
		t.Errorf("truncate of exactly the limit = %q", got)
	}
	if got := truncate(exact+"b", 10); utf8.RuneCountInString(got) != 10 || !strings.HasSuffix(got, "…") {
		t.Errorf("truncate of one past the limit = %q", got)
	}
	// "<<<" escapes to "&lt;&lt;&lt;"; cut to 3 runes the first entity
	// would be split at the very start.
	if got := escapeTruncate("<<<", 3); got != "…" {
		t.Errorf("escapeTruncate(<<<, 3) = %q, want only the ellipsis (no cut entity)", got)
	}
}

// TestTriggerIDFromTheInteractivityPayload: an interactivity retry carries
// its trigger_id inside the JSON payload field, and that is what dedupes it.
func TestTriggerIDFromTheInteractivityPayload(t *testing.T) {
	body := "payload=" + url.QueryEscape(`{"type":"block_actions","trigger_id":"123.456.abc"}`)
	if got := triggerID([]byte(body)); got != "123.456.abc" {
		t.Errorf("triggerID = %q, want 123.456.abc", got)
	}
	if got := triggerID([]byte("trigger_id=777.888.x&payload=%7B%7D")); got != "777.888.x" {
		t.Errorf("form trigger_id = %q", got)
	}
	if got := triggerID([]byte("payload=not-json")); got != "" {
		t.Errorf("triggerID of a malformed payload = %q", got)
	}
}

// TestSocketURLThatRefusesIsAnError: when the websocket URL Slack hands out
// cannot be dialled (no HTTP response at all), the session ends with an
// error naming the dial and Run goes on to reconnect; nothing panics.
func TestSocketURLThatRefusesIsAnError(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	_ = ln.Close() // nothing listens there now
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = fmt.Fprintf(w, `{"ok":true,"url":"ws://%s/link?ticket=x"}`, dead)
	}))
	defer api.Close()
	a, err := New(Options{BotToken: "xoxb-1", AppToken: "xapp-1", APIURL: api.URL})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	connected, err := a.session(ctx)
	if connected || err == nil || !strings.Contains(err.Error(), "dial socket mode url") {
		t.Fatalf("session = %v, %v; want not connected and the dial error", connected, err)
	}
	if strings.Contains(err.Error(), "ticket") {
		t.Errorf("the ticket-bearing URL reached the error: %v", err)
	}
}

// TestDefaultWebAPIClientIsBounded: without an HTTPClient option the Web API
// client has the documented 30 s timeout, so a hung Slack cannot hold a
// post (and the engine step behind it) forever.
func TestDefaultWebAPIClientIsBounded(t *testing.T) {
	a, err := New(Options{BotToken: "xoxb-1", AppToken: "xapp-1"})
	if err != nil {
		t.Fatal(err)
	}
	if got := a.o.HTTPClient.Timeout; got != 30*time.Second {
		t.Errorf("default Web API timeout %v, want 30s", got)
	}
}
