package web_test

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/talosbot/talosbot/bot/chat"
	"github.com/talosbot/talosbot/bot/chat/web"
)

// stubHandler answers "/talos health staging" like the engine would: a
// message with a button, plus a thread reply; it records every click.
type stubHandler struct {
	console *web.Console

	mu       sync.Mutex
	commands []chat.Command
	actions  []chat.Action
	refusals []chat.Refusal
	changed  chan struct{}
}

func newStub(c *web.Console) *stubHandler {
	s := &stubHandler{console: c, changed: make(chan struct{})}
	c.SetHandler(s)
	return s
}

func (s *stubHandler) note(f func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f()
	close(s.changed)
	s.changed = make(chan struct{})
}

// HandleCommand records the command once its answer is posted, so waiting
// for the record means the messages exist.
func (s *stubHandler) HandleCommand(ctx context.Context, c chat.Command) error {
	defer s.note(func() { s.commands = append(s.commands, c) })
	if c.Text != "/talos health staging" {
		_, err := s.console.Post(ctx, c.Channel, "", chat.Message{Text: "unknown command " + c.Text})
		return err
	}
	ref, err := s.console.Post(ctx, c.Channel, "", chat.Message{
		Title:   "✅ /talos health staging · staging",
		Text:    "▰▰▰▰▰ 7/7\nall probes passed",
		Fields:  []chat.Field{{Label: "Requested by", Value: c.User}},
		Buttons: []chat.Button{{ActionID: "act-rerun", Label: "Run again", Style: "primary"}},
	})
	if err != nil {
		return err
	}
	_, err = s.console.Post(ctx, c.Channel, ref, chat.Message{Text: "etcd: 1/1 members healthy, leader cp-1"})
	return err
}

func (s *stubHandler) HandleAction(_ context.Context, a chat.Action) error {
	s.note(func() { s.actions = append(s.actions, a) })
	return nil
}

func (s *stubHandler) HandleRefusal(_ context.Context, r chat.Refusal) error {
	s.note(func() { s.refusals = append(s.refusals, r) })
	return nil
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

// Each user's console token.
const (
	aliceTok = "alice-console-token-000000000001"
	bobTok   = "bob-console-token-00000000000002"
)

// newConsole is the serve console (per-user tokens), or with open the demo's
// (a user picker, no tokens).
func newConsole(t *testing.T, open bool) *web.Console {
	t.Helper()
	o := web.Options{Channels: []string{"ops", "lab"},
		UserLabels: map[string]string{"alice": "operator", "bob": "approver", "carol": "viewer"},
		Clock:      func() time.Time { return time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC) }}
	if open {
		o.Open, o.Users = true, []string{"alice", "bob", "carol"}
	} else {
		o.Tokens = map[string]string{"alice": aliceTok, "bob": bobTok}
	}
	c, err := web.New(o)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func call(t *testing.T, h http.Handler, method, path, token, body string) (int, string) {
	t.Helper()
	r := httptest.NewRequest(method, path, strings.NewReader(body))
	r.Host = "127.0.0.1:8080" // as the browser on the demo's loopback address sends it
	if token != "" {
		r.Header.Set("Authorization", "Bearer "+token)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w.Code, w.Body.String()
}

func TestConsoleAPI(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c := newConsole(t, false)
	stub := newStub(c)
	h := c.Handler()

	for _, p := range []string{"/", "/console"} {
		if code, body := call(t, h, "GET", p, "", ""); code != 200 || !strings.Contains(body, "talosbot console") {
			t.Fatalf("GET %s: %d", p, code)
		}
	}
	if code, _ := call(t, h, "GET", "/nope", "", ""); code != 404 {
		t.Fatalf("GET /nope: %d", code)
	}
	for _, tok := range []string{"", "wrong-token-wrong-token", aliceTok[:len(aliceTok)-1]} {
		if code, body := call(t, h, "GET", "/api/console/info", tok, ""); code != 401 || !strings.Contains(body, "Bearer") {
			t.Fatalf("info with token %q: %d %s", tok, code, body)
		}
	}
	// A token in the URL is refused (it would land in access logs), even
	// beside a good header: only the event stream takes one there.
	for _, tok := range []string{"", bobTok} {
		if code, body := call(t, h, "GET", "/api/console/info?token="+aliceTok, tok, ""); code != 401 || !strings.Contains(body, "Authorization: Bearer") {
			t.Fatalf("info with ?token (header %q): %d %s", tok, code, body)
		}
	}
	// The token says who you are: the page gets no picker.
	code, body := call(t, h, "GET", "/api/console/info", bobTok, "")
	if code != 200 || !strings.Contains(body, `"mode":"token"`) || !strings.Contains(body, `"user":"bob"`) ||
		!strings.Contains(body, `"users":[{"id":"bob","label":"approver"}]`) || !strings.Contains(body, `"channels":["ops","lab"]`) {
		t.Fatalf("info: %d %s", code, body)
	}

	for _, c := range []struct {
		body, want string
		code       int
	}{
		{`{"channel":"random","text":"status"}`, "not bound to talosbot", 400},
		{`{"channel":"ops","text":"  "}`, "text is empty", 400},
		{`{"user":"alice",`, "malformed JSON", 400},
		{`{"channel":"ops","text":"x","extra":1}`, "malformed JSON", 400},
		{`{"channel":"ops","text":"` + strings.Repeat("x", web.MaxBody) + `"}`, "larger than", 413},
	} {
		if code, body := call(t, h, "POST", "/api/console/commands", aliceTok, c.body); code != c.code || !strings.Contains(body, c.want) {
			t.Errorf("%.80s: %d %s, want %d %q", c.body, code, body, c.code, c.want)
		}
	}
	// No user in the body: the token's. Naming yourself is the same.
	if code, body := call(t, h, "POST", "/api/console/commands", aliceTok, `{"channel":"ops","text":"/talos health staging"}`); code != 202 {
		t.Fatalf("command: %d %s", code, body)
	}
	if code, body := call(t, h, "POST", "/api/console/commands", bobTok, `{"user":"bob","channel":"lab","text":"/talos status"}`); code != 202 {
		t.Fatalf("command: %d %s", code, body)
	}
	stub.waitFor(t, ctx, "commands", func() bool { return len(stub.commands) == 2 })
	var page struct {
		Messages []web.Message `json:"messages"`
		Cursor   string        `json:"cursor"`
	}
	_, body = call(t, h, "GET", "/api/console/messages?channel=ops", aliceTok, "")
	if err := json.Unmarshal([]byte(body), &page); err != nil || len(page.Messages) != 2 {
		t.Fatalf("messages: %v %s", err, body)
	}
	parent, reply := page.Messages[0], page.Messages[1]
	if parent.Title == "" || len(parent.Buttons) != 1 || reply.ThreadID != parent.ID || parent.Version != 1 {
		t.Fatalf("messages %+v", page.Messages)
	}
	if !strings.Contains(body, `"buttons":[{"action_id":"act-rerun","label":"Run again","style":"primary"}]`) || !strings.Contains(body, `"updated_at":"2026-01-02T03:04:05Z"`) {
		t.Fatalf("message JSON shape: %s", body)
	}
	if _, body := call(t, h, "GET", "/api/console/messages?channel=ops&after="+page.Cursor, aliceTok, ""); !strings.Contains(body, `"messages":[]`) {
		t.Fatalf("after cursor: %s", body)
	}
	if code, _ := call(t, h, "GET", "/api/console/messages?channel=ops&after=x", aliceTok, ""); code != 400 {
		t.Fatalf("bad cursor: %d", code)
	}
	if code, _ := call(t, h, "GET", "/api/console/messages?channel=elsewhere", aliceTok, ""); code != 400 {
		t.Fatalf("unbound channel: %d", code)
	}
	if code, body := call(t, h, "POST", "/api/console/actions", bobTok, `[]`); code != 400 || !strings.Contains(body, `"error"`) {
		t.Errorf("[]: %d %s", code, body)
	}
	if code, body := call(t, h, "POST", "/api/console/actions", bobTok, `{"message_id":"`+parent.ID+`","action_id":"act-rerun"}`); code != 202 {
		t.Fatalf("action: %d %s", code, body)
	}
	stub.waitFor(t, ctx, "action", func() bool { return len(stub.actions) == 1 })
	if want := (chat.Action{User: "bob", Channel: "ops", MessageRef: parent.ID, ActionID: "act-rerun"}); stub.actions[0] != want {
		t.Fatalf("action %+v", stub.actions[0])
	}
	if !slices.Equal(stub.commands, []chat.Command{{User: "alice", Channel: "ops", Text: "/talos health staging"}, {User: "bob", Channel: "lab", Text: "/talos status"}}) &&
		!slices.Equal(stub.commands, []chat.Command{{User: "bob", Channel: "lab", Text: "/talos status"}, {User: "alice", Channel: "ops", Text: "/talos health staging"}}) {
		t.Fatalf("commands %+v", stub.commands)
	}
	if len(stub.refusals) != 0 {
		t.Fatalf("refusals %+v", stub.refusals)
	}
}

// TestConsoleTokenNamingAnotherUserIsRefused: the body cannot choose who you
// are. Naming another user (known or not) is 403, handed to the bot as a
// refusal with the token's owner as the actor, and runs nothing.
func TestConsoleTokenNamingAnotherUserIsRefused(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c := newConsole(t, false)
	stub := newStub(c)
	h := c.Handler()
	parent, _ := c.Post(ctx, "ops", "", chat.Message{Text: "approve?", Buttons: []chat.Button{{ActionID: "act-approve", Label: "Approve"}}})

	for _, req := range []struct{ path, body, channel string }{
		{"/api/console/commands", `{"user":"bob","channel":"ops","text":"/talos upgrade talos v1.13.9 production"}`, "ops"},
		{"/api/console/commands", `{"user":"mallory","channel":"nowhere","text":"/talos status"}`, ""},
		{"/api/console/actions", `{"user":"bob","message_id":"` + parent + `","action_id":"act-approve"}`, "ops"},
	} {
		code, body := call(t, h, "POST", req.path, aliceTok, req.body)
		if code != 403 || !strings.Contains(body, "console token of alice cannot act as") {
			t.Fatalf("%s %s: %d %s, want 403", req.path, req.body, code, body)
		}
		// Synchronous: recorded before the answer.
		r := stub.refusals[len(stub.refusals)-1]
		if r.User != "alice" || r.What != "identity" || r.Channel != req.channel || r.Detail["claimed_user"] == "" || r.Detail["claimed_user"] == "alice" {
			t.Fatalf("refusal %+v", r)
		}
	}
	if len(stub.commands)+len(stub.actions) != 0 {
		t.Fatalf("a refused request ran: %+v %+v", stub.commands, stub.actions)
	}
}

// TestConsoleForgedActionAnswered: a forged or stale button is answered in
// the channel and audited through the bot, as on Slack and Discord, and the
// API still says 404.
func TestConsoleForgedActionAnswered(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c := newConsole(t, false)
	stub := newStub(c)
	h := c.Handler()
	parent, _ := c.Post(ctx, "lab", "", chat.Message{Text: "x", Buttons: []chat.Button{{ActionID: "act-real", Label: "Real"}}})
	for _, req := range []struct{ body, channel, want string }{
		{`{"message_id":"` + parent + `","action_id":"forged"}`, "lab", "has no button"},
		{`{"message_id":"m404","action_id":"act-real","channel":"ops"}`, "ops", "no message"},
		{`{"message_id":"m404","action_id":"act-real","channel":"nowhere"}`, "", "no message"},
	} {
		code, body := call(t, h, "POST", "/api/console/actions", bobTok, req.body)
		if code != 404 || !strings.Contains(body, req.want) {
			t.Fatalf("%s: %d %s", req.body, code, body)
		}
		r := stub.refusals[len(stub.refusals)-1]
		if r.User != "bob" || r.What != "action" || r.Channel != req.channel || !strings.Contains(r.Reason, "no longer valid") {
			t.Fatalf("refusal %+v, want bob in %q", r, req.channel)
		}
	}
	if len(stub.actions) != 0 {
		t.Fatalf("forged clicks ran: %+v", stub.actions)
	}
}

// TestConsoleOpenDemo: the demo's console has no tokens; the body names one
// of its users, chosen in the page's picker.
func TestConsoleOpenDemo(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c := newConsole(t, true)
	stub := newStub(c)
	h := c.Handler()
	if code, body := call(t, h, "GET", "/api/console/info", "", ""); code != 200 || !strings.Contains(body, `"mode":"open"`) || !strings.Contains(body, `{"id":"bob","label":"approver"}`) {
		t.Fatalf("info: %d %s", code, body)
	}
	for _, body := range []string{`{"user":"mallory","channel":"ops","text":"status"}`, `{"channel":"ops","text":"status"}`} {
		if code, out := call(t, h, "POST", "/api/console/commands", "", body); code != 400 || !strings.Contains(out, "unknown user") {
			t.Errorf("%s: %d %s", body, code, out)
		}
	}
	if code, body := call(t, h, "POST", "/api/console/commands", "", `{"user":"carol","channel":"ops","text":"/talos status"}`); code != 202 {
		t.Fatalf("command: %d %s", code, body)
	}
	stub.waitFor(t, ctx, "command", func() bool { return len(stub.commands) == 1 })
	if stub.commands[0].User != "carol" {
		t.Fatalf("command %+v", stub.commands[0])
	}
}

// TestDemoConsoleRefusesOtherSites: with no credential, a page on another
// site cannot drive the demo console through the user's browser: a foreign
// Origin is refused, and so is any Host but loopback (no DNS rebinding). The
// token console does not look at either (a reverse proxy may rewrite Host;
// other sites cannot read the token).
func TestDemoConsoleRefusesOtherSites(t *testing.T) {
	for _, open := range []bool{true, false} {
		c := newConsole(t, open)
		_ = newStub(c)
		do := func(host, origin string) int {
			r := httptest.NewRequest("POST", "/api/console/commands", strings.NewReader(`{"user":"alice","channel":"ops","text":"/talos status"}`))
			r.Host = host
			if origin != "" {
				r.Header.Set("Origin", origin)
			}
			if !open {
				r.Header.Set("Authorization", "Bearer "+aliceTok)
			}
			w := httptest.NewRecorder()
			c.Handler().ServeHTTP(w, r)
			return w.Code
		}
		refused := 403
		if !open {
			refused = 202
		}
		for _, c := range []struct {
			host, origin string
			want         int
		}{
			{"127.0.0.1:8080", "https://evil.example", refused},
			{"evil.example:8080", "", refused},
			{"evil.example:8080", "http://evil.example:8080", refused},
			{"127.0.0.1:8080", "http://127.0.0.1:8080", 202},
			{"localhost:8080", "http://localhost:8080", 202},
			{"[::1]:8080", "", 202}, // curl sends no Origin
		} {
			if code := do(c.host, c.origin); code != c.want {
				t.Errorf("open=%v Host %s Origin %q: %d, want %d", open, c.host, c.origin, code, c.want)
			}
		}
	}
}

func TestNewRefusesConsolesWithoutIdentity(t *testing.T) {
	for name, o := range map[string]web.Options{
		"nothing":        {Channels: []string{"ops"}},
		"users only":     {Channels: []string{"ops"}, Users: []string{"alice"}},
		"open, no users": {Open: true},
		"both":           {Open: true, Users: []string{"alice"}, Tokens: map[string]string{"alice": aliceTok}},
		"short token":    {Tokens: map[string]string{"alice": "short"}},
		"empty token":    {Tokens: map[string]string{"alice": ""}},
		"shared token":   {Tokens: map[string]string{"alice": aliceTok, "bob": aliceTok}},
		"blank user":     {Tokens: map[string]string{"": aliceTok}},
	} {
		if _, err := web.New(o); err == nil {
			t.Errorf("%s: accepted", name)
		} else if strings.Contains(err.Error(), aliceTok) {
			t.Errorf("%s: the error shows the token: %v", name, err)
		}
	}
}

func TestConsoleWithoutHandler(t *testing.T) {
	c := newConsole(t, true)
	if code, body := call(t, c.Handler(), "POST", "/api/console/commands", "", `{"user":"alice","channel":"ops","text":"status"}`); code != 503 || !strings.Contains(body, "not connected") {
		t.Fatalf("%d %s", code, body)
	}
}

// readEvent reads SSE lines until one data line arrives.
func readEvent(t *testing.T, r *bufio.Reader) (id string, m web.Message) {
	t.Helper()
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			t.Fatalf("stream: %v", err)
		}
		line = strings.TrimRight(line, "\n")
		switch {
		case strings.HasPrefix(line, "id: "):
			id = strings.TrimPrefix(line, "id: ")
		case strings.HasPrefix(line, "data: "):
			if err := json.Unmarshal([]byte(strings.TrimPrefix(line, "data: ")), &m); err != nil {
				t.Fatal(err)
			}
			return id, m
		}
	}
}

func TestConsoleStreamLiveAndResume(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c := newConsole(t, false)
	srv := httptest.NewServer(c.Handler())
	defer srv.Close()
	first, _ := c.Post(ctx, "ops", "", chat.Message{Text: "one"})
	_, _ = c.Post(ctx, "lab", "", chat.Message{Text: "other channel"})

	open := func(header string) (*bufio.Reader, func()) {
		req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL+"/api/console/stream?channel=ops&token="+aliceTok, nil)
		if header != "" {
			req.Header.Set("Last-Event-ID", header)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		if res.StatusCode != 200 || res.Header.Get("Content-Type") != "text/event-stream" {
			b, _ := io.ReadAll(res.Body)
			t.Fatalf("stream: %d %s", res.StatusCode, b)
		}
		return bufio.NewReader(res.Body), func() { _ = res.Body.Close() }
	}
	r, closeA := open("")
	id1, m := readEvent(t, r)
	if m.ID != first || m.Text != "one" {
		t.Fatalf("first event %+v", m)
	}
	if err := c.Edit(ctx, "ops", first, chat.Message{Text: "one, edited"}); err != nil {
		t.Fatal(err)
	}
	_, m = readEvent(t, r)
	if m.ID != first || m.Version != 2 || m.Text != "one, edited" {
		t.Fatalf("live edit %+v", m)
	}
	closeA()

	// A reconnect with Last-Event-ID gets only what changed after it.
	second, _ := c.Post(ctx, "ops", first, chat.Message{Text: "reply"})
	r, closeB := open(id1)
	defer closeB()
	_, m = readEvent(t, r)
	if m.ID != first || m.Version != 2 {
		t.Fatalf("resume: first event %+v, want the edit of %s", m, first)
	}
	_, m = readEvent(t, r)
	if m.ID != second || m.ThreadID != first {
		t.Fatalf("resume: second event %+v", m)
	}
}

// TestConsoleTokenOnlyInHeaders: a token in the URL of anything but the
// event stream is refused with the fix (send the header), and changes
// nothing; the header is accepted.
func TestConsoleTokenOnlyInHeaders(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c := newConsole(t, false)
	stub := newStub(c)
	h := c.Handler()
	cmd := `{"channel":"ops","text":"/talos health staging"}`
	for _, path := range []string{"/api/console/commands?token=" + aliceTok, "/api/console/actions?token=" + aliceTok} {
		if code, body := call(t, h, "POST", path, "", cmd); code != 401 || !strings.Contains(body, "in the URL is refused") || !strings.Contains(body, "Authorization: Bearer") {
			t.Fatalf("POST %s: %d %s, want 401 saying to use the header", path, code, body)
		}
	}
	for _, path := range []string{"/api/console/messages?channel=ops&token=" + aliceTok, "/?token=" + aliceTok, "/console?token=" + aliceTok} {
		if code, body := call(t, h, "GET", path, "", ""); code != 401 || !strings.Contains(body, "in the URL is refused") {
			t.Fatalf("GET %s: %d %s, want 401", path, code, body)
		}
	}
	stub.mu.Lock()
	n := len(stub.commands) + len(stub.actions)
	stub.mu.Unlock()
	if n != 0 {
		t.Fatalf("a request with its token in the URL ran %d commands or clicks", n)
	}
	if code, body := call(t, h, "POST", "/api/console/commands", aliceTok, cmd); code != 202 {
		t.Fatalf("POST with the header: %d %s", code, body)
	}
	stub.waitFor(t, ctx, "the command", func() bool { return len(stub.commands) == 1 && stub.commands[0].User == "alice" })
}

// TestConsoleTranscriptNeedsRole: with CanRead, a user reads only the
// channels it allows; another is 403 on messages and stream and missing
// from their channel list.
func TestConsoleTranscriptNeedsRole(t *testing.T) {
	c, err := web.New(web.Options{Channels: []string{"ops", "lab"}, Tokens: map[string]string{"alice": aliceTok, "bob": bobTok},
		CanRead: func(user, channel string) bool { return user == "alice" || channel == "lab" }})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Post(context.Background(), "ops", "", chat.Message{Text: "production secrets of ops"}); err != nil {
		t.Fatal(err)
	}
	h := c.Handler()
	for _, path := range []string{"/api/console/messages?channel=ops", "/api/console/stream?channel=ops"} {
		code, body := call(t, h, "GET", path, bobTok, "")
		if code != 403 || !strings.Contains(body, "bob has no role on a cluster bound to channel") || strings.Contains(body, "secrets") {
			t.Fatalf("bob GET %s: %d %s, want 403", path, code, body)
		}
	}
	if code, body := call(t, h, "GET", "/api/console/info", bobTok, ""); code != 200 || !strings.Contains(body, `"channels":["lab"]`) {
		t.Fatalf("bob's info: %d %s, want only lab", code, body)
	}
	if code, body := call(t, h, "GET", "/api/console/messages?channel=ops", aliceTok, ""); code != 200 || !strings.Contains(body, "secrets") {
		t.Fatalf("alice reads ops: %d %s", code, body)
	}
	if code, body := call(t, h, "GET", "/api/console/info", aliceTok, ""); code != 200 || !strings.Contains(body, `"channels":["ops","lab"]`) {
		t.Fatalf("alice's info: %d %s", code, body)
	}
}

// TestConsolePageRefusesFraming: no other site may frame the page (and
// click its buttons through it).
func TestConsolePageRefusesFraming(t *testing.T) {
	r := httptest.NewRequest("GET", "/", nil)
	w := httptest.NewRecorder()
	newConsole(t, false).Handler().ServeHTTP(w, r)
	csp := w.Header().Get("Content-Security-Policy")
	if w.Code != 200 || !strings.Contains(csp, "frame-ancestors 'none'") || !strings.Contains(csp, "default-src 'self'") || w.Header().Get("X-Frame-Options") != "DENY" {
		t.Fatalf("page: %d, CSP %q, X-Frame-Options %q", w.Code, csp, w.Header().Get("X-Frame-Options"))
	}
}

// TestConsoleStreamOutlivesServerTimeouts: the server bounds request reads
// and handlers (ReadTimeout, WriteTimeout); the event stream lifts both
// for itself, so it stays open across many times those timeouts (counted
// in keep-alives, not measured) and still delivers.
func TestConsoleStreamOutlivesServerTimeouts(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	const timeout = 50 * time.Millisecond
	c, err := web.New(web.Options{Channels: []string{"ops"}, Tokens: map[string]string{"alice": aliceTok}, KeepAlive: timeout / 5})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(c.Handler())
	srv.Config.ReadTimeout, srv.Config.WriteTimeout = timeout, timeout
	srv.Start()
	defer srv.Close()
	req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL+"/api/console/stream?channel=ops&token="+aliceTok, nil)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if res.StatusCode != 200 {
		t.Fatalf("stream: %d", res.StatusCode)
	}
	r := bufio.NewReader(res.Body)
	// 100 keep-alives at timeout/5 apart span 20 timeouts.
	for n := 0; n < 100; {
		line, err := r.ReadString('\n')
		if err != nil {
			t.Fatalf("the stream ended after %d keep-alives: %v", n, err)
		}
		if strings.HasPrefix(line, ": keep-alive") {
			n++
		}
	}
	if _, err := c.Post(ctx, "ops", "", chat.Message{Text: "still live"}); err != nil {
		t.Fatal(err)
	}
	if _, m := readEvent(t, r); m.Text != "still live" {
		t.Fatalf("event after the timeouts: %+v", m)
	}
}
