package slack

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"

	"github.com/slack-go/slack/socketmode"

	"github.com/talosbot/talosbot/bot/chat"
)

// Run connects and serves until ctx ends. In socket mode it opens the Socket
// Mode websocket (reconnecting as Slack asks); in http mode it only checks the
// bot token and waits, since HTTPHandler does the serving.
func (a *Adapter) Run(ctx context.Context) error {
	auth, err := a.api.AuthTestContext(ctx)
	if err != nil {
		return fmt.Errorf("slack: auth.test with the bot token failed: %w%s", err, hint(err))
	}
	a.botMu.Lock()
	a.botID = auth.UserID
	a.botMu.Unlock()
	if a.o.Mode == ModeHTTP {
		<-ctx.Done()
		return nil
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	sm := socketmode.New(a.api, socketmode.OptionLog(log.New(io.Discard, "", 0)))
	errc := make(chan error, 1)
	go func() { errc <- sm.RunContext(ctx) }()
	for {
		select {
		case err := <-errc:
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("slack: socket mode: %w%s", err, hint(err))
		case evt := <-sm.Events:
			a.onSocketEvent(ctx, sm, evt)
		}
	}
}

func (a *Adapter) botUserID() string {
	a.botMu.Lock()
	defer a.botMu.Unlock()
	return a.botID
}

// acker is the part of the socketmode client used to acknowledge envelopes.
type acker interface {
	AckCtx(ctx context.Context, envelopeID string, payload any) error
}

// onSocketEvent acknowledges an envelope first and then hands the work to a
// goroutine; it must stay fast, since it runs on the single event loop.
func (a *Adapter) onSocketEvent(ctx context.Context, sm acker, evt socketmode.Event) {
	switch evt.Type {
	case socketmode.EventTypeConnected:
		a.log.Info("slack: socket mode connected")
		return
	case socketmode.EventTypeConnectionError, socketmode.EventTypeInvalidAuth, socketmode.EventTypeIncomingError:
		a.log.Warn("slack: socket mode connection problem", "event", string(evt.Type))
		return
	case socketmode.EventTypeErrorBadMessage:
		// The client could not parse the envelope; ack it anyway so Slack
		// does not redeliver a payload that can never succeed.
		bad, _ := evt.Data.(*socketmode.ErrorBadMessage)
		if bad == nil {
			return
		}
		var env struct {
			EnvelopeID string `json:"envelope_id"`
			Type       string `json:"type"`
		}
		if json.Unmarshal(bad.Message, &env) == nil && env.EnvelopeID != "" {
			var payload any
			if env.Type == socketmode.RequestTypeSlashCommands {
				payload = ephemeral("talosbot could not read this command; please retry")
			}
			a.ack(ctx, sm, env.EnvelopeID, payload)
		}
		a.log.Warn("slack: malformed socket mode envelope", "err", bad.Cause)
		return
	}
	req := evt.Request
	if req == nil || req.EnvelopeID == "" {
		return
	}
	switch evt.Type {
	case socketmode.EventTypeSlashCommand:
		cmd, err := decodeSlashJSON(req.Payload)
		if err != nil {
			a.ack(ctx, sm, req.EnvelopeID, ephemeral("talosbot could not read this command: "+err.Error()))
			return
		}
		a.ack(ctx, sm, req.EnvelopeID, nil)
		if !a.seen.firstTime("env:" + req.EnvelopeID) {
			return
		}
		a.dispatch(ctx, "slash command", func(ctx context.Context, h chat.Handler) error { return h.HandleCommand(ctx, cmd) })
	case socketmode.EventTypeEventsAPI:
		a.ack(ctx, sm, req.EnvelopeID, nil)
		d, err := decodeEvent(req.Payload, a.botUserID())
		if err != nil {
			a.log.Warn("slack: malformed events_api payload", "err", err)
			return
		}
		// Both ids: a retried envelope may carry a new envelope_id but the
		// same event_id.
		if !a.seen.firstTime("env:"+req.EnvelopeID) || !a.seen.firstTime("evt:"+d.EventID) || d.Command == nil {
			return
		}
		cmd := *d.Command
		a.dispatch(ctx, "app mention", func(ctx context.Context, h chat.Handler) error { return h.HandleCommand(ctx, cmd) })
	case socketmode.EventTypeInteractive:
		a.ack(ctx, sm, req.EnvelopeID, nil)
		acts, err := decodeInteractionJSON(req.Payload)
		if err != nil {
			a.log.Warn("slack: malformed interactive payload", "err", err)
			return
		}
		if !a.seen.firstTime("env:" + req.EnvelopeID) {
			return
		}
		a.dispatchActions(ctx, acts)
	default:
		// hello, disconnect (handled by the client) and future types.
		if evt.Type != socketmode.EventTypeHello {
			a.ack(ctx, sm, req.EnvelopeID, nil)
		}
	}
}

func (a *Adapter) dispatchActions(ctx context.Context, acts []chat.Action) {
	for _, act := range acts {
		a.dispatch(ctx, "button click", func(ctx context.Context, h chat.Handler) error { return h.HandleAction(ctx, act) })
	}
}

func (a *Adapter) ack(ctx context.Context, sm acker, envelopeID string, payload any) {
	if err := sm.AckCtx(ctx, envelopeID, payload); err != nil && !errors.Is(err, context.Canceled) {
		a.log.Warn("slack: ack failed", "envelope", envelopeID, "err", err)
	}
}

// ephemeral is a slash-command response only the invoking user sees.
func ephemeral(text string) map[string]string {
	return map[string]string{"response_type": "ephemeral", "text": text}
}
