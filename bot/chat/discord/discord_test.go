package discord_test

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/talosbot/talosbot/bot/chat"
	"github.com/talosbot/talosbot/bot/chat/discord"
	"github.com/talosbot/talosbot/bot/chat/discord/discordfake"
)

const token = "test-bot-token"

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
		Title: "🕒 /talos upgrade · staging", Text: "plan: upgrade 2 nodes to v1.13.9",
		Fields: []chat.Field{{Label: "Operation", Value: "op1"}, {Label: "Requested by", Value: c.User}},
		Buttons: []chat.Button{{ActionID: "tok-approve", Label: "Approve", Style: "primary"},
			{ActionID: "tok-deny", Label: "Deny", Style: "danger"}},
	})
	s.note(func() { s.refs = append(s.refs, ref); s.errs = append(s.errs, err) })
	return err
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
	ref, err := s.adapter.Post(ctx, a.Channel, a.MessageRef, chat.Message{Text: "✅ upgrade finished: 2 nodes at v1.13.9"})
	s.note(func() { s.refs = append(s.refs, ref); s.errs = append(s.errs, err) })
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

func (s *stubHandler) refused() []chat.Refusal {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.refusals)
}

func (s *stubHandler) snapshot() ([]chat.Command, []chat.Action, []error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.commands), slices.Clone(s.actions), slices.Clone(s.errs)
}

func rest(method, pathPart string) func(discordfake.Record) bool {
	return func(r discordfake.Record) bool {
		return r.Kind == "rest" && r.Method == method && strings.Contains(r.Path, pathPart)
	}
}

func filter(rs []discordfake.Record, pred func(discordfake.Record) bool) []discordfake.Record {
	var out []discordfake.Record
	for _, r := range rs {
		if pred(r) {
			out = append(out, r)
		}
	}
	return out
}

func startGateway(t *testing.T, h *stubHandler, replays ...chat.Replays) (*discordfake.Server, *discord.Adapter, context.Context) {
	t.Helper()
	fake, err := discordfake.Start(discordfake.Options{Token: token})
	if err != nil {
		t.Fatal(err)
	}
	o := discord.Options{Token: token, APIURL: fake.URL(), GuildID: "300000000000000001", Handler: h}
	if len(replays) > 0 {
		o.Replays = replays[0]
	}
	a, err := discord.New(o)
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
	// Registered once READY arrived: the adapter is serving.
	if _, err := fake.WaitFor(ctx, func(rs []discordfake.Record) bool { return len(filter(rs, rest("PUT", "/commands"))) == 1 }); err != nil {
		t.Fatal(err)
	}
	// The fake counts a session as identified only once it sent READY, which
	// can come after the adapter's command registration: wait for it too.
	if err := fake.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	return fake, a, ctx
}

func TestGatewayEndToEnd(t *testing.T) {
	h := newStub()
	fake, _, ctx := startGateway(t, h)

	reg := filter(fake.Records(), rest("PUT", "/commands"))[0]
	if want := "/api/v9/applications/" + fake.ApplicationID() + "/guilds/300000000000000001/commands"; reg.Path != want {
		t.Fatalf("registered at %s, want %s", reg.Path, want)
	}
	var cmds []struct {
		Name    string `json:"name"`
		Options []struct {
			Type     int    `json:"type"`
			Name     string `json:"name"`
			Required bool   `json:"required"`
		} `json:"options"`
	}
	if err := json.Unmarshal(reg.Body, &cmds); err != nil || len(cmds) != 1 || cmds[0].Name != "talos" ||
		len(cmds[0].Options) != 1 || cmds[0].Options[0].Name != "command" || cmds[0].Options[0].Type != 3 || !cmds[0].Options[0].Required {
		t.Fatalf("registered %s", reg.Body)
	}

	ia, err := fake.SlashCommand("500000000000000001", "600000000000000001", "upgrade staging to v1.13.9")
	if err != nil {
		t.Fatal(err)
	}
	recs, err := fake.WaitFor(ctx, func(rs []discordfake.Record) bool {
		return len(filter(rs, rest("POST", "/channels/600000000000000001/messages"))) == 1 && len(filter(rs, rest("PATCH", "/messages/@original"))) == 1
	})
	if err != nil {
		t.Fatal(err)
	}
	cb := filter(recs, rest("POST", "/interactions/"+ia.ID+"/"+ia.Token+"/callback"))
	post := filter(recs, rest("POST", "/channels/600000000000000001/messages"))[0]
	if len(cb) != 1 || cb[0].Seq > post.Seq || !bytes.Contains(cb[0].Body, []byte(`"type":5`)) {
		t.Fatalf("the command must be deferred (type 5) before any message: callback %+v, post seq %d", cb, post.Seq)
	}
	orig := filter(recs, rest("PATCH", "/webhooks/"+fake.ApplicationID()+"/"+ia.Token+"/messages/@original"))
	if len(orig) != 1 || !bytes.Contains(orig[0].Body, []byte("upgrade staging to v1.13.9")) {
		t.Fatalf("deferred response not replaced by the command echo: %+v", orig)
	}
	var sent struct {
		Embeds []struct {
			Title, Description string
			Fields             []struct{ Name, Value string }
		}
		Components []struct {
			Type       int
			Components []struct {
				Type     int
				Style    int
				Label    string
				CustomID string `json:"custom_id"`
			}
		}
	}
	if err := json.Unmarshal(post.Body, &sent); err != nil {
		t.Fatal(err)
	}
	if len(sent.Embeds) != 1 || !strings.Contains(sent.Embeds[0].Title, "upgrade") || len(sent.Embeds[0].Fields) != 2 {
		t.Fatalf("embed %s", post.Body)
	}
	if len(sent.Components) != 1 || len(sent.Components[0].Components) != 2 {
		t.Fatalf("components %s", post.Body)
	}
	if b := sent.Components[0].Components; b[0].CustomID != "tok-approve" || b[0].Style != 1 || b[1].CustomID != "tok-deny" || b[1].Style != 4 {
		t.Fatalf("buttons %+v", b)
	}
	cmdsGot, _, _ := h.snapshot()
	if want := (chat.Command{User: "500000000000000001", Channel: "discord:600000000000000001", Text: "upgrade staging to v1.13.9"}); len(cmdsGot) != 1 || cmdsGot[0] != want {
		t.Fatalf("commands %+v", cmdsGot)
	}

	h.waitFor(t, ctx, "message ref", func() bool { return len(h.refs) == 1 })
	ref := h.refs[0]
	click, err := fake.Click("500000000000000002", "600000000000000001", ref, "tok-approve")
	if err != nil {
		t.Fatal(err)
	}
	recs, err = fake.WaitFor(ctx, func(rs []discordfake.Record) bool {
		return len(filter(rs, rest("PATCH", "/channels/600000000000000001/messages/"+ref))) == 3 &&
			len(filter(rs, rest("POST", "/channels/"+ref+"/messages"))) == 1
	})
	if err != nil {
		t.Fatal(err)
	}
	cb = filter(recs, rest("POST", "/interactions/"+click.ID+"/"+click.Token+"/callback"))
	edits := filter(recs, rest("PATCH", "/channels/600000000000000001/messages/"+ref))
	if len(cb) != 1 || cb[0].Seq > edits[0].Seq || !bytes.Contains(cb[0].Body, []byte(`"type":6`)) {
		t.Fatalf("click must be acknowledged (type 6) before edits: %+v", cb)
	}
	for i, e := range edits {
		if !bytes.Contains(e.Body, []byte(fmt.Sprintf("progress %d/3", i+1))) || !bytes.Contains(e.Body, []byte(`"components":[]`)) {
			t.Fatalf("edit %d: %s", i, e.Body)
		}
	}
	thread := filter(recs, rest("POST", "/channels/600000000000000001/messages/"+ref+"/threads"))
	summary := filter(recs, rest("POST", "/channels/"+ref+"/messages"))[0]
	if len(thread) != 1 || thread[0].Seq > summary.Seq || summary.Seq < edits[2].Seq || !bytes.Contains(summary.Body, []byte("upgrade finished")) {
		t.Fatalf("thread %+v, summary %s", thread, summary.Body)
	}
	if m, ok := fake.Message(ref); !ok || m.Edits != 3 {
		t.Fatalf("fake message %+v", m)
	}
	h.waitFor(t, ctx, "summary", func() bool { return len(h.refs) == 2 })
	_, acts, errs := h.snapshot()
	if want := (chat.Action{User: "500000000000000002", Channel: "discord:600000000000000001", MessageRef: ref, ActionID: "tok-approve"}); len(acts) != 1 || acts[0] != want {
		t.Fatalf("actions %+v", acts)
	}
	if !strings.HasPrefix(h.refs[1], ref+"/") {
		t.Fatalf("thread reply ref %q should be <thread>/<message>", h.refs[1])
	}
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	// A second reply reuses the thread (no second create) and its ref edits in the thread.
	a := h.adapter
	r2, err := a.Post(ctx, "discord:600000000000000001", ref, chat.Message{Text: "more detail"})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Edit(ctx, "discord:600000000000000001", r2, chat.Message{Text: "edited detail"}); err != nil {
		t.Fatal(err)
	}
	if n := len(filter(fake.Records(), rest("POST", "/threads"))); n != 1 {
		t.Fatalf("%d thread creations", n)
	}
}

func TestGatewayMalformedInteractionsAnsweredNotRun(t *testing.T) {
	h := newStub()
	fake, a, ctx := startGateway(t, h)
	long := strings.Repeat("x", 101)
	var ids []discordfake.Interaction
	dispatch := func(mut func(map[string]any)) {
		in, p := fake.SlashCommandPayload("500000000000000001", "600000000000000001", "status")
		mut(p)
		if err := fake.Dispatch(p); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, in)
	}
	dispatch(func(p map[string]any) { p["data"].(map[string]any)["options"] = []any{} })
	dispatch(func(p map[string]any) { p["data"].(map[string]any)["name"] = "deploy" })
	dispatch(func(p map[string]any) { delete(p, "member") })
	dispatch(func(p map[string]any) {
		p["data"].(map[string]any)["options"] = []any{map[string]any{"name": "command", "type": 4, "value": 7}}
	})
	in, p := fake.ClickPayload("500000000000000001", "600000000000000001", "1", long)
	if err := fake.Dispatch(p); err != nil {
		t.Fatal(err)
	}
	ids = append(ids, in)
	wants := []string{"usage: /talos command:", "only has /talos", "no user", "usage", "custom_id longer than 100"}
	for i, in := range ids {
		recs, err := fake.WaitFor(ctx, func(rs []discordfake.Record) bool {
			return len(filter(rs, rest("POST", "/interactions/"+in.ID+"/"))) == 1
		})
		if err != nil {
			t.Fatal(err)
		}
		body := filter(recs, rest("POST", "/interactions/"+in.ID+"/"))[0].Body
		if !bytes.Contains(body, []byte(`"type":4`)) || !bytes.Contains(body, []byte(`"flags":64`)) || !bytes.Contains(body, []byte(wants[i])) {
			t.Errorf("interaction %d answered %s, want ephemeral %q", i, body, wants[i])
		}
	}
	// A valid command afterwards still works; nothing malformed reached the handler.
	if _, err := fake.SlashCommand("500000000000000001", "600000000000000001", "status"); err != nil {
		t.Fatal(err)
	}
	h.waitFor(t, ctx, "valid command", func() bool { return len(h.commands) == 1 })
	a.Wait()
	if cmds, acts, _ := h.snapshot(); len(cmds) != 1 || len(acts) != 0 || cmds[0].Text != "status" {
		t.Fatalf("handler saw %+v %+v", cmds, acts)
	}
}

// seenLog is a Replays that reports every answer, so a test can wait until
// the adapter has decided about each delivery.
type seenLog struct {
	chat.MemoryReplays
	answers chan bool
}

func (l *seenLog) FirstSeen(ctx context.Context, key string, now time.Time, window time.Duration) (bool, error) {
	first, err := l.MemoryReplays.FirstSeen(ctx, key, now, window)
	l.answers <- first
	return first, err
}

// TestGatewayRedeliveryRunsOnce: the same interaction delivered twice over
// the gateway (a resumed session) is acknowledged and run once.
func TestGatewayRedeliveryRunsOnce(t *testing.T) {
	h := newStub()
	log := &seenLog{answers: make(chan bool, 2)}
	fake, a, ctx := startGateway(t, h, log)
	in, p := fake.SlashCommandPayload("500000000000000001", "600000000000000001", "status")
	for range 2 {
		if err := fake.Dispatch(p); err != nil {
			t.Fatal(err)
		}
	}
	var firsts int
	for range 2 {
		select {
		case first := <-log.answers:
			if first {
				firsts++
			}
		case <-ctx.Done():
			t.Fatal("the adapter did not check both deliveries")
		}
	}
	h.waitFor(t, ctx, "the command", func() bool { return len(h.commands) >= 1 })
	a.Wait()
	cmds, _, _ := h.snapshot()
	if firsts != 1 || len(cmds) != 1 {
		t.Fatalf("%d deliveries new, handler saw %+v; want one run", firsts, cmds)
	}
	if n := len(filter(fake.Records(), rest("POST", "/interactions/"+in.ID+"/"))); n != 1 {
		t.Fatalf("%d acknowledgements of the redelivered interaction, want 1", n)
	}
}

func TestRenderLimits(t *testing.T) {
	fake, err := discordfake.Start(discordfake.Options{Token: token})
	if err != nil {
		t.Fatal(err)
	}
	defer fake.Close()
	a, err := discord.New(discord.Options{Token: token, APIURL: fake.URL()})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	_, err = a.Post(ctx, "discord:1", "", chat.Message{Text: "x", Buttons: []chat.Button{{ActionID: strings.Repeat("a", 101), Label: "Approve"}}})
	if err == nil || !strings.Contains(err.Error(), "custom_id must be 1..100") {
		t.Fatalf("101-char custom_id: %v", err)
	}
	var many []chat.Button
	for i := range 26 {
		many = append(many, chat.Button{ActionID: fmt.Sprint("t", i), Label: "b"})
	}
	if _, err := a.Post(ctx, "discord:1", "", chat.Message{Text: "x", Buttons: many}); err == nil || !strings.Contains(err.Error(), "at most 25") {
		t.Fatalf("26 buttons: %v", err)
	}
	if len(filter(fake.Records(), rest("POST", "/messages"))) != 0 {
		t.Fatal("an invalid message reached Discord")
	}
	ref, err := a.Post(ctx, "discord:1", "", chat.Message{Title: strings.Repeat("T", 300), Text: "x", Buttons: many[:7],
		Fields: []chat.Field{{Label: "empty", Value: ""}}})
	if err != nil {
		t.Fatal(err)
	}
	post := filter(fake.Records(), rest("POST", "/messages"))[0]
	var sent struct {
		Embeds     []struct{ Title string }
		Components []struct{ Components []any }
	}
	_ = json.Unmarshal(post.Body, &sent)
	if len([]rune(sent.Embeds[0].Title)) != 256 || len(sent.Components) != 2 || len(sent.Components[0].Components) != 5 || len(sent.Components[1].Components) != 2 {
		t.Fatalf("rendered %s", post.Body)
	}
	if err := a.Edit(ctx, "slack:C1", ref, chat.Message{Text: "x"}); err == nil || !strings.Contains(err.Error(), "platform") {
		t.Fatalf("edit on a slack channel: %v", err)
	}
	if err := a.Edit(ctx, "discord:1", "999", chat.Message{Text: "x"}); err == nil || !strings.Contains(err.Error(), "Unknown Message") {
		t.Fatalf("edit of an unknown message: %v", err)
	}
}

func TestRunFailsWithBadToken(t *testing.T) {
	fake, err := discordfake.Start(discordfake.Options{Token: token})
	if err != nil {
		t.Fatal(err)
	}
	defer fake.Close()
	a, err := discord.New(discord.Options{Token: "wrong-token", APIURL: fake.URL()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err = a.Run(ctx)
	if err == nil || !strings.Contains(err.Error(), "chat.discord.token") || strings.Contains(err.Error(), "wrong-token") {
		t.Fatalf("Run with a wrong token: %v", err)
	}
}

// ---- HTTP interactions endpoint ----

func signed(priv ed25519.PrivateKey, ts string, body []byte) *http.Request {
	r := httptest.NewRequest(http.MethodPost, "/discord/interactions", bytes.NewReader(body))
	r.Header.Set("Content-Type", "application/json")
	r.Header.Set("X-Signature-Timestamp", ts)
	r.Header.Set("X-Signature-Ed25519", hex.EncodeToString(ed25519.Sign(priv, append([]byte(ts), body...))))
	return r
}

func TestHTTPInteractionsEd25519(t *testing.T) {
	fake, err := discordfake.Start(discordfake.Options{Token: token})
	if err != nil {
		t.Fatal(err)
	}
	defer fake.Close()
	priv := ed25519.NewKeyFromSeed(bytes.Repeat([]byte{7}, 32))
	other := ed25519.NewKeyFromSeed(bytes.Repeat([]byte{9}, 32))
	h := newStub()
	a, err := discord.New(discord.Options{Token: token, APIURL: fake.URL(), PublicKey: hex.EncodeToString(priv.Public().(ed25519.PublicKey)), Handler: h,
		Clock: func() time.Time { return time.Unix(1700000030, 0) }})
	if err != nil {
		t.Fatal(err)
	}
	h.adapter = a
	srv := a.HTTPHandler()
	serve := func(r *http.Request) *httptest.ResponseRecorder {
		w := httptest.NewRecorder()
		srv.ServeHTTP(w, r)
		return w
	}
	ts := "1700000000"

	if w := serve(signed(priv, ts, []byte(`{"id":"1","type":1,"application_id":"2","token":"t","version":1}`))); w.Code != 200 || strings.TrimSpace(w.Body.String()) != `{"type":1}` {
		t.Fatalf("PING: %d %s", w.Code, w.Body)
	}
	_, payload := fake.SlashCommandPayload("500000000000000001", "600000000000000001", "upgrade staging")
	body, _ := json.Marshal(payload)

	// Refused: wrong key, tampered body, tampered timestamp, no signature.
	bad := []*http.Request{signed(other, ts, body)}
	tampered := signed(priv, ts, body)
	tampered.Body = httptestBody(bytes.Replace(body, []byte("upgrade staging"), []byte("upgrade production"), 1))
	bad = append(bad, tampered)
	ots := signed(priv, ts, body)
	ots.Header.Set("X-Signature-Timestamp", "1700000001")
	bad = append(bad, ots)
	nosig := signed(priv, ts, body)
	nosig.Header.Del("X-Signature-Ed25519")
	bad = append(bad, nosig)
	for i, r := range bad {
		if w := serve(r); w.Code != http.StatusUnauthorized {
			t.Errorf("bad request %d: %d %s", i, w.Code, w.Body)
		}
	}
	a.Wait()
	if cmds, _, _ := h.snapshot(); len(cmds) != 0 {
		t.Fatalf("refused requests ran: %+v", cmds)
	}

	// Accepted: deferred in the HTTP response, then the work, then the echo.
	w := serve(signed(priv, ts, body))
	if w.Code != 200 || strings.TrimSpace(w.Body.String()) != `{"type":5}` {
		t.Fatalf("signed command: %d %s", w.Code, w.Body)
	}
	a.Wait()
	cmds, _, errs := h.snapshot()
	if len(cmds) != 1 || cmds[0].Text != "upgrade staging" || cmds[0].Channel != "discord:600000000000000001" || errs[0] != nil {
		t.Fatalf("commands %+v errs %v", cmds, errs)
	}
	recs := fake.Records()
	if len(filter(recs, rest("POST", "/channels/600000000000000001/messages"))) != 1 || len(filter(recs, rest("PATCH", "/@original"))) != 1 {
		t.Fatalf("traffic %+v", recs)
	}
	if len(filter(recs, rest("POST", "/callback"))) != 0 {
		t.Fatal("HTTP mode must answer in the response, not through the callback endpoint")
	}

	// Signed but malformed → 400; signed but unusable → ephemeral answer.
	if w := serve(signed(priv, ts, []byte(`{"type":2,"data":`))); w.Code != 400 {
		t.Errorf("malformed: %d %s", w.Code, w.Body)
	}
	if w := serve(signed(priv, ts, []byte(`{"id":"77","type":2,"channel_id":"1","member":{"user":{"id":"2"}},"data":{"name":"talos"}}`))); w.Code != 200 || !strings.Contains(w.Body.String(), `"flags":64`) {
		t.Errorf("no option: %d %s", w.Code, w.Body)
	}

	// Without a public key the endpoint says how to fix it.
	nokey, _ := discord.New(discord.Options{Token: token, APIURL: fake.URL()})
	w = httptest.NewRecorder()
	nokey.HTTPHandler().ServeHTTP(w, signed(priv, ts, body))
	if w.Code != http.StatusServiceUnavailable || !strings.Contains(w.Body.String(), "public_key") {
		t.Errorf("no key: %d %s", w.Code, w.Body)
	}
}

// TestHTTPInteractionsReplayRefused: a signed interaction runs once. Sent
// again (same id) it is refused; a new id stamped more than 5 minutes from
// now, either way, is refused too. Each refusal is handed to the bot once per
// id, with the signed user and channel, and nothing runs. The replay state is
// the one passed in (the bot's store), so a new adapter on the same state (a
// restart) still refuses.
func TestHTTPInteractionsReplayRefused(t *testing.T) {
	fake, err := discordfake.Start(discordfake.Options{Token: token})
	if err != nil {
		t.Fatal(err)
	}
	defer fake.Close()
	priv := ed25519.NewKeyFromSeed(bytes.Repeat([]byte{7}, 32))
	now := time.Unix(1800000000, 0)
	replays := &chat.MemoryReplays{}
	h := newStub()
	newAdapter := func() *discord.Adapter {
		a, err := discord.New(discord.Options{Token: token, APIURL: fake.URL(), PublicKey: hex.EncodeToString(priv.Public().(ed25519.PublicKey)),
			Handler: h, Clock: func() time.Time { return now }, Replays: replays})
		if err != nil {
			t.Fatal(err)
		}
		h.adapter = a
		return a
	}
	a := newAdapter()
	serve := func(a *discord.Adapter, r *http.Request) *httptest.ResponseRecorder {
		w := httptest.NewRecorder()
		a.HTTPHandler().ServeHTTP(w, r)
		a.Wait()
		return w
	}
	stamp := func(d time.Duration) string { return strconv.FormatInt(now.Add(d).Unix(), 10) }
	_, payload := fake.SlashCommandPayload("500000000000000001", "600000000000000001", "unfreeze production")
	body, _ := json.Marshal(payload)

	if w := serve(a, signed(priv, stamp(-time.Minute), body)); w.Code != 200 {
		t.Fatalf("first delivery: %d %s", w.Code, w.Body)
	}
	for i := range 3 {
		if w := serve(a, signed(priv, stamp(-time.Minute), body)); w.Code != http.StatusUnauthorized || !strings.Contains(w.Body.String(), "replay") {
			t.Fatalf("replay %d: %d %s", i, w.Code, w.Body)
		}
	}
	if w := serve(newAdapter(), signed(priv, stamp(-time.Minute), body)); w.Code != http.StatusUnauthorized {
		t.Fatalf("replay after a restart: %d %s", w.Code, w.Body)
	}
	rs := h.refused()
	if len(rs) != 1 || rs[0].What != "replay" || rs[0].User != "500000000000000001" || rs[0].Channel != "discord:600000000000000001" || rs[0].Detail["interaction_id"] == "" {
		t.Fatalf("refusals %+v, want one for the replayed id", rs)
	}

	// Stale or future timestamps, on new ids, signed correctly.
	for _, d := range []time.Duration{-6 * time.Minute, 6 * time.Minute, -time.Hour} {
		_, p := fake.SlashCommandPayload("500000000000000001", "600000000000000001", "unfreeze production")
		b, _ := json.Marshal(p)
		if w := serve(a, signed(priv, stamp(d), b)); w.Code != http.StatusUnauthorized || !strings.Contains(w.Body.String(), "replay window") {
			t.Fatalf("timestamp %s from now: %d %s", d, w.Code, w.Body)
		}
	}
	if rs := h.refused(); len(rs) != 4 || !strings.Contains(rs[1].Reason, "window") {
		t.Fatalf("refusals %+v", rs)
	}
	// Inside the window, a new id runs.
	_, p := fake.SlashCommandPayload("500000000000000001", "600000000000000001", "status production")
	b, _ := json.Marshal(p)
	if w := serve(a, signed(priv, stamp(4*time.Minute), b)); w.Code != 200 {
		t.Fatalf("fresh request: %d %s", w.Code, w.Body)
	}
	cmds, _, _ := h.snapshot()
	if len(cmds) != 2 || cmds[0].Text != "unfreeze production" || cmds[1].Text != "status production" {
		t.Fatalf("ran %+v, want the first delivery and the fresh one only", cmds)
	}
}

type readCloser struct{ *bytes.Reader }

func (readCloser) Close() error { return nil }

func httptestBody(b []byte) readCloser { return readCloser{bytes.NewReader(b)} }

func TestNewValidates(t *testing.T) {
	if _, err := discord.New(discord.Options{}); err == nil || !strings.Contains(err.Error(), "token") {
		t.Errorf("no token: %v", err)
	}
	if _, err := discord.New(discord.Options{Token: "x", PublicKey: "abcd"}); err == nil || !strings.Contains(err.Error(), "public key") {
		t.Errorf("short key: %v", err)
	}
}
