package discord

import (
	"context"
	"crypto/ed25519"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/bwmarrin/discordgo"

	"github.com/talosbot/talosbot/bot/chat"
)

// maxBody bounds interaction payloads; Discord's are a few kilobytes.
const maxBody = 1 << 20

type inputKind int

const (
	inputIgnore inputKind = iota
	inputPing
	inputCommand
	inputAction
)

type input struct {
	kind inputKind
	cmd  chat.Command
	act  chat.Action
}

// decodeInteraction parses an interaction payload (HTTP body or the d of an
// INTERACTION_CREATE dispatch).
func decodeInteraction(body []byte) (*discordgo.Interaction, error) {
	if len(body) > maxBody {
		return nil, errors.New("interaction payload too large")
	}
	var i discordgo.Interaction
	if err := json.Unmarshal(body, &i); err != nil {
		return nil, fmt.Errorf("malformed interaction: %w", err)
	}
	return &i, nil
}

// inputOf says what an interaction asks of the bot. It never panics (it
// does not use discordgo's panicking accessors) and its errors are shown to
// the user.
func inputOf(i *discordgo.Interaction) (input, error) {
	if i == nil {
		return input{}, errors.New("empty interaction")
	}
	switch i.Type {
	case discordgo.InteractionPing:
		return input{kind: inputPing}, nil
	case discordgo.InteractionApplicationCommand, discordgo.InteractionMessageComponent:
	default:
		return input{kind: inputIgnore}, nil
	}
	var user string
	if i.Member != nil && i.Member.User != nil {
		user = i.Member.User.ID
	} else if i.User != nil {
		user = i.User.ID
	}
	if user == "" {
		return input{}, errors.New("interaction has no user")
	}
	if i.ChannelID == "" {
		return input{}, errors.New("interaction has no channel")
	}
	channel := chat.QualifyChannel(chat.PlatformDiscord, i.ChannelID)
	if i.Type == discordgo.InteractionMessageComponent {
		data, ok := i.Data.(discordgo.MessageComponentInteractionData)
		if !ok || data.CustomID == "" {
			return input{}, errors.New("button click without a custom_id")
		}
		if len(data.CustomID) > MaxCustomID {
			return input{}, fmt.Errorf("custom_id longer than %d characters", MaxCustomID)
		}
		if i.Message == nil || i.Message.ID == "" {
			return input{}, errors.New("button click without its message")
		}
		return input{kind: inputAction, act: chat.Action{User: user, Channel: channel, MessageRef: i.Message.ID, ActionID: data.CustomID}}, nil
	}
	data, ok := i.Data.(discordgo.ApplicationCommandInteractionData)
	if !ok {
		return input{}, errors.New("application command without data")
	}
	if data.Name != "talos" {
		return input{}, fmt.Errorf("unknown command %s; talosbot only has /talos", chat.Echo("/"+data.Name))
	}
	var text string
	var found bool
	for _, o := range data.Options {
		if o != nil && o.Name == "command" {
			text, found = o.Value.(string)
		}
	}
	if !found || strings.TrimSpace(text) == "" {
		return input{}, errors.New("usage: /talos command:<command line>, e.g. /talos command:health staging (try /talos command:help)")
	}
	return input{kind: inputCommand, cmd: chat.Command{User: user, Channel: channel, Text: strings.TrimSpace(text)}}, nil
}

// ephemeralResponse answers only the invoking user, immediately.
func ephemeralResponse(text string) *discordgo.InteractionResponse {
	return &discordgo.InteractionResponse{Type: discordgo.InteractionResponseChannelMessageWithSource,
		Data: &discordgo.InteractionResponseData{Content: "talosbot: " + truncate(Escape(text), 1900), Flags: discordgo.MessageFlagsEphemeral,
			AllowedMentions: noMentions()}}
}

// ackResponse is the deferral that acknowledges an input within Discord's 3 s.
func ackResponse(in input) *discordgo.InteractionResponse {
	switch in.kind {
	case inputPing:
		return &discordgo.InteractionResponse{Type: discordgo.InteractionResponsePong}
	case inputCommand:
		// "thinking…", replaced by the command echo once the bot has it.
		return &discordgo.InteractionResponse{Type: discordgo.InteractionResponseDeferredChannelMessageWithSource}
	default:
		// A click: acknowledged without changing the message; the bot
		// edits it through REST.
		return &discordgo.InteractionResponse{Type: discordgo.InteractionResponseDeferredMessageUpdate}
	}
}

// onGatewayInteraction handles INTERACTION_CREATE: acknowledge through the
// callback endpoint first, then run the handler.
func (a *Adapter) onGatewayInteraction(ctx context.Context, i *discordgo.Interaction) {
	in, err := inputOf(i)
	if err != nil {
		if rerr := a.s.InteractionRespond(i, ephemeralResponse(err.Error()), discordgo.WithContext(ctx)); rerr != nil {
			a.log.Warn("discord: answer malformed interaction", "err", rerr)
		}
		return
	}
	if in.kind == inputIgnore || in.kind == inputPing {
		return
	}
	// The gateway is authenticated, but a resumed session may deliver an
	// interaction again; ids share the HTTP endpoint's replay state.
	if i.ID != "" {
		if first, err := a.o.Replays.FirstSeen(ctx, "discord:interaction:"+i.ID, a.o.Clock(), chat.ReplayMemory); err != nil || !first {
			a.log.Warn("discord: interaction already handled or replay state unavailable; not running it again", "id", i.ID, "err", err)
			return
		}
	}
	if err := a.s.InteractionRespond(i, ackResponse(in), discordgo.WithContext(ctx)); err != nil {
		// The user sees "interaction failed"; running anyway would surprise them.
		a.log.Warn("discord: acknowledge interaction failed; not running it", "err", err)
		return
	}
	a.run(ctx, i, in)
}

// run dispatches an acknowledged input. For a command it then replaces the
// deferred "thinking…" response with an echo of the command; everything else
// the bot says goes through ordinary messages (Post/Edit), which outlive the
// 15-minute interaction token.
func (a *Adapter) run(ctx context.Context, i *discordgo.Interaction, in input) {
	h := a.handler()
	if h == nil {
		a.log.Error("discord: no handler connected; dropping input")
		return
	}
	a.work.Add(1)
	go func() {
		defer a.work.Done()
		ctx := context.WithoutCancel(ctx)
		switch in.kind {
		case inputCommand:
			if err := h.HandleCommand(ctx, in.cmd); err != nil {
				a.log.Debug("discord: handler returned an error", "err", err)
			}
			// The command sits in a code span (no mention or link is parsed
			// there) whose backticks it cannot close, cut like every echo.
			echo := fmt.Sprintf("`/talos %s` (<@%s>)", strings.ReplaceAll(truncate(in.cmd.Text, chat.EchoRunes+1), "`", "'"), in.cmd.User)
			if _, err := a.s.InteractionResponseEdit(i, &discordgo.WebhookEdit{Content: &echo, AllowedMentions: noMentions()}, discordgo.WithContext(ctx)); err != nil {
				a.log.Warn("discord: replace deferred response", "err", err)
			}
		case inputAction:
			key := clickKey(in.act.User, in.act.Channel)
			a.mu.Lock()
			if a.clicks == nil {
				a.clicks = map[string]*discordgo.Interaction{}
			}
			a.clicks[key] = i
			a.mu.Unlock()
			if err := h.HandleAction(ctx, in.act); err != nil {
				a.log.Debug("discord: handler returned an error", "err", err)
			}
			a.mu.Lock()
			if a.clicks[key] == i {
				delete(a.clicks, key)
			}
			a.mu.Unlock()
		}
	}()
}

// HTTPHandler serves POST /discord/interactions, the optional outgoing-webhook
// delivery of interactions (set it as the Interactions Endpoint URL). Every
// request must carry a valid Ed25519 signature over timestamp+body
// (X-Signature-Ed25519, X-Signature-Timestamp); otherwise 401 and nothing runs.
// A signed request is also refused (401, audited once per id, answered in its
// channel) when its timestamp is more than chat.ReplayWindow from now in
// either direction, or when its interaction id was already handled within
// chat.ReplayMemory: a captured request cannot be sent again.
func (a *Adapter) HTTPHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /discord/interactions", a.serveInteraction)
	return mux
}

// VerifySignature checks Discord's interaction signature.
func VerifySignature(pub ed25519.PublicKey, header http.Header, body []byte) error {
	sig, err := hex.DecodeString(header.Get("X-Signature-Ed25519"))
	if err != nil || len(sig) != ed25519.SignatureSize {
		return errors.New("missing or malformed X-Signature-Ed25519")
	}
	ts := header.Get("X-Signature-Timestamp")
	if ts == "" {
		return errors.New("missing X-Signature-Timestamp")
	}
	msg := make([]byte, 0, len(ts)+len(body))
	msg = append(append(msg, ts...), body...)
	if !ed25519.Verify(pub, msg, sig) {
		return errors.New("signature does not verify; check chat.discord.public_key")
	}
	return nil
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
	if f, ok := w.(http.Flusher); ok {
		f.Flush()
	}
}

// fresh refuses a signed interaction that is stale or was seen before, and
// answers it itself (false). PINGs are checked for age only: Discord sends
// them to validate the endpoint and they run nothing.
func (a *Adapter) fresh(w http.ResponseWriter, r *http.Request, i *discordgo.Interaction) bool {
	now := a.o.Clock()
	ts, err := strconv.ParseInt(r.Header.Get("X-Signature-Timestamp"), 10, 64)
	if err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "X-Signature-Timestamp is not a unix time"})
		return false
	}
	if d := now.Sub(time.Unix(ts, 0)); d > chat.ReplayWindow || d < -chat.ReplayWindow {
		a.refuseReplay(r.Context(), i, now, fmt.Sprintf("a Discord request stamped %s from now (window ±%s) was refused: a replay, or a clock that is off", d.Truncate(time.Second), chat.ReplayWindow))
		writeJSON(w, http.StatusUnauthorized, map[string]string{"error": "request timestamp outside the replay window"})
		return false
	}
	if i.Type == discordgo.InteractionPing {
		return true
	}
	if i.ID == "" {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "interaction has no id"})
		return false
	}
	first, err := a.o.Replays.FirstSeen(r.Context(), "discord:interaction:"+i.ID, now, chat.ReplayMemory)
	if err != nil {
		// Fail closed: without the replay state nothing signed may run.
		a.log.Error("discord: replay check failed; refusing the interaction", "err", err)
		writeJSON(w, http.StatusServiceUnavailable, map[string]string{"error": "cannot check for replays right now; retry"})
		return false
	}
	if !first {
		a.refuseReplay(r.Context(), i, now, "interaction "+i.ID+" was already handled; a replayed Discord request was refused")
		writeJSON(w, http.StatusUnauthorized, map[string]string{"error": "interaction already handled (replay)"})
		return false
	}
	return true
}

// refuseReplay audits a refused replay through the handler, at most once per
// interaction id per window, so replaying one captured request many times
// cannot flood the audit trail.
func (a *Adapter) refuseReplay(ctx context.Context, i *discordgo.Interaction, now time.Time, reason string) {
	a.log.Warn("discord: refused replayed or stale interaction", "id", i.ID, "reason", reason)
	h := a.handler()
	if h == nil || i.ID == "" {
		return
	}
	if first, err := a.o.Replays.FirstSeen(ctx, "discord:refused:"+i.ID, now, chat.ReplayMemory); err != nil || !first {
		return
	}
	var user, channel string
	if i.Member != nil && i.Member.User != nil {
		user = i.Member.User.ID
	} else if i.User != nil {
		user = i.User.ID
	}
	if i.ChannelID != "" {
		channel = chat.QualifyChannel(chat.PlatformDiscord, i.ChannelID)
	}
	_ = h.HandleRefusal(context.WithoutCancel(ctx), chat.Refusal{User: user, Channel: channel, What: "replay", Reason: reason,
		Detail: map[string]string{"via": "discord", "interaction_id": i.ID}})
}

func (a *Adapter) serveInteraction(w http.ResponseWriter, r *http.Request) {
	if a.pub == nil {
		writeJSON(w, http.StatusServiceUnavailable, map[string]string{"error": "discord interactions endpoint needs chat.discord.public_key"})
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
	if err != nil {
		writeJSON(w, http.StatusRequestEntityTooLarge, map[string]string{"error": "body too large or unreadable"})
		return
	}
	if err := VerifySignature(a.pub, r.Header, body); err != nil {
		a.log.Warn("discord: refused unsigned interaction", "err", err)
		writeJSON(w, http.StatusUnauthorized, map[string]string{"error": "invalid request signature"})
		return
	}
	i, err := decodeInteraction(body)
	if err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": err.Error()})
		return
	}
	if !a.fresh(w, r, i) {
		return
	}
	in, err := inputOf(i)
	if err != nil {
		writeJSON(w, http.StatusOK, ephemeralResponse(err.Error()))
		return
	}
	if in.kind == inputIgnore {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "unsupported interaction type"})
		return
	}
	// The HTTP response is the acknowledgement; it is flushed before any work.
	writeJSON(w, http.StatusOK, ackResponse(in))
	if in.kind != inputPing {
		a.run(r.Context(), i, in)
	}
}
