// Package discordfake is a local, protocol-level stand-in for Discord used by
// tests: the gateway websocket (HELLO, IDENTIFY, READY, heartbeats and
// INTERACTION_CREATE dispatches) and the REST endpoints talosbot uses
// (gateway discovery, application command overwrite, interaction callback
// and original-response edit, channel message create/edit, thread start).
// Every request the adapter makes is recorded in one ordered log.
package discordfake

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/gorilla/websocket"
)

// Options configure a Server.
type Options struct {
	Token         string // expected as "Authorization: Bot <Token>" and in IDENTIFY
	ApplicationID string // default "100000000000000001"
	BotUserID     string // default "100000000000000002"
}

// Record is one request the adapter made.
type Record struct {
	Seq    int64
	Kind   string // "rest" or "gateway"
	Method string // HTTP method (rest)
	Path   string // e.g. /api/v9/channels/42/messages (rest)
	Op     int    // gateway opcode received (gateway)
	Body   json.RawMessage
	At     time.Time
}

// Message is a message the fake holds.
type Message struct {
	ID, ChannelID string
	Content       string
	Embeds        json.RawMessage
	Components    json.RawMessage
	Edits         int
}

// Interaction identifies a dispatched interaction.
type Interaction struct{ ID, Token string }

// Server is the fake. Create it with Start.
type Server struct {
	o   Options
	ln  net.Listener
	srv *http.Server

	mu       sync.Mutex
	seq      int64
	nextID   int64
	records  []Record
	messages map[string]*Message
	threads  map[string]string // thread id → parent channel
	conn     *websocket.Conn
	wmu      sync.Mutex
	gwSeq    int64
	ready    bool
	changed  chan struct{}
}

// Start listens on 127.0.0.1 and serves until Close.
func Start(o Options) (*Server, error) {
	if o.ApplicationID == "" {
		o.ApplicationID = "100000000000000001"
	}
	if o.BotUserID == "" {
		o.BotUserID = "100000000000000002"
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("discordfake: listen: %w", err)
	}
	s := &Server{o: o, ln: ln, nextID: 200000000000000000, messages: map[string]*Message{}, threads: map[string]string{}, changed: make(chan struct{})}
	mux := http.NewServeMux()
	mux.HandleFunc("/gw/", s.serveGateway)
	mux.HandleFunc("/gw", s.serveGateway)
	mux.HandleFunc("/api/v9/", s.serveREST)
	s.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = s.srv.Serve(ln) }()
	return s, nil
}

// URL is the base to give the adapter as Options.APIURL.
func (s *Server) URL() string { return "http://" + s.ln.Addr().String() + "/" }

// ApplicationID is the application id the fake reports in READY.
func (s *Server) ApplicationID() string { return s.o.ApplicationID }

// Close stops the server.
func (s *Server) Close() {
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
	r.At = time.Now()
	s.records = append(s.records, r)
	s.notifyLocked()
}

func (s *Server) newID() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.nextID++
	return fmt.Sprint(s.nextID)
}

// Records returns everything recorded so far, in order.
func (s *Server) Records() []Record {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Record(nil), s.records...)
}

// Message returns the fake's copy of a message.
func (s *Server) Message(id string) (Message, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	m, ok := s.messages[id]
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
			return recs, fmt.Errorf("discordfake: condition not met: %w", ctx.Err())
		}
	}
}

// WaitReady waits until a client has identified and received READY.
func (s *Server) WaitReady(ctx context.Context) error {
	for {
		s.mu.Lock()
		ok, ch := s.ready, s.changed
		s.mu.Unlock()
		if ok {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("discordfake: no identified gateway session: %w", ctx.Err())
		}
	}
}

// ---- REST ----

func restErr(w http.ResponseWriter, code, apiCode int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(map[string]any{"code": apiCode, "message": msg})
}

func reply(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}

func (s *Server) messageJSON(m *Message) map[string]any {
	out := map[string]any{"id": m.ID, "channel_id": m.ChannelID, "content": m.Content, "type": 0,
		"author": map[string]any{"id": s.o.BotUserID, "username": "talosbot", "bot": true}, "timestamp": time.Now().UTC().Format(time.RFC3339)}
	if len(m.Embeds) > 0 {
		out["embeds"] = m.Embeds
	}
	return out
}

func (s *Server) serveREST(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if !json.Valid(body) {
		body = nil
	}
	s.record(Record{Kind: "rest", Method: r.Method, Path: r.URL.Path, Body: body})
	parts := strings.Split(strings.TrimPrefix(r.URL.Path, "/api/v9/"), "/")
	// Interaction callbacks and webhook edits are authorised by the
	// interaction token in the path, not the bot token (as on Discord).
	tokenAuth := len(parts) > 0 && (parts[0] == "interactions" || parts[0] == "webhooks")
	if !tokenAuth && r.Header.Get("Authorization") != "Bot "+s.o.Token {
		restErr(w, http.StatusUnauthorized, 0, "401: Unauthorized")
		return
	}
	switch {
	case r.Method == http.MethodGet && len(parts) == 1 && parts[0] == "gateway":
		reply(w, map[string]string{"url": "ws://" + s.ln.Addr().String() + "/gw"})
	case r.Method == http.MethodPut && len(parts) >= 3 && parts[0] == "applications" && parts[len(parts)-1] == "commands":
		if parts[1] != s.o.ApplicationID {
			restErr(w, http.StatusForbidden, 50001, "Missing Access")
			return
		}
		var cmds []map[string]any
		if err := json.Unmarshal(body, &cmds); err != nil {
			restErr(w, http.StatusBadRequest, 50035, "Invalid Form Body")
			return
		}
		for _, c := range cmds {
			c["id"], c["application_id"], c["version"] = s.newID(), s.o.ApplicationID, "1"
		}
		reply(w, cmds)
	case r.Method == http.MethodPost && len(parts) == 4 && parts[0] == "interactions" && parts[3] == "callback":
		w.WriteHeader(http.StatusNoContent)
	case r.Method == http.MethodPost && len(parts) == 3 && parts[0] == "webhooks":
		// An interaction follow-up (an ephemeral one has flags 64); it is
		// not a channel message the bot can edit later.
		var in struct {
			Content string `json:"content"`
			Flags   int    `json:"flags"`
		}
		if json.Unmarshal(body, &in) != nil || in.Content == "" {
			restErr(w, http.StatusBadRequest, 50006, "Cannot send an empty message")
			return
		}
		reply(w, map[string]any{"id": s.newID(), "channel_id": "0", "content": in.Content, "flags": in.Flags, "type": 0})
	case r.Method == http.MethodPatch && len(parts) == 5 && parts[0] == "webhooks" && parts[4] == "@original":
		reply(w, map[string]any{"id": s.newID(), "channel_id": "0", "content": "", "type": 20})
	case len(parts) == 3 && parts[0] == "channels" && parts[2] == "messages" && r.Method == http.MethodPost:
		var in struct {
			Content    string          `json:"content"`
			Embeds     json.RawMessage `json:"embeds"`
			Components json.RawMessage `json:"components"`
		}
		if json.Unmarshal(body, &in) != nil || (in.Content == "" && len(in.Embeds) == 0 && len(in.Components) == 0) {
			restErr(w, http.StatusBadRequest, 50006, "Cannot send an empty message")
			return
		}
		m := &Message{ID: s.newID(), ChannelID: parts[1], Content: in.Content, Embeds: in.Embeds, Components: in.Components}
		s.mu.Lock()
		s.messages[m.ID] = m
		s.notifyLocked()
		s.mu.Unlock()
		reply(w, s.messageJSON(m))
	case len(parts) == 4 && parts[0] == "channels" && parts[2] == "messages" && r.Method == http.MethodPatch:
		var in struct {
			Content    *string          `json:"content"`
			Embeds     *json.RawMessage `json:"embeds"`
			Components *json.RawMessage `json:"components"`
		}
		_ = json.Unmarshal(body, &in)
		s.mu.Lock()
		m, ok := s.messages[parts[3]]
		if ok && m.ChannelID != parts[1] {
			ok = false
		}
		if ok {
			if in.Content != nil {
				m.Content = *in.Content
			}
			if in.Embeds != nil {
				m.Embeds = *in.Embeds
			}
			if in.Components != nil {
				m.Components = *in.Components
			}
			m.Edits++
			s.notifyLocked()
		}
		s.mu.Unlock()
		if !ok {
			restErr(w, http.StatusNotFound, 10008, "Unknown Message")
			return
		}
		reply(w, s.messageJSON(m))
	case len(parts) == 5 && parts[0] == "channels" && parts[2] == "messages" && parts[4] == "threads" && r.Method == http.MethodPost:
		s.mu.Lock()
		_, exists := s.threads[parts[3]]
		_, parent := s.messages[parts[3]]
		if !exists && parent {
			s.threads[parts[3]] = parts[1]
		}
		s.mu.Unlock()
		switch {
		case !parent:
			restErr(w, http.StatusNotFound, 10008, "Unknown Message")
		case exists:
			restErr(w, http.StatusBadRequest, 160004, "A thread has already been created for this message")
		default:
			reply(w, map[string]any{"id": parts[3], "type": 11, "parent_id": parts[1], "name": "talosbot details"})
		}
	default:
		restErr(w, http.StatusNotFound, 0, "404: Not Found")
	}
}

// ---- gateway ----

var upgrader = websocket.Upgrader{CheckOrigin: func(*http.Request) bool { return true }}

func (s *Server) send(c *websocket.Conn, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	s.wmu.Lock()
	defer s.wmu.Unlock()
	return c.WriteMessage(websocket.TextMessage, b)
}

func (s *Server) serveGateway(w http.ResponseWriter, r *http.Request) {
	c, err := upgrader.Upgrade(w, r, nil)
	if err != nil {
		return
	}
	defer func() { _ = c.Close() }()
	if err := s.send(c, map[string]any{"op": 10, "d": map[string]any{"heartbeat_interval": 41250}}); err != nil {
		return
	}
	for {
		_, data, err := c.ReadMessage()
		if err != nil {
			s.mu.Lock()
			if s.conn == c {
				s.conn, s.ready = nil, false
				s.notifyLocked()
			}
			s.mu.Unlock()
			return
		}
		var p struct {
			Op int             `json:"op"`
			D  json.RawMessage `json:"d"`
		}
		if json.Unmarshal(data, &p) != nil {
			continue
		}
		rec := p.D
		if p.Op == 2 {
			rec = nil // IDENTIFY carries the token; keep it out of the record
		}
		s.record(Record{Kind: "gateway", Op: p.Op, Body: rec})
		switch p.Op {
		case 1: // heartbeat
			_ = s.send(c, map[string]any{"op": 11})
		case 2: // identify
			var id struct {
				Token string `json:"token"`
			}
			_ = json.Unmarshal(p.D, &id)
			if id.Token != "Bot "+s.o.Token {
				_ = c.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(4004, "Authentication failed."), time.Now().Add(time.Second))
				return
			}
			s.mu.Lock()
			s.gwSeq++
			seq := s.gwSeq
			s.mu.Unlock()
			ready := map[string]any{"op": 0, "t": "READY", "s": seq, "d": map[string]any{
				"v": 9, "session_id": "fake-session", "resume_gateway_url": "ws://" + s.ln.Addr().String() + "/gw",
				"user":        map[string]any{"id": s.o.BotUserID, "username": "talosbot", "discriminator": "0", "bot": true},
				"guilds":      []any{},
				"application": map[string]any{"id": s.o.ApplicationID, "flags": 0},
			}}
			if err := s.send(c, ready); err != nil {
				return
			}
			s.mu.Lock()
			s.conn, s.ready = c, true
			s.notifyLocked()
			s.mu.Unlock()
		}
	}
}

// Dispatch sends an INTERACTION_CREATE with the given interaction object.
func (s *Server) Dispatch(interaction any) error {
	s.mu.Lock()
	c := s.conn
	s.gwSeq++
	seq := s.gwSeq
	s.mu.Unlock()
	if c == nil {
		return errors.New("discordfake: no identified gateway session; wait with WaitReady")
	}
	return s.send(c, map[string]any{"op": 0, "t": "INTERACTION_CREATE", "s": seq, "d": interaction})
}

func (s *Server) member(userID string) map[string]any {
	return map[string]any{"user": map[string]any{"id": userID, "username": "user" + userID, "discriminator": "0"}, "roles": []string{}}
}

// SlashCommandPayload builds a /talos interaction with option command=text.
func (s *Server) SlashCommandPayload(userID, channelID, text string) (Interaction, map[string]any) {
	in := Interaction{ID: s.newID(), Token: "itoken-" + s.newID()}
	return in, map[string]any{
		"id": in.ID, "application_id": s.o.ApplicationID, "type": 2, "token": in.Token, "version": 1,
		"guild_id": "300000000000000001", "channel_id": channelID, "member": s.member(userID),
		"data": map[string]any{"id": "400000000000000001", "name": "talos", "type": 1,
			"options": []map[string]any{{"name": "command", "type": 3, "value": text}}},
	}
}

// ClickPayload builds a button (component) interaction on a message.
func (s *Server) ClickPayload(userID, channelID, messageID, customID string) (Interaction, map[string]any) {
	in := Interaction{ID: s.newID(), Token: "itoken-" + s.newID()}
	return in, map[string]any{
		"id": in.ID, "application_id": s.o.ApplicationID, "type": 3, "token": in.Token, "version": 1,
		"guild_id": "300000000000000001", "channel_id": channelID, "member": s.member(userID),
		"message": map[string]any{"id": messageID, "channel_id": channelID, "content": "", "author": map[string]any{"id": s.o.BotUserID}},
		"data":    map[string]any{"custom_id": customID, "component_type": 2},
	}
}

// SlashCommand dispatches /talos command:<text> over the gateway.
func (s *Server) SlashCommand(userID, channelID, text string) (Interaction, error) {
	in, p := s.SlashCommandPayload(userID, channelID, text)
	return in, s.Dispatch(p)
}

// Click dispatches a button click over the gateway.
func (s *Server) Click(userID, channelID, messageID, customID string) (Interaction, error) {
	in, p := s.ClickPayload(userID, channelID, messageID, customID)
	return in, s.Dispatch(p)
}
