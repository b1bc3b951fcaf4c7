package slack

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/gorilla/websocket"
	"github.com/slack-go/slack/socketmode"

	"github.com/talosbot/talosbot/bot/chat"
)

// Why not socketmode.Client's managed loop: its Ack only queues the response
// for a sender goroutine and reports nothing when the frame is written, so
// work started after Ack can reach Slack before the ack does. This loop uses
// the same wire types (socketmode.Request/Response) and slack-go's
// apps.connections.open, but writes each ack synchronously and only then
// starts the handler.

const (
	// readTimeout drops a connection that has been silent (no frame, no
	// ping) this long; Slack pings every few seconds.
	readTimeout  = 60 * time.Second
	writeTimeout = 10 * time.Second
	maxBackoff   = time.Minute
)

// Run connects and serves until ctx ends. In socket mode it keeps a Socket
// Mode websocket open (reconnecting when Slack asks or the link drops); in
// http mode it only checks the bot token and waits, since HTTPHandler serves.
func (a *Adapter) Run(ctx context.Context) error {
	if err := a.Identify(ctx); err != nil {
		return err
	}
	if a.o.Mode == ModeHTTP {
		<-ctx.Done()
		return nil
	}
	backoff := time.Second
	for {
		connected, err := a.session(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if isAuthError(err) {
			return fmt.Errorf("slack: socket mode: %w (check chat.slack.app_token; it needs connections:write)", err)
		}
		if connected {
			backoff = time.Second
		}
		if connected && err == nil {
			continue // Slack asked for a reconnect: do it now
		}
		a.log.Warn("slack: socket mode connection lost; reconnecting", "err", err, "in", backoff)
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
		backoff = min(2*backoff, maxBackoff)
	}
}

func isAuthError(err error) bool {
	if err == nil {
		return false
	}
	for _, s := range []string{"invalid_auth", "not_authed", "account_inactive", "token_revoked", "not_allowed_token_type"} {
		if strings.Contains(err.Error(), s) {
			return true
		}
	}
	return false
}

// errDisconnect is Slack asking for a reconnect; it is not a failure.
var errDisconnect = errors.New("slack asked to reconnect")

// session opens one Socket Mode connection and serves it until it ends.
// connected reports whether the websocket was established.
func (a *Adapter) session(ctx context.Context) (connected bool, err error) {
	_, wsURL, err := a.api.StartSocketModeContext(ctx)
	if err != nil {
		return false, fmt.Errorf("apps.connections.open: %w", err)
	}
	dialer := websocket.Dialer{HandshakeTimeout: 30 * time.Second, Proxy: http.ProxyFromEnvironment, WriteBufferSize: 32 << 10}
	conn, resp, err := dialer.DialContext(ctx, wsURL, nil)
	if resp != nil && resp.Body != nil {
		_ = resp.Body.Close()
	}
	if err != nil {
		return false, fmt.Errorf("dial socket mode url: %w", err) // the URL itself carries a ticket; never logged
	}
	c := &socketConn{conn: conn}
	stop := context.AfterFunc(ctx, func() { _ = conn.Close() })
	defer stop()
	defer func() { _ = conn.Close() }()
	conn.SetReadLimit(maxPayload)
	_ = conn.SetReadDeadline(time.Now().Add(readTimeout))
	conn.SetPingHandler(func(data string) error {
		_ = conn.SetReadDeadline(time.Now().Add(readTimeout))
		err := conn.WriteControl(websocket.PongMessage, []byte(data), time.Now().Add(writeTimeout))
		if errors.Is(err, websocket.ErrCloseSent) {
			return nil
		}
		return err
	})
	a.log.Info("slack: socket mode connected")
	for {
		_, data, err := conn.ReadMessage()
		if err != nil {
			return true, err
		}
		_ = conn.SetReadDeadline(time.Now().Add(readTimeout))
		if err := a.onFrame(ctx, c, data); errors.Is(err, errDisconnect) {
			return true, nil
		}
	}
}

// socketConn serialises writes (acks) on one websocket.
type socketConn struct {
	mu   sync.Mutex
	conn *websocket.Conn
}

// acker writes an envelope's acknowledgement; it returns once the frame has
// been written.
type acker interface {
	ack(envelopeID string, payload any) error
}

func (c *socketConn) ack(envelopeID string, payload any) error {
	b, err := json.Marshal(socketmode.Response{EnvelopeID: envelopeID, Payload: payload})
	if err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	_ = c.conn.SetWriteDeadline(time.Now().Add(writeTimeout))
	return c.conn.WriteMessage(websocket.TextMessage, b)
}

// onFrame handles one Socket Mode frame: acknowledge first, then hand the
// work to a goroutine. It runs on the read loop, so it must stay fast.
func (a *Adapter) onFrame(ctx context.Context, c acker, data []byte) error {
	var req socketmode.Request
	if err := json.Unmarshal(data, &req); err != nil {
		a.log.Warn("slack: unreadable socket mode frame", "err", err)
		return nil
	}
	switch req.Type {
	case socketmode.RequestTypeHello:
		return nil
	case socketmode.RequestTypeDisconnect:
		a.log.Info("slack: socket mode disconnect requested", "reason", req.Reason)
		return errDisconnect
	}
	if req.EnvelopeID == "" {
		a.log.Warn("slack: socket mode frame without envelope_id", "type", req.Type)
		return nil
	}
	switch req.Type {
	case socketmode.RequestTypeSlashCommands:
		cmd, err := decodeSlashJSON(req.Payload)
		if err != nil {
			a.ack(c, req.EnvelopeID, ephemeral("talosbot could not read this command: "+err.Error()))
			return nil
		}
		if !a.ack(c, req.EnvelopeID, nil) || !a.seen.firstTime("env:"+req.EnvelopeID) {
			return nil
		}
		a.dispatch(ctx, "slash command", func(ctx context.Context, h chat.Handler) error { return h.HandleCommand(ctx, cmd) })
	case socketmode.RequestTypeEventsAPI:
		if !a.ack(c, req.EnvelopeID, nil) {
			return nil
		}
		d, err := decodeEvent(req.Payload, a.botUserID())
		if err != nil {
			a.log.Warn("slack: malformed events_api payload", "err", err)
			return nil
		}
		// Both ids: a retried delivery may carry a new envelope_id but
		// always the same event_id.
		if !a.seen.firstTime("env:"+req.EnvelopeID) || !a.seen.firstTime("evt:"+d.EventID) || d.Command == nil {
			return nil
		}
		cmd := *d.Command
		a.dispatch(ctx, "app mention", func(ctx context.Context, h chat.Handler) error { return h.HandleCommand(ctx, cmd) })
	case socketmode.RequestTypeInteractive:
		if !a.ack(c, req.EnvelopeID, nil) {
			return nil
		}
		acts, err := decodeInteractionJSON(req.Payload)
		if err != nil {
			a.log.Warn("slack: malformed interactive payload", "err", err)
			return nil
		}
		if !a.seen.firstTime("env:" + req.EnvelopeID) {
			return nil
		}
		a.dispatchActions(ctx, acts)
	default:
		// Unknown envelope types are acknowledged so Slack stops retrying.
		a.ack(c, req.EnvelopeID, nil)
	}
	return nil
}

func (a *Adapter) dispatchActions(ctx context.Context, acts []chat.Action) {
	for _, act := range acts {
		a.dispatch(ctx, "button click", func(ctx context.Context, h chat.Handler) error { return h.HandleAction(ctx, act) })
	}
}

// ack reports whether the acknowledgement was written; without it the work
// does not run (Slack will redeliver on the next connection).
func (a *Adapter) ack(c acker, envelopeID string, payload any) bool {
	if err := c.ack(envelopeID, payload); err != nil {
		a.log.Warn("slack: ack failed", "envelope", envelopeID, "err", err)
		return false
	}
	return true
}

// ephemeral is a slash-command response only the invoking user sees.
func ephemeral(text string) map[string]string {
	return map[string]string{"response_type": "ephemeral", "text": Escape(text)}
}

func (a *Adapter) botUserID() string {
	a.botMu.Lock()
	defer a.botMu.Unlock()
	return a.botID
}
