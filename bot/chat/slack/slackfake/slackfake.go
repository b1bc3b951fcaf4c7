// Package slackfake is a local, protocol-level stand-in for Slack used by
// tests: the Web API methods talosbot calls (auth.test, apps.connections.open,
// chat.postMessage, chat.update) over HTTP and a Socket Mode websocket that
// sends hello and envelopes and records the acks. Everything the adapter
// sends is recorded in one ordered log so tests can assert on ordering
// (e.g. an envelope's ack before any chat.postMessage).
package slackfake

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gorilla/websocket"
)

// Options configure a Server.
type Options struct {
	BotToken  string // required on chat.* and auth.test
	AppToken  string // required on apps.connections.open
	BotUserID string // auth.test user_id; default U0TALOSBOT
	// PingInterval is how often the websocket pings the client (Slack pings
	// regularly and slack-go reconnects without them). Default 2s.
	PingInterval time.Duration
}

// Record is one thing the adapter sent to the fake.
type Record struct {
	Seq  int64
	Kind string // "ack" or "api"
	// For acks:
	EnvelopeID string
	Payload    json.RawMessage
	SentAt     time.Time // when the envelope was written to the socket
	// For Web API calls:
	Method string     // e.g. "chat.postMessage"
	Params url.Values // form parameters (blocks is a JSON string)
	At     time.Time
}

// Message is a message the fake holds, as last posted or updated.
type Message struct {
	Channel, TS, ThreadTS, Text string
	Blocks                      json.RawMessage
	Updates                     int
}

// Server is the fake. Create it with Start.
type Server struct {
	o   Options
	srv *http.Server
	ln  net.Listener
	url string

	mu       sync.Mutex
	seq      int64
	nextID   int
	records  []Record
	sent     map[string]time.Time // envelope id → written at
	acks     map[string]Record    // envelope id → first ack
	messages map[string]*Message  // channel/ts
	conn     *websocket.Conn
	wmu      sync.Mutex // serialises websocket writes
	conns    int
	pongs    map[string]chan struct{} // barrier ping payload → waiter
	changed  chan struct{}
	done     chan struct{}
}

// Start listens on 127.0.0.1 and serves until Close.
func Start(o Options) (*Server, error) {
	if o.BotUserID == "" {
		o.BotUserID = "U0TALOSBOT"
	}
	if o.PingInterval == 0 {
		o.PingInterval = 2 * time.Second
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("slackfake: listen: %w", err)
	}
	s := &Server{o: o, ln: ln, url: "http://" + ln.Addr().String(), sent: map[string]time.Time{}, acks: map[string]Record{},
		pongs:    map[string]chan struct{}{},
		messages: map[string]*Message{}, changed: make(chan struct{}), done: make(chan struct{})}
	mux := http.NewServeMux()
	mux.HandleFunc("/api/", s.serveAPI)
	mux.HandleFunc("/link", s.serveSocket)
	s.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = s.srv.Serve(ln) }()
	return s, nil
}

// APIURL is the Web API base to give the adapter (Options.APIURL).
func (s *Server) APIURL() string { return s.url + "/api/" }

// Close stops the server and drops the websocket.
func (s *Server) Close() {
	close(s.done)
	s.mu.Lock()
	c := s.conn
	s.mu.Unlock()
	if c != nil {
		_ = c.Close()
	}
	_ = s.srv.Close()
}

func (s *Server) notifyLocked() {
	close(s.changed)
	s.changed = make(chan struct{})
}

func (s *Server) record(r Record) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.seq++
	r.Seq = s.seq
	s.records = append(s.records, r)
	if _, dup := s.acks[r.EnvelopeID]; r.Kind == "ack" && !dup {
		s.acks[r.EnvelopeID] = r
	}
	s.notifyLocked()
}

// Records returns everything recorded so far, in order.
func (s *Server) Records() []Record {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Record(nil), s.records...)
}

// Calls returns the Web API calls of one method, in order.
func (s *Server) Calls(method string) []Record {
	var out []Record
	for _, r := range s.Records() {
		if r.Kind == "api" && r.Method == method {
			out = append(out, r)
		}
	}
	return out
}

// Message returns the fake's copy of a message.
func (s *Server) Message(channel, ts string) (Message, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	m, ok := s.messages[channel+"/"+ts]
	if !ok {
		return Message{}, false
	}
	return *m, true
}

// WaitFor blocks until pred holds for the records, or ctx ends.
func (s *Server) WaitFor(ctx context.Context, pred func([]Record) bool) ([]Record, error) {
	for {
		s.mu.Lock()
		recs := append([]Record(nil), s.records...)
		ch := s.changed
		s.mu.Unlock()
		if pred(recs) {
			return recs, nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return recs, fmt.Errorf("slackfake: condition not met: %w", ctx.Err())
		}
	}
}

// WaitAck waits for the (first) ack of an envelope.
func (s *Server) WaitAck(ctx context.Context, envelopeID string) (Record, error) {
	for {
		s.mu.Lock()
		r, ok := s.acks[envelopeID]
		ch := s.changed
		s.mu.Unlock()
		if ok {
			return r, nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return Record{}, fmt.Errorf("slackfake: envelope %s not acked: %w", envelopeID, ctx.Err())
		}
	}
}

// WaitConnected waits until the adapter has an open socket (n-th connection
// when n > 1, to observe reconnects).
func (s *Server) WaitConnected(ctx context.Context, n int) error {
	for {
		s.mu.Lock()
		ok := s.conn != nil && s.conns >= n
		ch := s.changed
		s.mu.Unlock()
		if ok {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("slackfake: no socket mode connection: %w", ctx.Err())
		}
	}
}

// ---- Web API ----

type apiReply map[string]any

func (s *Server) serveAPI(w http.ResponseWriter, r *http.Request) {
	method := strings.TrimPrefix(r.URL.Path, "/api/")
	body, _ := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	params, _ := url.ParseQuery(string(body))
	if strings.HasPrefix(r.Header.Get("Content-Type"), "application/json") {
		params = url.Values{}
		var m map[string]any
		if json.Unmarshal(body, &m) == nil {
			for k, v := range m {
				if str, ok := v.(string); ok {
					params.Set(k, str)
				} else {
					b, _ := json.Marshal(v)
					params.Set(k, string(b))
				}
			}
		}
	}
	for k, v := range r.URL.Query() {
		params[k] = v
	}
	if method != "apps.connections.open" && method != "auth.test" {
		s.barrier(r.Context())
	}
	token := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
	if token == "" {
		token = params.Get("token")
	}
	params.Del("token") // never keep secrets in the record
	at := time.Now()
	s.record(Record{Kind: "api", Method: method, Params: params, At: at})
	reply := func(v apiReply) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(v)
	}
	wantToken := s.o.BotToken
	if method == "apps.connections.open" {
		wantToken = s.o.AppToken
	}
	if token == "" {
		reply(apiReply{"ok": false, "error": "not_authed"})
		return
	}
	if token != wantToken {
		reply(apiReply{"ok": false, "error": "invalid_auth"})
		return
	}
	switch method {
	case "auth.test":
		reply(apiReply{"ok": true, "url": "https://fake.slack.test/", "team": "Fake", "user": "talosbot", "team_id": "T0FAKE", "user_id": s.o.BotUserID, "bot_id": "B0FAKE"})
	case "apps.connections.open":
		reply(apiReply{"ok": true, "url": "ws://" + s.ln.Addr().String() + "/link?ticket=fake"})
	case "chat.postMessage":
		ch := params.Get("channel")
		if ch == "" {
			reply(apiReply{"ok": false, "error": "channel_not_found"})
			return
		}
		if !json.Valid([]byte(params.Get("blocks"))) && params.Get("blocks") != "" {
			reply(apiReply{"ok": false, "error": "invalid_blocks"})
			return
		}
		s.mu.Lock()
		s.nextID++
		ts := fmt.Sprintf("1700000000.%06d", s.nextID)
		s.messages[ch+"/"+ts] = &Message{Channel: ch, TS: ts, ThreadTS: params.Get("thread_ts"), Text: params.Get("text"), Blocks: json.RawMessage(params.Get("blocks"))}
		s.notifyLocked()
		s.mu.Unlock()
		reply(apiReply{"ok": true, "channel": ch, "ts": ts, "message": map[string]any{"text": params.Get("text"), "ts": ts}})
	case "chat.postEphemeral":
		// Shown to one user only and never stored as a channel message
		// (Slack cannot edit or thread under it either).
		if params.Get("channel") == "" {
			reply(apiReply{"ok": false, "error": "channel_not_found"})
			return
		}
		if params.Get("user") == "" {
			reply(apiReply{"ok": false, "error": "user_not_in_channel"})
			return
		}
		s.mu.Lock()
		s.nextID++
		ts := fmt.Sprintf("1700000000.%06d", s.nextID)
		s.notifyLocked()
		s.mu.Unlock()
		reply(apiReply{"ok": true, "message_ts": ts})
	case "chat.update":
		ch, ts := params.Get("channel"), params.Get("ts")
		s.mu.Lock()
		m, ok := s.messages[ch+"/"+ts]
		if ok {
			m.Text, m.Blocks = params.Get("text"), json.RawMessage(params.Get("blocks"))
			m.Updates++
			s.notifyLocked()
		}
		s.mu.Unlock()
		if !ok {
			reply(apiReply{"ok": false, "error": "message_not_found"})
			return
		}
		reply(apiReply{"ok": true, "channel": ch, "ts": ts, "text": params.Get("text")})
	default:
		reply(apiReply{"ok": false, "error": "unknown_method"})
	}
}

// ---- Socket Mode ----

var upgrader = websocket.Upgrader{CheckOrigin: func(*http.Request) bool { return true }}

func (s *Server) serveSocket(w http.ResponseWriter, r *http.Request) {
	c, err := upgrader.Upgrade(w, r, nil)
	if err != nil {
		return
	}
	s.mu.Lock()
	if old := s.conn; old != nil {
		_ = old.Close()
	}
	s.conn = c
	s.conns++
	n := s.conns
	s.mu.Unlock()
	hello := map[string]any{"type": "hello", "num_connections": 1, "connection_info": map[string]string{"app_id": "A0FAKE"},
		"debug_info": map[string]any{"host": "slackfake", "approximate_connection_time": 3600}}
	if err := s.write(c, hello); err != nil {
		return
	}
	s.mu.Lock()
	s.notifyLocked() // connected only once hello is out
	s.mu.Unlock()
	c.SetPongHandler(func(data string) error {
		s.mu.Lock()
		ch, ok := s.pongs[data]
		delete(s.pongs, data)
		s.mu.Unlock()
		if ok {
			close(ch)
		}
		return nil
	})
	stop := make(chan struct{})
	defer close(stop)
	go s.pinger(c, stop)
	for {
		_, data, err := c.ReadMessage()
		if err != nil {
			s.mu.Lock()
			if s.conn == c {
				s.conn = nil
				s.notifyLocked()
			}
			s.mu.Unlock()
			_ = n
			return
		}
		var ack struct {
			EnvelopeID string          `json:"envelope_id"`
			Payload    json.RawMessage `json:"payload"`
		}
		if json.Unmarshal(data, &ack) != nil || ack.EnvelopeID == "" {
			s.record(Record{Kind: "garbage", Payload: json.RawMessage(strconv.Quote(string(data))), At: time.Now()})
			continue
		}
		now := time.Now()
		s.mu.Lock()
		sentAt := s.sent[ack.EnvelopeID]
		s.mu.Unlock()
		s.record(Record{Kind: "ack", EnvelopeID: ack.EnvelopeID, Payload: ack.Payload, SentAt: sentAt, At: now})
	}
}

// barrier makes the log causal across connections: before a Web API call is
// recorded, the fake pings the socket and waits for the pong. The client
// writes the pong after every frame it wrote earlier (one TCP stream), and
// the read loop records frames in order, so an ack the client sent before
// making this call is recorded before it.
func (s *Server) barrier(ctx context.Context) {
	s.mu.Lock()
	c := s.conn
	s.nextID++
	token := fmt.Sprintf("barrier-%d", s.nextID)
	ch := make(chan struct{})
	s.pongs[token] = ch
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.pongs, token)
		s.mu.Unlock()
	}()
	if c == nil || c.WriteControl(websocket.PingMessage, []byte(token), time.Now().Add(5*time.Second)) != nil {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	select {
	case <-ch:
	case <-ctx.Done():
	}
}

func (s *Server) pinger(c *websocket.Conn, stop chan struct{}) {
	t := time.NewTicker(s.o.PingInterval)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-s.done:
			return
		case <-t.C:
			if err := c.WriteControl(websocket.PingMessage, []byte("ping"), time.Now().Add(5*time.Second)); err != nil {
				return
			}
		}
	}
}

func (s *Server) write(c *websocket.Conn, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return s.writeRaw(c, b)
}

func (s *Server) writeRaw(c *websocket.Conn, b []byte) error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	return c.WriteMessage(websocket.TextMessage, b)
}

func (s *Server) current() (*websocket.Conn, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.conn == nil {
		return nil, errors.New("slackfake: no socket mode connection; wait with WaitConnected")
	}
	return s.conn, nil
}

// NewEnvelopeID returns a fresh envelope id.
func (s *Server) NewEnvelopeID() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.nextID++
	return fmt.Sprintf("env-%06d", s.nextID)
}

// SendEnvelope writes a Socket Mode envelope and returns its id (a new one
// when envelopeID is empty; reuse an id to simulate a redelivery).
func (s *Server) SendEnvelope(envelopeID, typ string, payload any, retryAttempt int) (string, error) {
	c, err := s.current()
	if err != nil {
		return "", err
	}
	if envelopeID == "" {
		envelopeID = s.NewEnvelopeID()
	}
	env := map[string]any{"envelope_id": envelopeID, "type": typ, "payload": payload,
		"accepts_response_payload": typ == "slash_commands", "retry_attempt": retryAttempt}
	if retryAttempt > 0 {
		env["retry_reason"] = "timeout"
	}
	b, err := json.Marshal(env)
	if err != nil {
		return "", err
	}
	s.wmu.Lock()
	defer s.wmu.Unlock()
	// The clock starts when the frame goes out, not while it queues here.
	s.mu.Lock()
	s.sent[envelopeID] = time.Now()
	s.mu.Unlock()
	if err := c.WriteMessage(websocket.TextMessage, b); err != nil {
		return "", fmt.Errorf("slackfake: write envelope: %w", err)
	}
	return envelopeID, nil
}

// SendRaw writes an arbitrary frame (malformed-input tests).
func (s *Server) SendRaw(b []byte) error {
	c, err := s.current()
	if err != nil {
		return err
	}
	return s.writeRaw(c, b)
}

// SlashCommand sends /talos <text> from user in channel.
func (s *Server) SlashCommand(userID, channelID, text string) (string, error) {
	return s.SendEnvelope("", "slash_commands", map[string]string{
		"token": "verification-token-unused", "team_id": "T0FAKE", "team_domain": "fake", "channel_id": channelID,
		"channel_name": "ops", "user_id": userID, "user_name": strings.ToLower(userID), "command": "/talos", "text": text,
		"api_app_id": "A0FAKE", "response_url": "https://hooks.slack.test/commands/x", "trigger_id": "1.2.3",
	}, 0)
}

// AppMention sends an events_api app_mention with the given event id.
func (s *Server) AppMention(envelopeID, eventID, userID, channelID, text string, retry int) (string, error) {
	return s.SendEnvelope(envelopeID, "events_api", map[string]any{
		"token": "unused", "team_id": "T0FAKE", "api_app_id": "A0FAKE", "type": "event_callback",
		"event_id": eventID, "event_time": 1700000000,
		"event": map[string]any{"type": "app_mention", "user": userID, "text": text, "ts": "1700000000.999999",
			"channel": channelID, "event_ts": "1700000000.999999"},
	}, retry)
}

// BlockAction sends an interactive block_actions click on a button.
func (s *Server) BlockAction(userID, channelID, messageTS, actionID string) (string, error) {
	return s.SendEnvelope("", "interactive", map[string]any{
		"type": "block_actions", "api_app_id": "A0FAKE", "trigger_id": "1.2.3",
		"team":      map[string]string{"id": "T0FAKE"},
		"user":      map[string]string{"id": userID, "username": strings.ToLower(userID)},
		"channel":   map[string]string{"id": channelID, "name": "ops"},
		"container": map[string]any{"type": "message", "message_ts": messageTS, "channel_id": channelID},
		"message":   map[string]any{"type": "message", "ts": messageTS},
		"actions": []map[string]any{{"type": "button", "action_id": actionID, "block_id": "talosbot-actions-0",
			"value": actionID, "text": map[string]any{"type": "plain_text", "text": "Approve"}, "action_ts": "1700000001.000000"}},
	}, 0)
}

// Disconnect asks the client to reconnect, as Slack does periodically.
func (s *Server) Disconnect() error {
	c, err := s.current()
	if err != nil {
		return err
	}
	return s.write(c, map[string]any{"type": "disconnect", "reason": "refresh_requested", "debug_info": map[string]string{"host": "slackfake"}})
}
