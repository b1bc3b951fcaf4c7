package slack

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/talosbot/talosbot/bot/chat"
)

// ReplayWindow is how far a signed request's timestamp may be from now.
const ReplayWindow = chat.ReplayWindow

// HTTPHandler serves Slack's HTTP delivery (mode: http):
//
//	POST /slack/events         Events API (url_verification, app_mention)
//	POST /slack/interactivity  block_actions (button clicks)
//	POST /slack/commands       the /talos slash command
//
// Every request must carry a valid v0 signature within ReplayWindow;
// otherwise it gets 401 and nothing runs. A signed request seen before
// (the same signature within chat.ReplayMemory) is a replay: 401, audited once,
// nothing runs. Slack's own retries (X-Slack-Retry-Num, freshly signed) carry
// an event_id or trigger_id already handled: they get 200 and run nothing
// twice. The 200 is written before any work.
func (a *Adapter) HTTPHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /slack/events", a.signed(a.serveEvents))
	mux.HandleFunc("POST /slack/interactivity", a.signed(a.serveInteractivity))
	mux.HandleFunc("POST /slack/commands", a.signed(a.serveCommands))
	return mux
}

// VerifySignature checks Slack's v0 request signature: HMAC-SHA256 over
// "v0:<timestamp>:<body>" keyed with the signing secret, compared in
// constant time, with the timestamp within ReplayWindow of now.
func VerifySignature(secret string, header http.Header, body []byte, now time.Time) error {
	tsText := header.Get("X-Slack-Request-Timestamp")
	sig := header.Get("X-Slack-Signature")
	if tsText == "" || sig == "" {
		return errors.New("missing X-Slack-Request-Timestamp or X-Slack-Signature")
	}
	ts, err := strconv.ParseInt(tsText, 10, 64)
	if err != nil {
		return errors.New("X-Slack-Request-Timestamp is not a unix time")
	}
	if d := now.Sub(time.Unix(ts, 0)); d > ReplayWindow || d < -ReplayWindow {
		return fmt.Errorf("request timestamp is %s away from now (window %s); check the clock or a replay", d.Truncate(time.Second), ReplayWindow)
	}
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write([]byte("v0:" + tsText + ":"))
	mac.Write(body)
	want := "v0=" + hex.EncodeToString(mac.Sum(nil))
	if !hmac.Equal([]byte(want), []byte(sig)) {
		return errors.New("signature mismatch; check chat.slack.signing_secret")
	}
	return nil
}

func (a *Adapter) signed(next func(w http.ResponseWriter, r *http.Request, body []byte)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		// The body is read before the signature can be checked, so anyone
		// can send one: MaxBytesReader bounds its size and the server's
		// ReadTimeout (cmd/talosbot) its time.
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxPayload))
		if err != nil {
			if errors.Is(err, os.ErrDeadlineExceeded) {
				writeErr(w, http.StatusRequestTimeout, "request body not received in time")
				return
			}
			writeErr(w, http.StatusRequestEntityTooLarge, "request body too large or unreadable")
			return
		}
		now := a.o.Clock()
		if err := VerifySignature(a.o.SigningSecret, r.Header, body, now); err != nil {
			a.log.Warn("slack: refused unsigned or stale request", "path", r.URL.Path, "err", err)
			writeErr(w, http.StatusUnauthorized, "invalid Slack request signature")
			return
		}
		// The signature covers timestamp and body, so it names this exact
		// request; a second arrival is a replay, never a Slack retry (those
		// are signed afresh).
		sum := sha256.Sum256([]byte(r.Header.Get("X-Slack-Signature")))
		key := "slack:request:" + hex.EncodeToString(sum[:])
		first, err := a.o.Replays.FirstSeen(r.Context(), key, now, chat.ReplayMemory)
		if err != nil {
			a.log.Error("slack: replay check failed; refusing the request", "err", err)
			writeErr(w, http.StatusServiceUnavailable, "cannot check for replays right now; retry")
			return
		}
		if !first {
			a.refuseReplay(r, body, key, now)
			writeErr(w, http.StatusUnauthorized, "request already seen (replay)")
			return
		}
		next(w, r, body)
	}
}

// refuseReplay audits a replayed signed request through the handler, once
// per request per window, with the user and channel its signed body names.
func (a *Adapter) refuseReplay(r *http.Request, body []byte, key string, now time.Time) {
	a.log.Warn("slack: refused a replayed request", "path", r.URL.Path)
	h := a.handler()
	if h == nil {
		return
	}
	if first, err := a.o.Replays.FirstSeen(r.Context(), key+":refused", now, chat.ReplayMemory); err != nil || !first {
		return
	}
	var user, channel string
	switch r.URL.Path {
	case "/slack/commands":
		if c, err := decodeSlashForm(body); err == nil {
			user, channel = c.User, c.Channel
		}
	case "/slack/interactivity":
		if acts, err := decodeInteractionForm(body); err == nil && len(acts) > 0 {
			user, channel = acts[0].User, acts[0].Channel
		}
	case "/slack/events":
		if d, err := decodeEvent(body, a.botUserID()); err == nil && d.Command != nil {
			user, channel = d.Command.User, d.Command.Channel
		}
	}
	_ = h.HandleRefusal(context.WithoutCancel(r.Context()), chat.Refusal{User: user, Channel: channel, What: "replay",
		Reason: "a replayed Slack request was refused (it was already handled)", Detail: map[string]string{"via": "slack", "path": r.URL.Path}})
}

// handledBefore reports whether Slack already delivered this event or
// trigger (a retry, X-Slack-Retry-Num): it is acknowledged and not run again.
// Fails closed: when the replay state cannot be read it counts as handled.
func (a *Adapter) handledBefore(r *http.Request, id string) bool {
	if strings.HasSuffix(id, ":") {
		return false // no id to go by; the signature check still refuses exact replays
	}
	first, err := a.o.Replays.FirstSeen(r.Context(), "slack:"+id, a.o.Clock(), chat.ReplayMemory)
	if err != nil {
		a.log.Error("slack: replay check failed; not running the request", "err", err)
		return true
	}
	if !first {
		a.log.Info("slack: already handled; acknowledged without running it again", "id", id, "retry", r.Header.Get("X-Slack-Retry-Num"))
	}
	return !first
}

// triggerID reads trigger_id from a form body, or from the form's JSON
// payload field (interactivity).
func triggerID(body []byte) string {
	v, err := url.ParseQuery(string(body))
	if err != nil {
		return ""
	}
	if id := v.Get("trigger_id"); id != "" {
		return id
	}
	var p struct {
		TriggerID string `json:"trigger_id"`
	}
	if json.Unmarshal([]byte(v.Get("payload")), &p) == nil {
		return p.TriggerID
	}
	return ""
}

func writeErr(w http.ResponseWriter, code int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(map[string]string{"error": msg})
}

// ackHTTP writes the 200 and flushes it, so the response leaves before the
// handler goroutine starts.
func ackHTTP(w http.ResponseWriter, body any) {
	if body != nil {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusOK)
		_ = json.NewEncoder(w).Encode(body)
	} else {
		w.WriteHeader(http.StatusOK)
	}
	if f, ok := w.(http.Flusher); ok {
		f.Flush()
	}
}

func (a *Adapter) serveEvents(w http.ResponseWriter, r *http.Request, body []byte) {
	d, err := decodeEvent(body, a.botUserID())
	if err != nil {
		writeErr(w, http.StatusBadRequest, err.Error())
		return
	}
	if d.Challenge != "" {
		ackHTTP(w, map[string]string{"challenge": d.Challenge})
		return
	}
	if a.botUserID() == "" {
		// Without its own user id the bot cannot tell its own mentions
		// from a person's and would take them for commands: refuse (Slack
		// retries) until Identify has run.
		a.log.Error("slack: event refused: the bot's own user id is unknown (Identify has not run)")
		writeErr(w, http.StatusServiceUnavailable, "the bot does not know its own Slack user id yet (auth.test); retry")
		return
	}
	// Decided before the ack, so the 200 of a retry means it did not run.
	again := d.EventID != "" && a.handledBefore(r, "event:"+d.EventID)
	ackHTTP(w, nil)
	if again || d.Command == nil {
		return
	}
	cmd := *d.Command
	a.dispatch(r.Context(), "app mention", func(ctx context.Context, h chat.Handler) error { return h.HandleCommand(ctx, cmd) })
}

func (a *Adapter) serveInteractivity(w http.ResponseWriter, r *http.Request, body []byte) {
	acts, err := decodeInteractionForm(body)
	if err != nil {
		writeErr(w, http.StatusBadRequest, err.Error())
		return
	}
	again := a.handledBefore(r, "trigger:"+triggerID(body))
	ackHTTP(w, nil)
	if again {
		return
	}
	a.dispatchActions(r.Context(), acts)
}

func (a *Adapter) serveCommands(w http.ResponseWriter, r *http.Request, body []byte) {
	cmd, err := decodeSlashForm(body)
	if err != nil {
		writeErr(w, http.StatusBadRequest, err.Error())
		return
	}
	again := a.handledBefore(r, "trigger:"+triggerID(body))
	ackHTTP(w, nil)
	if again {
		return
	}
	a.dispatch(r.Context(), "slash command", func(ctx context.Context, h chat.Handler) error { return h.HandleCommand(ctx, cmd) })
}
