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

func newConsole(token string) *web.Console {
	return web.New(web.Options{Channels: []string{"ops", "lab"}, Users: []string{"alice", "bob", "carol"},
		UserLabels: map[string]string{"alice": "operator", "bob": "approver", "carol": "viewer"}, Token: token,
		Clock: func() time.Time { return time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC) }})
}

func call(t *testing.T, h http.Handler, method, path, token, body string) (int, string) {
	t.Helper()
	r := httptest.NewRequest(method, path, strings.NewReader(body))
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
	c := newConsole("tok")
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
	if code, body := call(t, h, "GET", "/api/console/info", "", ""); code != 401 || !strings.Contains(body, "Bearer") {
		t.Fatalf("info without token: %d %s", code, body)
	}
	if code, _ := call(t, h, "GET", "/api/console/info?token=tok", "", ""); code != 200 {
		t.Fatalf("info with ?token: %d", code)
	}
	code, body := call(t, h, "GET", "/api/console/info", "tok", "")
	if code != 200 || !strings.Contains(body, `{"id":"bob","label":"approver"}`) || !strings.Contains(body, `"channels":["ops","lab"]`) {
		t.Fatalf("info: %d %s", code, body)
	}

	for _, c := range []struct{ body, want string }{
		{`{"user":"mallory","channel":"ops","text":"status"}`, `unknown user \"mallory\"`},
		{`{"user":"alice","channel":"random","text":"status"}`, "not bound to talosbot"},
		{`{"user":"alice","channel":"ops","text":"  "}`, "text is empty"},
		{`{"user":"alice",`, "malformed JSON"},
		{`{"user":"alice","channel":"ops","text":"x","extra":1}`, "malformed JSON"},
	} {
		if code, body := call(t, h, "POST", "/api/console/commands", "tok", c.body); code != 400 || !strings.Contains(body, c.want) {
			t.Errorf("%s: %d %s, want 400 %q", c.body, code, body, c.want)
		}
	}
	if code, body := call(t, h, "POST", "/api/console/commands", "tok", `{"user":"alice","channel":"ops","text":"/talos health staging"}`); code != 202 {
		t.Fatalf("command: %d %s", code, body)
	}
	stub.waitFor(t, ctx, "command", func() bool { return len(stub.commands) == 1 })
	var page struct {
		Messages []web.Message `json:"messages"`
		Cursor   string        `json:"cursor"`
	}
	_, body = call(t, h, "GET", "/api/console/messages?channel=ops", "tok", "")
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
	if _, body := call(t, h, "GET", "/api/console/messages?channel=ops&after="+page.Cursor, "tok", ""); !strings.Contains(body, `"messages":[]`) {
		t.Fatalf("after cursor: %s", body)
	}
	if code, _ := call(t, h, "GET", "/api/console/messages?channel=ops&after=x", "tok", ""); code != 400 {
		t.Fatalf("bad cursor: %d", code)
	}
	if code, _ := call(t, h, "GET", "/api/console/messages?channel=elsewhere", "tok", ""); code != 400 {
		t.Fatalf("unbound channel: %d", code)
	}

	for _, c := range []struct {
		body string
		code int
	}{
		{`{"user":"bob","message_id":"m404","action_id":"act-rerun"}`, 404},
		{`{"user":"bob","message_id":"` + parent.ID + `","action_id":"forged"}`, 404},
		{`{"user":"eve","message_id":"` + parent.ID + `","action_id":"act-rerun"}`, 400},
		{`[]`, 400},
	} {
		if code, body := call(t, h, "POST", "/api/console/actions", "tok", c.body); code != c.code || !strings.Contains(body, `"error"`) {
			t.Errorf("%s: %d %s, want %d", c.body, code, body, c.code)
		}
	}
	if code, body := call(t, h, "POST", "/api/console/actions", "tok", `{"user":"bob","message_id":"`+parent.ID+`","action_id":"act-rerun"}`); code != 202 {
		t.Fatalf("action: %d %s", code, body)
	}
	stub.waitFor(t, ctx, "action", func() bool { return len(stub.actions) == 1 })
	if want := (chat.Action{User: "bob", Channel: "ops", MessageRef: parent.ID, ActionID: "act-rerun"}); stub.actions[0] != want {
		t.Fatalf("action %+v", stub.actions[0])
	}
	if !slices.Equal(stub.commands, []chat.Command{{User: "alice", Channel: "ops", Text: "/talos health staging"}}) {
		t.Fatalf("commands %+v", stub.commands)
	}
}

func TestConsoleWithoutHandler(t *testing.T) {
	c := newConsole("")
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
	c := newConsole("tok")
	srv := httptest.NewServer(c.Handler())
	defer srv.Close()
	first, _ := c.Post(ctx, "ops", "", chat.Message{Text: "one"})
	_, _ = c.Post(ctx, "lab", "", chat.Message{Text: "other channel"})

	open := func(header string) (*bufio.Reader, func()) {
		req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL+"/api/console/stream?channel=ops&token=tok", nil)
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
