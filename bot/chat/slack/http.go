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
	"strconv"
	"time"

	"github.com/talosbot/talosbot/bot/chat"
)

// ReplayWindow is how far a signed request's timestamp may be from now.
const ReplayWindow = 5 * time.Minute

// HTTPHandler serves Slack's HTTP delivery (mode: http):
//
//	POST /slack/events         Events API (url_verification, app_mention)
//	POST /slack/interactivity  block_actions (button clicks)
//	POST /slack/commands       the /talos slash command
//
// Every request must carry a valid v0 signature within ReplayWindow;
// otherwise it gets 401 and nothing runs. The 200 is written before any work.
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
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxPayload))
		if err != nil {
			writeErr(w, http.StatusRequestEntityTooLarge, "request body too large or unreadable")
			return
		}
		if err := VerifySignature(a.o.SigningSecret, r.Header, body, a.o.Clock()); err != nil {
			a.log.Warn("slack: refused unsigned or stale request", "path", r.URL.Path, "err", err)
			writeErr(w, http.StatusUnauthorized, "invalid Slack request signature")
			return
		}
		next(w, r, body)
	}
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
	ackHTTP(w, nil)
	if !a.seen.firstTime("evt:"+d.EventID) || d.Command == nil {
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
	ackHTTP(w, nil)
	a.dispatchActions(r.Context(), acts)
}

func (a *Adapter) serveCommands(w http.ResponseWriter, r *http.Request, body []byte) {
	cmd, err := decodeSlashForm(body)
	if err != nil {
		writeErr(w, http.StatusBadRequest, err.Error())
		return
	}
	ackHTTP(w, nil)
	a.dispatch(r.Context(), "slash command", func(ctx context.Context, h chat.Handler) error { return h.HandleCommand(ctx, cmd) })
}
