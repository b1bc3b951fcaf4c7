package bot_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/talosbot/talosbot/approvals"
	"github.com/talosbot/talosbot/bot"
	"github.com/talosbot/talosbot/bot/chat/web"
	"github.com/talosbot/talosbot/bot/credentials"
	"github.com/talosbot/talosbot/bot/engine"
	"github.com/talosbot/talosbot/bot/engine/enginetest"
	"github.com/talosbot/talosbot/bot/render"
	"github.com/talosbot/talosbot/config"
	"github.com/talosbot/talosbot/plugins/host"
	"github.com/talosbot/talosbot/state"
)

// consoleEnv drives the engine through the web console's HTTP API, the way a
// person (or a script) does.
type consoleEnv struct {
	t     *testing.T
	srv   *httptest.Server
	store *state.Store
	clock *fakeClock
}

func newConsoleEnv(t *testing.T, cfgText string) *consoleEnv {
	t.Helper()
	dir := t.TempDir()
	tc := filepath.Join(dir, "talosconfig")
	if err := os.WriteFile(tc, []byte("context: test\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Parse([]byte(fmt.Sprintf(cfgText, dir, tc, tc)))
	if err != nil {
		t.Fatal(err)
	}
	clock := enginetest.NewClock(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC))
	st, err := state.Open(filepath.Join(dir, "talosbot.db"), state.Options{Clock: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	mgr, err := host.New(host.Options{Executable: enginetest.Plugin.Bin, ExecutableSHA256: enginetest.Plugin.SHA256, BuiltIn: []string{"eng"}})
	if err != nil {
		t.Fatal(err)
	}
	console, err := web.New(web.Options{Channels: []string{"stg", "prd"}, Open: true, Users: []string{"alice", "bob", "carol", "dave"}})
	if err != nil {
		t.Fatal(err)
	}
	eng, err := bot.New(context.Background(), engine.Options{Config: cfg, Store: st, Plugins: mgr, Credentials: credentials.FileCredentials{},
		Policy: approvals.New(cfg), Sink: render.NewRenderer(console, nil, nil), Clock: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	console.SetHandler(eng)
	srv := httptest.NewServer(console.Handler())
	t.Cleanup(func() { srv.Close(); eng.Close(); mgr.Close(); _ = st.Close() })
	return &consoleEnv{t: t, srv: srv, store: st, clock: clock}
}

func (c *consoleEnv) post(path string, body any) (int, string) {
	c.t.Helper()
	raw, _ := json.Marshal(body)
	resp, err := http.Post(c.srv.URL+path, "application/json", bytes.NewReader(raw))
	if err != nil {
		c.t.Fatal(err)
	}
	defer resp.Body.Close()
	var out struct{ Error string }
	_ = json.NewDecoder(resp.Body).Decode(&out)
	return resp.StatusCode, out.Error
}

func (c *consoleEnv) command(user, channel, text string) {
	c.t.Helper()
	if code, msg := c.post("/api/console/commands", map[string]string{"user": user, "channel": channel, "text": text}); code != http.StatusAccepted {
		c.t.Fatalf("%s: HTTP %d %s", text, code, msg)
	}
}

type consoleMsg struct {
	ID      string `json:"id"`
	Title   string `json:"title"`
	Text    string `json:"text"`
	Buttons []struct {
		ActionID string `json:"action_id"`
		Label    string `json:"label"`
	} `json:"buttons"`
	Fields []struct{ Label, Value string } `json:"fields"`
}

func (c *consoleEnv) messages(channel string) []consoleMsg {
	resp, err := http.Get(c.srv.URL + "/api/console/messages?channel=" + channel)
	if err != nil {
		c.t.Fatal(err)
	}
	defer resp.Body.Close()
	var out struct{ Messages []consoleMsg }
	_ = json.NewDecoder(resp.Body).Decode(&out)
	return out.Messages
}

// waitMessage waits for a message in channel matching pred.
func (c *consoleEnv) waitMessage(channel, what string, pred func(consoleMsg) bool) consoleMsg {
	c.t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		for _, m := range c.messages(channel) {
			if pred(m) {
				return m
			}
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("no message %s in %s; have %+v", what, channel, c.messages(channel))
		}
		time.Sleep(10 * time.Millisecond) // polling an HTTP API under a deadline
	}
}

func (c *consoleEnv) waitText(channel, sub string) consoleMsg {
	c.t.Helper()
	return c.waitMessage(channel, fmt.Sprintf("containing %q", sub), func(m consoleMsg) bool { return strings.Contains(m.Title+"\n"+m.Text, sub) })
}

func field(m consoleMsg, label string) string {
	for _, f := range m.Fields {
		if f.Label == label {
			return f.Value
		}
	}
	return ""
}

// opMessage waits for the operation message of command in state. An
// operation awaiting approval is waited for with its Approve button: the
// engine publishes the state change, then the same state with the buttons
// it minted, and the card can show the first for an edit interval.
func (c *consoleEnv) opMessage(channel, command, st string) consoleMsg {
	c.t.Helper()
	return c.waitMessage(channel, command+" "+st, func(m consoleMsg) bool {
		if st == "awaiting approval" && !hasButton(m, "Approve") {
			return false
		}
		return strings.Contains(m.Title, "/talos "+command) && field(m, "State") == st
	})
}

func hasButton(m consoleMsg, label string) bool {
	for _, b := range m.Buttons {
		if b.Label == label {
			return true
		}
	}
	return false
}

func (c *consoleEnv) click(user string, m consoleMsg, label string) (int, string) {
	c.t.Helper()
	for _, b := range m.Buttons {
		if b.Label == label {
			return c.post("/api/console/actions", map[string]string{"user": user, "message_id": m.ID, "action_id": b.ActionID})
		}
	}
	c.t.Fatalf("message %s has no %q button: %+v", m.ID, label, m.Buttons)
	return 0, ""
}

func (c *consoleEnv) mustClick(user string, m consoleMsg, label string) {
	c.t.Helper()
	if code, msg := c.click(user, m, label); code != http.StatusAccepted {
		c.t.Fatalf("click %s as %s: HTTP %d %s", label, user, code, msg)
	}
}

func TestConsoleTwoPersonFlow(t *testing.T) {
	c := newConsoleEnv(t, testConfig)
	c.command("alice", "stg", "/talos roll v5")
	c.opMessage("stg", "roll", "succeeded")
	c.command("alice", "prd", "/talos roll v5")
	m := c.opMessage("prd", "roll", "awaiting approval")
	if field(m, "Plan digest") == "" || !strings.Contains(field(m, "Expires"), "in 30 min, ") || !strings.Contains(m.Text, "roll to v5") ||
		field(m, "Approvals") != "0/1 — may approve: bob, dave" || !strings.Contains(m.Text, "see Details in the thread") {
		t.Fatalf("approval card lacks plan, digest, approvers or expiry: %+v", m)
	}
	// The steps are behind the card, in its thread.
	c.waitText("prd", "1. first node\n2. second node")
	c.mustClick("bob", m, "Approve")
	done := c.opMessage("prd", "roll", "succeeded")
	// A second click answers the clicker by name (the console has no
	// private messages; Slack's is ephemeral), not as an anonymous error.
	c.click("bob", m, "Approve")
	c.waitText("prd", "bob: refused: this button is unknown or no longer valid")
	if !strings.Contains(done.Text, "▰▰ 2/2") || !strings.Contains(done.Text, "rolled to v5") || len(done.Buttons) != 0 {
		t.Fatalf("final summary: %+v", done)
	}
	c.waitText("prd", "👍 approved by bob (1/1)")
	if !strings.HasPrefix(field(done, "Approved by"), "bob (") {
		t.Errorf("the finished card does not say who approved: %+v", done.Fields)
	}
	// The first production request is estimated from staging's run, which
	// has as many nodes, and says so (issue 31: it said "unknown" right
	// after staging ran the same command).
	if est := field(m, "Estimated duration"); !strings.HasPrefix(est, "about ") || !strings.Contains(est, "1 past run(s) on staging, which has as many nodes") {
		t.Errorf("first production run estimate %q", est)
	}
	// The second request is estimated from production's own first run.
	c.command("alice", "prd", "/talos roll v5")
	var again consoleMsg
	c.waitMessage("prd", "a second roll awaiting approval", func(x consoleMsg) bool {
		again = x
		return x.ID != m.ID && field(x, "State") == "awaiting approval"
	})
	if est := field(again, "Estimated duration"); !strings.HasPrefix(est, "about ") || !strings.Contains(est, "1 past run(s)") || strings.Contains(est, "staging") {
		t.Errorf("estimate from one past run: %q", est)
	}
}

func TestConsoleSoloOperatorFlow(t *testing.T) {
	c := newConsoleEnv(t, windowConfig)
	c.clock.Add(24*time.Hour + 7*time.Hour + 30*time.Minute) // inside Tuesday's window
	c.command("alice", "stg", "/talos roll v6")
	c.opMessage("stg", "roll", "succeeded")
	c.command("alice", "prd", "/talos roll v6")
	m := c.opMessage("prd", "roll", "awaiting approval")
	c.mustClick("alice", m, "Approve")
	confirm := c.waitText("prd", "You are approving your own request")
	c.mustClick("alice", confirm, "Confirm my approval")
	c.opMessage("prd", "roll", "succeeded")
}

// TestConsoleRefusals drives every approval refusal through the console; each
// is answered in the channel and audited with the actor.
func TestConsoleRefusals(t *testing.T) {
	c := newConsoleEnv(t, testConfig)
	c.command("alice", "stg", "/talos roll v9")
	c.opMessage("stg", "roll", "succeeded")
	c.command("alice", "prd", "/talos roll v9")
	m := c.opMessage("prd", "roll", "awaiting approval")
	for _, tc := range []struct{ user, want string }{
		{"carol", "refused: carol is not an approver for production"},
		{"alice", "refused: alice requested"},
	} {
		c.mustClick(tc.user, m, "Approve")
		c.waitText("prd", tc.want)
	}
	// A viewer requesting a disruptive command.
	c.command("carol", "prd", "/talos roll v9")
	c.waitText("prd", "refused: carol is a viewer in production")
	// An approval, then the same approver again: counted once.
	c.command("alice", "prd", "/talos cancel "+field(m, "Operation"))
	c.opMessage("prd", "roll", "cancelled")
	// Action on a cancelled operation: the buttons are gone, and an old
	// button id is refused by the console with a 4xx.
	if code, _ := c.click("bob", m, "Approve"); code < 400 || code >= 500 {
		t.Fatalf("click on a cancelled operation's stale button: HTTP %d, want 4xx", code)
	}
	// Forged ids.
	if code, msg := c.post("/api/console/actions", map[string]string{"user": "bob", "message_id": m.ID, "action_id": "aforged"}); code != http.StatusNotFound || msg == "" {
		t.Fatalf("forged action: HTTP %d %q", code, msg)
	}
	if code, _ := c.post("/api/console/actions", map[string]string{"user": "bob", "message_id": "m9999", "action_id": "x"}); code != http.StatusNotFound {
		t.Fatalf("unknown message: HTTP %d", code)
	}
	// Expiry, and a duplicate approval on a 2-approval operation.
	c.command("alice", "prd", "/talos roll v10 --skip-staging") // never run on staging
	m2 := c.opMessage("prd", "roll", "awaiting approval")       // the first roll is cancelled by now
	c.mustClick("bob", m2, "Approve")
	c.waitText("prd", "👍 approved by bob (1/2)")
	c.mustClick("bob", m2, "Approve")
	c.waitText("prd", "counted once")
	c.clock.Add(31 * time.Minute)
	c.mustClick("dave", m2, "Approve")
	// The refusal itself, not the card: the card says "expired" as soon as
	// the operation turns expired, before the refusal is audited and posted.
	c.waitText("prd", "refused: the approval request for "+field(m2, "Operation")+" expired")
	recs, err := c.store.QueryAudit(context.Background(), state.AuditQuery{Action: "action refused"})
	if err != nil {
		t.Fatal(err)
	}
	actors := map[string]bool{}
	for _, r := range recs {
		actors[r.Actor] = true
	}
	if !actors["carol"] || !actors["alice"] || !actors["dave"] {
		t.Fatalf("refusals not audited with their actors: %v", actors)
	}
}
