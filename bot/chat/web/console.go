// Package web is the local web console: a chat adapter whose "platform" is an
// in-memory channel log served over a JSON API (and SSE for live updates).
// It is the embedded default for the demo and for scripts and tests; in serve
// it is off unless enabled, and then every request needs the bearer token.
package web

import (
	"context"
	"crypto/subtle"
	_ "embed"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/talosbot/talosbot/bot/chat"
)

// Message is a console message as the API returns it.
type Message struct {
	ID        string        `json:"id"`
	Channel   string        `json:"channel"`
	ThreadID  string        `json:"thread_id,omitempty"`
	Title     string        `json:"title,omitempty"`
	Text      string        `json:"text"`
	Fields    []chat.Field  `json:"fields"`
	Buttons   []chat.Button `json:"buttons"`
	Version   int           `json:"version"`
	UpdatedAt time.Time     `json:"updated_at"`
	seq       uint64
}

// Options configure a Console.
type Options struct {
	// Channels the console serves; commands elsewhere get 400.
	Channels []string
	// Token, when set, is required as "Authorization: Bearer TOKEN".
	Token string
	// Users, when set, restricts who may act (the demo's alice, bob, carol)
	// and fills the page's user switcher.
	Users []string
	// UserLabels optionally describe users in the switcher ("operator").
	UserLabels map[string]string
	Clock      func() time.Time
	// KeepAlive is the interval of SSE comment lines that keep idle streams
	// open through proxies; default 20s.
	KeepAlive time.Duration
}

// Console is the web chat adapter and its HTTP API.
type Console struct {
	o       Options
	handler chat.Handler

	mu      sync.Mutex
	seq     uint64
	nextID  int
	msgs    map[string]*Message // id → message
	order   []*Message          // by creation
	changed chan struct{}
}

// New returns a console. Call SetHandler before serving.
func New(o Options) *Console {
	if o.Clock == nil {
		o.Clock = time.Now
	}
	if o.KeepAlive <= 0 {
		o.KeepAlive = 20 * time.Second
	}
	return &Console{o: o, msgs: map[string]*Message{}, changed: make(chan struct{})}
}

// SetHandler connects the console to the bot.
func (c *Console) SetHandler(h chat.Handler) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.handler = h
}

func (c *Console) getHandler() chat.Handler {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.handler
}

var _ chat.Adapter = (*Console)(nil)

// Post stores a new message.
func (c *Console) Post(_ context.Context, channel, threadRef string, m chat.Message) (string, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.nextID++
	c.seq++
	msg := &Message{ID: "m" + strconv.Itoa(c.nextID), Channel: channel, ThreadID: threadRef, Title: m.Title, Text: m.Text,
		Fields: nonNil(m.Fields), Buttons: nonNil(m.Buttons), Version: 1, UpdatedAt: c.o.Clock().UTC(), seq: c.seq}
	c.msgs[msg.ID] = msg
	c.order = append(c.order, msg)
	c.broadcastLocked()
	return msg.ID, nil
}

// Edit replaces a message's content and bumps its version.
func (c *Console) Edit(_ context.Context, _ string, ref string, m chat.Message) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	msg, ok := c.msgs[ref]
	if !ok {
		return fmt.Errorf("console: no message %q", ref)
	}
	c.seq++
	msg.Title, msg.Text, msg.Fields, msg.Buttons = m.Title, m.Text, nonNil(m.Fields), nonNil(m.Buttons)
	msg.Version++
	msg.UpdatedAt = c.o.Clock().UTC()
	msg.seq = c.seq
	c.broadcastLocked()
	return nil
}

func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

func (c *Console) broadcastLocked() {
	close(c.changed)
	c.changed = make(chan struct{})
}

// Messages returns the channel's messages changed after cursor, oldest change
// first, and the new cursor.
func (c *Console) Messages(channel string, after uint64) ([]Message, uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []Message
	for _, m := range c.order {
		if m.Channel == channel && m.seq > after {
			out = append(out, *m)
		}
	}
	return out, c.seq
}

//go:embed console.html
var page []byte

// Handler returns the console page and its HTTP API:
//
//	GET  / and /console → the page (static; it holds no data, so no token)
//	POST /api/console/commands {"user","channel","text"} → 202 | 400 {"error"}
//	POST /api/console/actions  {"user","message_id","action_id"} → 202 | 4xx {"error"}
//	GET  /api/console/messages?channel=C[&after=CURSOR] → {"messages":[…],"cursor"}
//	GET  /api/console/stream?channel=C[&after=CURSOR] → text/event-stream
//	GET  /api/console/info → {"users":[{"id","label"}],"channels":[…]}
//
// With Options.Token set, every /api/ request needs "Authorization: Bearer
// TOKEN" (or ?token=TOKEN, which EventSource needs since it cannot set headers).
func (c *Console) Handler() http.Handler {
	api := http.NewServeMux()
	api.HandleFunc("POST /api/console/commands", c.postCommand)
	api.HandleFunc("POST /api/console/actions", c.postAction)
	api.HandleFunc("GET /api/console/messages", c.getMessages)
	api.HandleFunc("GET /api/console/stream", c.stream)
	api.HandleFunc("GET /api/console/info", c.getInfo)
	mux := http.NewServeMux()
	mux.Handle("/api/", c.auth(api))
	mux.HandleFunc("GET /{$}", servePage)
	mux.HandleFunc("GET /console", servePage)
	return mux
}

func servePage(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	// The page only talks to its own origin; a token in its URL never leaks
	// through the Referer header.
	w.Header().Set("Content-Security-Policy", "default-src 'self'; script-src 'unsafe-inline'; style-src 'unsafe-inline'")
	w.Header().Set("Referrer-Policy", "no-referrer")
	_, _ = w.Write(page)
}

func (c *Console) getInfo(w http.ResponseWriter, _ *http.Request) {
	type user struct {
		ID    string `json:"id"`
		Label string `json:"label,omitempty"`
	}
	users := []user{}
	for _, u := range c.o.Users {
		users = append(users, user{ID: u, Label: c.o.UserLabels[u]})
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{"users": users, "channels": nonNil(c.o.Channels)})
}

func (c *Console) auth(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if c.o.Token != "" {
			got := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
			if got == "" {
				got = r.URL.Query().Get("token") // EventSource cannot set headers
			}
			if subtle.ConstantTimeCompare([]byte(got), []byte(c.o.Token)) != 1 {
				writeErr(w, http.StatusUnauthorized, "missing or wrong console token (Authorization: Bearer TOKEN)")
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}

func writeErr(w http.ResponseWriter, code int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(map[string]string{"error": msg})
}

func (c *Console) knownUser(u string) bool {
	if len(c.o.Users) == 0 {
		return u != ""
	}
	for _, k := range c.o.Users {
		if k == u {
			return true
		}
	}
	return false
}

func (c *Console) knownChannel(ch string) bool {
	for _, k := range c.o.Channels {
		if k == ch {
			return true
		}
	}
	return false
}

func decode(r *http.Request, v any) error {
	dec := json.NewDecoder(http.MaxBytesReader(nil, r.Body, 64<<10))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("malformed JSON body: %w", err)
	}
	return nil
}

func (c *Console) postCommand(w http.ResponseWriter, r *http.Request) {
	var in struct{ User, Channel, Text string }
	if err := decode(r, &in); err != nil {
		writeErr(w, http.StatusBadRequest, err.Error())
		return
	}
	switch {
	case !c.knownUser(in.User):
		writeErr(w, http.StatusBadRequest, fmt.Sprintf("unknown user %q; users: %s", in.User, strings.Join(c.o.Users, ", ")))
		return
	case !c.knownChannel(in.Channel):
		writeErr(w, http.StatusBadRequest, fmt.Sprintf("channel %q is not bound to talosbot; channels: %s", in.Channel, strings.Join(c.o.Channels, ", ")))
		return
	case strings.TrimSpace(in.Text) == "":
		writeErr(w, http.StatusBadRequest, "text is empty; try /talos help")
		return
	}
	h := c.getHandler()
	if h == nil {
		writeErr(w, http.StatusServiceUnavailable, "the console is not connected to the bot yet; retry in a moment")
		return
	}
	// Acknowledge first, work after: the handler runs detached from the request.
	cmd := chat.Command{User: in.User, Channel: in.Channel, Text: in.Text}
	go func() { _ = h.HandleCommand(context.WithoutCancel(r.Context()), cmd) }()
	w.WriteHeader(http.StatusAccepted)
}

func (c *Console) postAction(w http.ResponseWriter, r *http.Request) {
	var in struct {
		User      string `json:"user"`
		MessageID string `json:"message_id"`
		ActionID  string `json:"action_id"`
	}
	if err := decode(r, &in); err != nil {
		writeErr(w, http.StatusBadRequest, err.Error())
		return
	}
	if !c.knownUser(in.User) {
		writeErr(w, http.StatusBadRequest, fmt.Sprintf("unknown user %q", in.User))
		return
	}
	c.mu.Lock()
	msg, ok := c.msgs[in.MessageID]
	found := false
	if ok {
		for _, b := range msg.Buttons {
			found = found || b.ActionID == in.ActionID
		}
	}
	var channel string
	if ok {
		channel = msg.Channel
	}
	c.mu.Unlock()
	if !ok {
		writeErr(w, http.StatusNotFound, fmt.Sprintf("no message %q", in.MessageID))
		return
	}
	if !found {
		writeErr(w, http.StatusNotFound, fmt.Sprintf("message %s has no button %q (it may have been replaced; reload)", in.MessageID, in.ActionID))
		return
	}
	h := c.getHandler()
	if h == nil {
		writeErr(w, http.StatusServiceUnavailable, "the console is not connected to the bot yet; retry in a moment")
		return
	}
	act := chat.Action{User: in.User, Channel: channel, MessageRef: in.MessageID, ActionID: in.ActionID}
	go func() { _ = h.HandleAction(context.WithoutCancel(r.Context()), act) }()
	w.WriteHeader(http.StatusAccepted)
}

func (c *Console) getMessages(w http.ResponseWriter, r *http.Request) {
	ch := r.URL.Query().Get("channel")
	if !c.knownChannel(ch) {
		writeErr(w, http.StatusBadRequest, fmt.Sprintf("channel %q is not bound to talosbot", ch))
		return
	}
	var after uint64
	if a := r.URL.Query().Get("after"); a != "" {
		v, err := strconv.ParseUint(a, 10, 64)
		if err != nil {
			writeErr(w, http.StatusBadRequest, fmt.Sprintf("after=%q is not a cursor", a))
			return
		}
		after = v
	}
	msgs, cur := c.Messages(ch, after)
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{"messages": nonNil(msgs), "cursor": strconv.FormatUint(cur, 10)})
}

func (c *Console) stream(w http.ResponseWriter, r *http.Request) {
	ch := r.URL.Query().Get("channel")
	if !c.knownChannel(ch) {
		writeErr(w, http.StatusBadRequest, fmt.Sprintf("channel %q is not bound to talosbot", ch))
		return
	}
	fl, ok := w.(http.Flusher)
	if !ok {
		writeErr(w, http.StatusInternalServerError, "streaming unsupported")
		return
	}
	var cursor uint64
	// A reconnecting EventSource sends the last id it saw; resume after it.
	for _, v := range []string{r.Header.Get("Last-Event-ID"), r.URL.Query().Get("after")} {
		if v == "" {
			continue
		}
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			writeErr(w, http.StatusBadRequest, fmt.Sprintf("cursor %q is not a number", v))
			return
		}
		cursor = n
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.Header().Set("X-Accel-Buffering", "no")
	keepAlive := time.NewTicker(c.o.KeepAlive)
	defer keepAlive.Stop()
	for {
		c.mu.Lock()
		wait := c.changed
		c.mu.Unlock()
		msgs, cur := c.Messages(ch, cursor)
		for _, m := range msgs {
			b, _ := json.Marshal(m)
			if _, err := fmt.Fprintf(w, "id: %d\nevent: message\ndata: %s\n\n", m.seq, b); err != nil {
				return
			}
		}
		cursor = cur
		fl.Flush()
		select {
		case <-wait:
		case <-keepAlive.C:
			if _, err := fmt.Fprint(w, ": keep-alive\n\n"); err != nil {
				return
			}
		case <-r.Context().Done():
			return
		}
	}
}
