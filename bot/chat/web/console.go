// Package web is the local web console: a chat adapter whose "platform" is an
// in-memory channel log served over a JSON API (and SSE for live updates).
// It is the embedded default for the demo and for scripts and tests; in serve
// it is off unless enabled, and then every API request needs a user's own
// bearer token, which alone says who the user is.
package web

import (
	"context"
	"crypto/subtle"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/talosbot/talosbot/bot/chat"
)

// Message is a console message as the API returns it.
type Message struct {
	ID       string `json:"id"`
	Channel  string `json:"channel"`
	ThreadID string `json:"thread_id,omitempty"`
	Title    string `json:"title,omitempty"`
	Text     string `json:"text"`
	// Mentions are the names the message calls (chat.Message.Mentions),
	// shown highlighted at the end of HTML.
	Mentions []string `json:"mentions,omitempty"`
	// HTML is Text rendered for the page (RenderHTML: escaped, then marked up).
	HTML      string        `json:"html"`
	Fields    []Field       `json:"fields"`
	Buttons   []chat.Button `json:"buttons"`
	Version   int           `json:"version"`
	UpdatedAt time.Time     `json:"updated_at"`
	seq       uint64
}

// Field is a message field; HTML is its value rendered for the page.
type Field struct {
	chat.Field
	HTML string `json:"html"`
}

func fields(fs []chat.Field) []Field {
	out := make([]Field, 0, len(fs))
	for _, f := range fs {
		out = append(out, Field{Field: f, HTML: RenderHTML(f.Value)})
	}
	return out
}

// Options configure a Console.
type Options struct {
	// Channels the console serves; commands elsewhere get 400.
	Channels []string
	// Tokens gives each console user their own token (user → token), sent
	// as "Authorization: Bearer TOKEN". The token that authenticates a
	// request says who sent it; a body naming another user is refused (403)
	// and audited. This is how serve runs the console.
	Tokens map[string]string
	// Open runs the console without credentials: the request body names the
	// user, who must be one of Users, and the page shows a user picker. Only
	// for the demo, which listens on loopback. Exactly one of Tokens and
	// Open must be set.
	Open bool
	// Users are the open console's users (the demo's alice, bob, carol).
	Users []string
	// UserLabels optionally describe users in the picker ("operator").
	UserLabels map[string]string
	Clock      func() time.Time
	// KeepAlive is the interval of SSE comment lines that keep idle streams
	// open through proxies; default 20s.
	KeepAlive time.Duration
	// CanRead says whether a token user may read a channel's transcript
	// (serve: a role on a cluster bound to it). A channel the user may not
	// read is answered 403 and left out of their channel list. Nil lets
	// every user read every channel (the open demo, whose reads name no
	// user).
	CanRead func(user, channel string) bool
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

// MinTokenLen is the shortest console token accepted: the one floor of every
// talosbot bearer token (config.MinTokenLen, which config check enforces).
const MinTokenLen = 32

// New returns a console. Call SetHandler before serving. It refuses options
// that would let a request choose its own identity: no tokens and not
// explicitly open, a short or empty token, or one token shared by two users.
func New(o Options) (*Console, error) {
	if o.Clock == nil {
		o.Clock = time.Now
	}
	if o.KeepAlive <= 0 {
		o.KeepAlive = 20 * time.Second
	}
	switch {
	case o.Open && len(o.Tokens) > 0:
		return nil, errors.New("web console: either per-user tokens or the open demo console, not both")
	case o.Open && len(o.Users) == 0:
		return nil, errors.New("web console: the open (demo) console needs its list of users")
	case !o.Open && len(o.Tokens) == 0:
		return nil, errors.New("web console: no users; give each user their own token (chat.web.users: [{name: alice, token: env:ALICE_CONSOLE_TOKEN}])")
	}
	owner := map[string]string{}
	for user, tok := range o.Tokens {
		switch {
		case user == "" || strings.ContainsAny(user, " \t\n"):
			return nil, fmt.Errorf("web console: user name %q is empty or has spaces", user)
		case len(tok) < MinTokenLen:
			return nil, fmt.Errorf("web console: the token of %s is shorter than %d characters; generate one with `openssl rand -hex 24`", user, MinTokenLen)
		case owner[tok] != "":
			return nil, fmt.Errorf("web console: %s and %s have the same token, so it cannot say who is asking; give each user their own", min(owner[tok], user), max(owner[tok], user))
		}
		owner[tok] = user
	}
	return &Console{o: o, msgs: map[string]*Message{}, changed: make(chan struct{})}, nil
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

// withTable is the message's text with its table as a pipe table after it
// (RenderHTML draws it as an HTML table).
func withTable(m chat.Message) string {
	if t := m.Table.Markdown(); t != "" {
		return strings.TrimSpace(m.Text + "\n\n" + t)
	}
	return m.Text
}

// Post stores a new message.
func (c *Console) Post(_ context.Context, channel, threadRef string, m chat.Message) (string, error) {
	m.Text = withTable(m)
	body, fs := RenderHTML(m.Text)+mentionsHTML(m.Mentions), fields(m.Fields) // outside the lock
	c.mu.Lock()
	defer c.mu.Unlock()
	c.nextID++
	c.seq++
	msg := &Message{ID: "m" + strconv.Itoa(c.nextID), Channel: channel, ThreadID: threadRef, Title: m.Title, Text: m.Text, Mentions: m.Mentions,
		HTML: body, Fields: fs, Buttons: nonNil(m.Buttons), Version: 1, UpdatedAt: c.o.Clock().UTC(), seq: c.seq}
	c.msgs[msg.ID] = msg
	c.order = append(c.order, msg)
	c.broadcastLocked()
	return msg.ID, nil
}

// Edit replaces a message's content and bumps its version.
func (c *Console) Edit(_ context.Context, _ string, ref string, m chat.Message) error {
	m.Text = withTable(m)
	body, fs := RenderHTML(m.Text)+mentionsHTML(m.Mentions), fields(m.Fields)
	c.mu.Lock()
	defer c.mu.Unlock()
	msg, ok := c.msgs[ref]
	if !ok {
		return fmt.Errorf("console: no message %q", ref)
	}
	c.seq++
	msg.Title, msg.Text, msg.HTML, msg.Fields, msg.Buttons, msg.Mentions = m.Title, m.Text, body, fs, nonNil(m.Buttons), m.Mentions
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
//	POST /api/console/commands {"user"?,"channel","text"} → 202 | 400 | 403 | 413 {"error"}
//	POST /api/console/actions  {"user"?,"message_id","action_id","channel"?} → 202 | 4xx {"error"}
//	GET  /api/console/messages?channel=C[&after=CURSOR] → {"messages":[…],"cursor"}
//	GET  /api/console/stream?channel=C[&after=CURSOR] → text/event-stream
//	GET  /api/console/info → {"mode","user"?,"users":[{"id","label"}],"channels":[…]}
//
// With Options.Tokens, every /api/ request needs "Authorization: Bearer
// TOKEN", and the token names the user: "user" in a body may be omitted,
// and naming anyone else is refused (403), audited and answered in the
// channel. Only the event stream also takes ?token=TOKEN (EventSource
// cannot set headers); a token in the URL of any other request is refused
// (401), since URLs land in access logs and browser history. With
// Options.CanRead, a channel the user may not read is refused (403).
func (c *Console) Handler() http.Handler {
	api := http.NewServeMux()
	api.HandleFunc("POST /api/console/commands", c.postCommand)
	api.HandleFunc("POST /api/console/actions", c.postAction)
	api.HandleFunc("GET /api/console/messages", c.getMessages)
	api.HandleFunc("GET "+StreamPath, c.stream)
	api.HandleFunc("GET /api/console/info", c.getInfo)
	mux := http.NewServeMux()
	mux.Handle("/api/", c.auth(api))
	mux.HandleFunc("GET /{$}", servePage)
	mux.HandleFunc("GET /console", servePage)
	return mux
}

// StreamPath is the event stream, the one request that may carry its token
// in the URL (?token=), because EventSource cannot set headers.
const StreamPath = "/api/console/stream"

// URLTokenRefusal is the answer (401) to a token in the URL of any request
// but the event stream.
const URLTokenRefusal = "a token in the URL is refused: URLs land in access logs and browser history. Send it as a header, Authorization: Bearer TOKEN (to sign in to the console page, open /#token=TOKEN or paste it in the sign-in box)"

// URLToken reports whether r carries a token in its URL where only a header
// may carry one (anywhere but StreamPath).
func URLToken(r *http.Request) bool {
	return r.URL.Path != StreamPath && r.URL.Query().Has("token")
}

func servePage(w http.ResponseWriter, r *http.Request) {
	if URLToken(r) {
		// The request has already put the token in the server's and the
		// browser's history; serving the page would teach users to do it.
		writeErr(w, http.StatusUnauthorized, URLTokenRefusal)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	// The page only talks to its own origin; a token in its URL never leaks
	// through the Referer header. No other site may frame it (clickjacking
	// its Approve buttons): frame-ancestors for browsers that read CSP,
	// X-Frame-Options for those that do not.
	w.Header().Set("Content-Security-Policy", "default-src 'self'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; frame-ancestors 'none'")
	w.Header().Set("X-Frame-Options", "DENY")
	w.Header().Set("Referrer-Policy", "no-referrer")
	_, _ = w.Write(page)
}

// canRead reports whether the request's user may read channel: always in
// the open console and without Options.CanRead.
func (c *Console) canRead(r *http.Request, channel string) bool {
	me, ok := r.Context().Value(identityKey{}).(string)
	return !ok || c.o.CanRead == nil || c.o.CanRead(me, channel)
}

// readable is the channels the request's user may read.
func (c *Console) readable(r *http.Request) []string {
	out := []string{}
	for _, ch := range c.o.Channels {
		if c.canRead(r, ch) {
			out = append(out, ch)
		}
	}
	return out
}

// checkChannel answers 400 for a channel the console does not serve and 403
// for one the user may not read, and reports whether the read may go on.
func (c *Console) checkChannel(w http.ResponseWriter, r *http.Request, ch string) bool {
	switch {
	case !c.knownChannel(ch):
		writeErr(w, http.StatusBadRequest, fmt.Sprintf("channel %q is not bound to talosbot", ch))
		return false
	case !c.canRead(r, ch):
		me, _ := r.Context().Value(identityKey{}).(string)
		writeErr(w, http.StatusForbidden, fmt.Sprintf("%s has no role on a cluster bound to channel %q, so may not read it; add the user to that cluster's environment in policy (operators, approvers or viewers)", me, ch))
		return false
	}
	return true
}

func (c *Console) getInfo(w http.ResponseWriter, r *http.Request) {
	type user struct {
		ID    string `json:"id"`
		Label string `json:"label,omitempty"`
	}
	// Only the channels this user may read: the list itself says which
	// clusters' channels exist.
	out := map[string]any{"channels": c.readable(r)}
	users := []user{}
	if me, ok := r.Context().Value(identityKey{}).(string); ok {
		// A token user sees only themself: the page shows no picker.
		out["mode"], out["user"] = "token", me
		users = append(users, user{ID: me, Label: c.o.UserLabels[me]})
	} else {
		out["mode"] = "open"
		for _, u := range c.o.Users {
			users = append(users, user{ID: u, Label: c.o.UserLabels[u]})
		}
	}
	out["users"] = users
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(out)
}

// identityKey carries the authenticated user in a request's context.
type identityKey struct{}

// auth authenticates /api/ requests. With tokens, the matching token's owner
// is the request's identity; every token is compared (in constant time), so
// the time taken does not say which user's token came close.
func (c *Console) auth(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if c.o.Open {
			// With no credential, a page on another site could make the
			// user's browser drive the demo (cross-site POSTs need no
			// preflight; a rebound DNS name makes them same-origin). Browsers
			// say where a request comes from: refuse other origins and any
			// Host but loopback. (With tokens this cannot happen: other sites
			// cannot read the token, and a proxy may rewrite Host.)
			if o := r.Header.Get("Origin"); o != "" {
				if u, err := url.Parse(o); err != nil || u.Host != r.Host {
					writeErr(w, http.StatusForbidden, "cross-origin request refused: open the console from its own address")
					return
				}
			}
			if !loopbackHost(r.Host) {
				writeErr(w, http.StatusForbidden, "the open demo console answers on loopback addresses only (127.0.0.1, ::1, localhost)")
				return
			}
			next.ServeHTTP(w, r)
			return
		}
		if URLToken(r) {
			writeErr(w, http.StatusUnauthorized, URLTokenRefusal)
			return
		}
		got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if !ok || got == "" {
			got = r.URL.Query().Get("token") // the stream only: EventSource cannot set headers
		}
		var who string
		for user, tok := range c.o.Tokens {
			if subtle.ConstantTimeCompare([]byte(got), []byte(tok)) == 1 {
				who = user
			}
		}
		if got == "" || who == "" {
			writeErr(w, http.StatusUnauthorized, "missing or wrong console token (Authorization: Bearer YOUR_TOKEN; each user has their own, from chat.web.users)")
			return
		}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), identityKey{}, who)))
	})
}

// loopbackHost reports whether a Host header names a loopback address.
func loopbackHost(host string) bool {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.Trim(host, "[]")
	if host == "localhost" {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.IsLoopback()
}

// identify returns who sent r: the token's owner, or in the open console the
// user the body names. A token holder naming someone else is refused (403),
// audited through the handler and answered in channel (when it is bound).
func (c *Console) identify(w http.ResponseWriter, r *http.Request, claimed, channel string) (string, bool) {
	me, ok := r.Context().Value(identityKey{}).(string)
	if !ok {
		if !c.knownUser(claimed) {
			writeErr(w, http.StatusBadRequest, fmt.Sprintf("unknown user %q; users: %s", claimed, strings.Join(c.o.Users, ", ")))
			return "", false
		}
		return claimed, true
	}
	if claimed == "" || claimed == me {
		return me, true
	}
	reason := fmt.Sprintf("the console token of %s cannot act as %q; each user signs in with their own token", me, clip(claimed))
	if !c.knownChannel(channel) {
		channel = ""
	}
	if h := c.getHandler(); h != nil {
		// Synchronous: the audit record exists when the 403 is sent.
		_ = h.HandleRefusal(context.WithoutCancel(r.Context()), chat.Refusal{User: me, Channel: channel, What: "identity", Reason: reason,
			Detail: map[string]string{"claimed_user": clip(claimed), "via": "console", "path": r.URL.Path}})
	}
	writeErr(w, http.StatusForbidden, reason)
	return "", false
}

func writeErr(w http.ResponseWriter, code int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(map[string]string{"error": msg})
}

func (c *Console) knownUser(u string) bool {
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

// clip bounds a caller-chosen string before it goes into the audit trail.
func clip(s string) string {
	if len(s) > 64 {
		return strings.ToValidUTF8(s[:64], "") + "…"
	}
	return s
}

// MaxBody bounds a console request body; larger ones get 413.
const MaxBody = 64 << 10

// decode reads a JSON body; it answers 400 or 413 itself and reports false.
func decode(w http.ResponseWriter, r *http.Request, v any) bool {
	if r.ContentLength > MaxBody {
		writeErr(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("request body of %d bytes is larger than %d", r.ContentLength, MaxBody))
		return false
	}
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, MaxBody))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			writeErr(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("request body is larger than %d bytes", MaxBody))
			return false
		}
		writeErr(w, http.StatusBadRequest, fmt.Sprintf("malformed JSON body: %v", err))
		return false
	}
	return true
}

func (c *Console) postCommand(w http.ResponseWriter, r *http.Request) {
	var in struct{ User, Channel, Text string }
	if !decode(w, r, &in) {
		return
	}
	user, ok := c.identify(w, r, in.User, in.Channel)
	if !ok {
		return
	}
	switch {
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
	cmd := chat.Command{User: user, Channel: in.Channel, Text: in.Text}
	go func() { _ = h.HandleCommand(context.WithoutCancel(r.Context()), cmd) }()
	w.WriteHeader(http.StatusAccepted)
}

func (c *Console) postAction(w http.ResponseWriter, r *http.Request) {
	var in struct {
		User      string `json:"user"`
		MessageID string `json:"message_id"`
		ActionID  string `json:"action_id"`
		// Channel is where the page shows the message; a click on a message
		// that no longer exists is answered there.
		Channel string `json:"channel"`
	}
	if !decode(w, r, &in) {
		return
	}
	c.mu.Lock()
	if m, ok := c.msgs[in.MessageID]; ok {
		in.Channel = m.Channel
	}
	c.mu.Unlock()
	user, ok := c.identify(w, r, in.User, in.Channel)
	if !ok {
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
	h := c.getHandler()
	if h == nil {
		writeErr(w, http.StatusServiceUnavailable, "the console is not connected to the bot yet; retry in a moment")
		return
	}
	if !ok || !found {
		// A forged or stale button: answered in the channel and audited, as
		// the engine does for Slack and Discord clicks, and the API says so.
		msg := fmt.Sprintf("no message %q", in.MessageID)
		if ok {
			msg = fmt.Sprintf("message %s has no button %q (it may have been replaced; reload)", in.MessageID, in.ActionID)
		} else if c.knownChannel(in.Channel) {
			channel = in.Channel
		}
		_ = h.HandleRefusal(context.WithoutCancel(r.Context()), chat.Refusal{User: user, Channel: channel, What: "action",
			Reason: "this button is unknown or no longer valid; run the command again", Detail: map[string]string{"via": "console", "message_id": clip(in.MessageID)}})
		writeErr(w, http.StatusNotFound, msg)
		return
	}
	act := chat.Action{User: user, Channel: channel, MessageRef: in.MessageID, ActionID: in.ActionID}
	go func() { _ = h.HandleAction(context.WithoutCancel(r.Context()), act) }()
	w.WriteHeader(http.StatusAccepted)
}

func (c *Console) getMessages(w http.ResponseWriter, r *http.Request) {
	ch := r.URL.Query().Get("channel")
	if !c.checkChannel(w, r, ch) {
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

// StreamWriteTimeout bounds each write to an event stream: the server's
// WriteTimeout would end every stream, so the stream sets its own deadline
// per event instead, and a client that stops reading is still dropped.
const StreamWriteTimeout = 30 * time.Second

func (c *Console) stream(w http.ResponseWriter, r *http.Request) {
	ch := r.URL.Query().Get("channel")
	if !c.checkChannel(w, r, ch) {
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
	// The server's WriteTimeout would end the stream: each event gets its
	// own deadline instead. (Its ReadTimeout ends with the request, which
	// has no body: net/http lifts the read deadline once a body is read.)
	// ErrNotSupported (a test recorder) has no deadline to move.
	rc := http.NewResponseController(w)
	extend := func() bool {
		err := rc.SetWriteDeadline(time.Now().Add(StreamWriteTimeout))
		return err == nil || errors.Is(err, http.ErrNotSupported)
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
		if !extend() {
			return
		}
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
			if !extend() {
				return
			}
			if _, err := fmt.Fprint(w, ": keep-alive\n\n"); err != nil {
				return
			}
		case <-r.Context().Done():
			return
		}
	}
}
