package slack_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/talosbot/talosbot/bot/chat"
	"github.com/talosbot/talosbot/bot/chat/slack"
	"github.com/talosbot/talosbot/bot/chat/slack/slackfake"
)

const (
	botToken = "xoxb-test-bot-token"
	appToken = "xapp-test-app-token"
)

// stubHandler behaves like the engine: a command posts a plan with Approve
// and Deny buttons; Approve edits the message three times (progress) and
// posts a final summary in the thread.
type stubHandler struct {
	adapter chat.Adapter

	mu       sync.Mutex
	commands []chat.Command
	actions  []chat.Action
	refusals []chat.Refusal
	refs     []string
	errs     []error
	changed  chan struct{}
}

func newStub() *stubHandler { return &stubHandler{changed: make(chan struct{})} }

func (s *stubHandler) note(f func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f()
	close(s.changed)
	s.changed = make(chan struct{})
}

func (s *stubHandler) HandleCommand(ctx context.Context, c chat.Command) error {
	s.note(func() { s.commands = append(s.commands, c) })
	if !strings.HasPrefix(c.Text, "upgrade") {
		return nil
	}
	ref, err := s.adapter.Post(ctx, c.Channel, "", chat.Message{
		Title:  "🕒 /talos upgrade · staging",
		Text:   "plan: upgrade 2 nodes to v1.13.9",
		Fields: []chat.Field{{Label: "Operation", Value: "op1"}, {Label: "Requested by", Value: c.User}},
		Buttons: []chat.Button{{ActionID: "tok-approve", Label: "Approve", Style: "primary"},
			{ActionID: "tok-deny", Label: "Deny", Style: "danger"}},
	})
	s.note(func() { s.refs = append(s.refs, ref); s.errs = append(s.errs, err) })
	return err
}

func (s *stubHandler) refused() []chat.Refusal {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.refusals)
}

func (s *stubHandler) HandleRefusal(_ context.Context, r chat.Refusal) error {
	s.note(func() { s.refusals = append(s.refusals, r) })
	return nil
}

func (s *stubHandler) HandleAction(ctx context.Context, a chat.Action) error {
	s.note(func() { s.actions = append(s.actions, a) })
	if a.ActionID != "tok-approve" {
		return nil
	}
	for i := 1; i <= 3; i++ {
		if err := s.adapter.Edit(ctx, a.Channel, a.MessageRef, chat.Message{
			Title: "⏳ /talos upgrade · staging", Text: fmt.Sprintf("progress %d/3", i),
		}); err != nil {
			s.note(func() { s.errs = append(s.errs, err) })
			return err
		}
	}
	_, err := s.adapter.Post(ctx, a.Channel, a.MessageRef, chat.Message{Text: "✅ upgrade finished: 2 nodes at v1.13.9"})
	s.note(func() { s.errs = append(s.errs, err) })
	return err
}

func (s *stubHandler) waitFor(t *testing.T, ctx context.Context, what string, pred func() bool) {
	t.Helper()
	for {
		s.mu.Lock()
		ok, ch := pred(), s.changed
		s.mu.Unlock()
		if ok {
			return
		}
		select {
		case <-ch:
		case <-ctx.Done():
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

func (s *stubHandler) snapshot() ([]chat.Command, []chat.Action, []error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.commands), slices.Clone(s.actions), slices.Clone(s.errs)
}

func startSocket(t *testing.T, h *stubHandler) (*slackfake.Server, *slack.Adapter, context.Context) {
	t.Helper()
	fake, err := slackfake.Start(slackfake.Options{BotToken: botToken, AppToken: appToken})
	if err != nil {
		t.Fatal(err)
	}
	a, err := slack.New(slack.Options{BotToken: botToken, AppToken: appToken, APIURL: fake.APIURL(), Handler: h,
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	h.adapter = a
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	runCtx, stop := context.WithCancel(ctx)
	errc := make(chan error, 1)
	go func() { errc <- a.Run(runCtx) }()
	t.Cleanup(func() {
		stop()
		if err := <-errc; err != nil {
			t.Errorf("Run: %v", err)
		}
		a.Wait()
		fake.Close()
		cancel()
	})
	if err := fake.WaitConnected(ctx, 1); err != nil {
		t.Fatal(err)
	}
	return fake, a, ctx
}

func seqOf(rs []slackfake.Record, pred func(slackfake.Record) bool) []slackfake.Record {
	var out []slackfake.Record
	for _, r := range rs {
		if pred(r) {
			out = append(out, r)
		}
	}
	return out
}

func ackOf(id string) func(slackfake.Record) bool {
	return func(r slackfake.Record) bool { return r.Kind == "ack" && r.EnvelopeID == id }
}

func api(method string) func(slackfake.Record) bool {
	return func(r slackfake.Record) bool { return r.Kind == "api" && r.Method == method }
}

func TestSocketModeEndToEnd(t *testing.T) {
	h := newStub()
	fake, _, ctx := startSocket(t, h)

	env, err := fake.SlashCommand("U012ALICE", "C0OPS", "upgrade staging to v1.13.9")
	if err != nil {
		t.Fatal(err)
	}
	recs, err := fake.WaitFor(ctx, func(rs []slackfake.Record) bool { return len(seqOf(rs, api("chat.postMessage"))) == 1 })
	if err != nil {
		t.Fatal(err)
	}
	acks, posts := seqOf(recs, ackOf(env)), seqOf(recs, api("chat.postMessage"))
	if len(acks) != 1 || acks[0].Seq > posts[0].Seq {
		t.Fatalf("slash command must be acked before any chat.postMessage: acks %+v, post seq %d", acks, posts[0].Seq)
	}
	if string(acks[0].Payload) != "" && string(acks[0].Payload) != "null" {
		t.Errorf("plain ack expected, got payload %s", acks[0].Payload)
	}
	cmds, _, _ := h.snapshot()
	if want := (chat.Command{User: "U012ALICE", Channel: "slack:C0OPS", Text: "upgrade staging to v1.13.9"}); len(cmds) != 1 || cmds[0] != want {
		t.Fatalf("commands = %+v, want %+v", cmds, want)
	}
	p := posts[0].Params
	if p.Get("channel") != "C0OPS" || p.Get("thread_ts") != "" {
		t.Fatalf("post params %v", p)
	}
	var blocks []map[string]any
	if err := json.Unmarshal([]byte(p.Get("blocks")), &blocks); err != nil {
		t.Fatalf("blocks: %v (%s)", err, p.Get("blocks"))
	}
	var types []string
	for _, b := range blocks {
		types = append(types, b["type"].(string))
	}
	if strings.Join(types, ",") != "header,section,section,actions" {
		t.Fatalf("block types %v", types)
	}
	els := blocks[3]["elements"].([]any)
	b0 := els[0].(map[string]any)
	if b0["action_id"] != "tok-approve" || b0["value"] != "tok-approve" || b0["style"] != "primary" || els[1].(map[string]any)["style"] != "danger" {
		t.Fatalf("buttons %v", els)
	}
	if !strings.Contains(p.Get("text"), "plan: upgrade 2 nodes") {
		t.Errorf("fallback text %q", p.Get("text"))
	}

	h.waitFor(t, ctx, "post ref", func() bool { return len(h.refs) == 1 })
	ts := h.refs[0]
	click, err := fake.BlockAction("U034BOB", "C0OPS", ts, "tok-approve")
	if err != nil {
		t.Fatal(err)
	}
	recs, err = fake.WaitFor(ctx, func(rs []slackfake.Record) bool {
		return len(seqOf(rs, api("chat.update"))) == 3 && len(seqOf(rs, api("chat.postMessage"))) == 2
	})
	if err != nil {
		t.Fatal(err)
	}
	acks, updates := seqOf(recs, ackOf(click)), seqOf(recs, api("chat.update"))
	if len(acks) != 1 || acks[0].Seq > updates[0].Seq {
		t.Fatalf("click must be acked before chat.update: %+v", acks)
	}
	for i, u := range updates {
		if u.Params.Get("channel") != "C0OPS" || u.Params.Get("ts") != ts {
			t.Fatalf("update %d params %v, want ts %s", i, u.Params, ts)
		}
		if !strings.Contains(u.Params.Get("blocks"), fmt.Sprintf("progress %d/3", i+1)) {
			t.Fatalf("update %d blocks %s", i, u.Params.Get("blocks"))
		}
	}
	final := seqOf(recs, api("chat.postMessage"))[1]
	if final.Params.Get("thread_ts") != ts || !strings.Contains(final.Params.Get("text"), "upgrade finished") || final.Seq < updates[2].Seq {
		t.Fatalf("final summary %v (seq %d)", final.Params, final.Seq)
	}
	if m, ok := fake.Message("C0OPS", ts); !ok || m.Updates != 3 || !strings.Contains(m.Text, "progress 3/3") {
		t.Fatalf("fake message %+v", m)
	}
	h.waitFor(t, ctx, "summary posted", func() bool { return len(h.errs) == 2 })
	_, acts, errs := h.snapshot()
	if want := (chat.Action{User: "U034BOB", Channel: "slack:C0OPS", MessageRef: ts, ActionID: "tok-approve"}); len(acts) != 1 || acts[0] != want {
		t.Fatalf("actions = %+v, want %+v", acts, want)
	}
	for _, err := range errs {
		if err != nil {
			t.Fatalf("adapter call failed: %v", err)
		}
	}
}

func TestSocketModeMentionsDedupeAndMalformed(t *testing.T) {
	h := newStub()
	fake, a, ctx := startSocket(t, h)

	// An app mention reaches HandleCommand without the mention.
	ev1, err := fake.AppMention("", "Ev001", "U012ALICE", "C0OPS", "hey <@U0TALOSBOT> health staging", 0)
	if err != nil {
		t.Fatal(err)
	}
	h.waitFor(t, ctx, "mention handled", func() bool { return len(h.commands) == 1 })
	// Slack's retry: new envelope, same event_id. Acked, not run again.
	ev2, _ := fake.AppMention("", "Ev001", "U012ALICE", "C0OPS", "hey <@U0TALOSBOT> health staging", 1)
	// Redelivery of the same envelope id. Acked, not run again.
	ev3, _ := fake.AppMention(ev1, "Ev002", "U012ALICE", "C0OPS", "<@U0TALOSBOT> status", 1)
	// The bot's own mention is ignored.
	ev4, _ := fake.AppMention("", "Ev003", "U0TALOSBOT", "C0OPS", "<@U0TALOSBOT> status", 0)
	// A slash command without a user is answered, not run.
	bad, _ := fake.SendEnvelope("", "slash_commands", map[string]string{"channel_id": "C0OPS", "text": "status"}, 0)
	// A slash command whose payload has the wrong shape entirely.
	worse, _ := fake.SendEnvelope("", "slash_commands", []int{1, 2, 3}, 0)
	// An envelope type the client does not know, and a garbage frame.
	odd, _ := fake.SendEnvelope("", "brand_new_type", map[string]string{}, 0)
	if err := fake.SendRaw([]byte("{not json")); err != nil {
		t.Fatal(err)
	}
	// A click on a message that carries no action id.
	noact, _ := fake.SendEnvelope("", "interactive", map[string]any{"type": "block_actions", "user": map[string]string{"id": "U1"},
		"channel": map[string]string{"id": "C0OPS"}, "actions": []any{}}, 0)
	sentinel, _ := fake.SlashCommand("U056CAROL", "C0OPS", "sentinel")

	for _, id := range []string{ev1, ev2, ev3, ev4, bad, worse, odd, noact, sentinel} {
		if _, err := fake.WaitAck(ctx, id); err != nil {
			t.Fatalf("envelope %s not acked: %v", id, err)
		}
	}
	badAck, _ := fake.WaitAck(ctx, bad)
	if !strings.Contains(string(badAck.Payload), "no user_id") || !strings.Contains(string(badAck.Payload), "ephemeral") {
		t.Fatalf("malformed slash command answer = %s", badAck.Payload)
	}
	worseAck, _ := fake.WaitAck(ctx, worse)
	if !strings.Contains(string(worseAck.Payload), "could not read") {
		t.Fatalf("unparseable slash command answer = %s", worseAck.Payload)
	}
	h.waitFor(t, ctx, "sentinel handled", func() bool { return len(h.commands) == 2 })
	a.Wait() // every dispatched handler has returned; duplicates would show now
	cmds, acts, _ := h.snapshot()
	want := []chat.Command{{User: "U012ALICE", Channel: "slack:C0OPS", Text: "health staging"}, {User: "U056CAROL", Channel: "slack:C0OPS", Text: "sentinel"}}
	if !slices.Equal(cmds, want) || len(acts) != 0 {
		t.Fatalf("commands = %+v (actions %+v), want %+v", cmds, acts, want)
	}
}

func TestSocketModeReconnectsOnDisconnect(t *testing.T) {
	h := newStub()
	fake, _, ctx := startSocket(t, h)
	if err := fake.Disconnect(); err != nil {
		t.Fatal(err)
	}
	if err := fake.WaitConnected(ctx, 2); err != nil {
		t.Fatal(err)
	}
	if _, err := fake.SlashCommand("U1", "C1", "status"); err != nil {
		t.Fatal(err)
	}
	h.waitFor(t, ctx, "command after reconnect", func() bool { return len(h.commands) == 1 })
}

func TestRunFailsWithBadBotToken(t *testing.T) {
	fake, err := slackfake.Start(slackfake.Options{BotToken: botToken, AppToken: appToken})
	if err != nil {
		t.Fatal(err)
	}
	defer fake.Close()
	a, err := slack.New(slack.Options{BotToken: "xoxb-wrong", AppToken: appToken, APIURL: fake.APIURL()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err = a.Run(ctx)
	if err == nil || !strings.Contains(err.Error(), "invalid_auth") || !strings.Contains(err.Error(), "bot_token") {
		t.Fatalf("Run with a wrong token: %v", err)
	}
	if strings.Contains(err.Error(), "xoxb-wrong") {
		t.Fatal("token leaked into the error")
	}
}

func TestNewValidates(t *testing.T) {
	for _, c := range []struct {
		o    slack.Options
		want string
	}{
		{slack.Options{BotToken: botToken}, "app-level token"},
		{slack.Options{BotToken: botToken, Mode: slack.ModeHTTP}, "signing secret"},
		{slack.Options{AppToken: appToken}, "bot token"},
		{slack.Options{BotToken: botToken, Mode: "rtm"}, "unknown mode"},
	} {
		if _, err := slack.New(c.o); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("New(%+v) = %v, want %q", c.o.Mode, err, c.want)
		}
	}
}

func TestBlocksLimits(t *testing.T) {
	m := chat.Message{Title: strings.Repeat("t", 400), Text: strings.Repeat("x", 5000)}
	for i := range 23 {
		m.Fields = append(m.Fields, chat.Field{Label: fmt.Sprint("f", i), Value: "v"})
	}
	for i := range 30 {
		m.Buttons = append(m.Buttons, chat.Button{ActionID: fmt.Sprint("tok", i), Label: strings.Repeat("L", 100)})
	}
	m.Buttons = append(m.Buttons, chat.Button{ActionID: strings.Repeat("z", 300), Label: "too long"})
	raw, err := json.Marshal(slack.Blocks(m))
	if err != nil {
		t.Fatal(err)
	}
	var blocks []struct {
		Type     string                 `json:"type"`
		Text     *struct{ Text string } `json:"text"`
		Fields   []any                  `json:"fields"`
		Elements []struct {
			ActionID string `json:"action_id"`
			Text     struct{ Text string }
		} `json:"elements"`
	}
	if err := json.Unmarshal(raw, &blocks); err != nil {
		t.Fatal(err)
	}
	// header, text, 3 field sections (10+10+3), 2 action blocks (25+5)
	if len(blocks) != 7 {
		t.Fatalf("%d blocks: %s", len(blocks), raw)
	}
	if n := len([]rune(blocks[0].Text.Text)); n != 150 {
		t.Errorf("header length %d", n)
	}
	if n := len([]rune(blocks[1].Text.Text)); n != 3000 {
		t.Errorf("section length %d", n)
	}
	if len(blocks[2].Fields) != 10 || len(blocks[4].Fields) != 3 {
		t.Errorf("fields per block wrong")
	}
	if len(blocks[5].Elements) != 25 || len(blocks[6].Elements) != 5 {
		t.Errorf("buttons per block: %d, %d (the 300-char action id must be dropped)", len(blocks[5].Elements), len(blocks[6].Elements))
	}
	if n := len([]rune(blocks[5].Elements[0].Text.Text)); n != 75 {
		t.Errorf("button label length %d", n)
	}
	if b := slack.Blocks(chat.Message{}); len(b) != 1 {
		t.Errorf("empty message must still render one block, got %d", len(b))
	}
}
