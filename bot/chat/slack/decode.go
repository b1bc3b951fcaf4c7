package slack

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strings"

	"github.com/slack-go/slack"

	"github.com/talosbot/talosbot/bot/chat"
)

// The decoders below are shared by Socket Mode (JSON payloads inside
// envelopes) and HTTP mode (form bodies). They never panic and return errors
// that say what was missing.

// maxPayload bounds what is decoded; Slack's own payloads are far smaller.
const maxPayload = 1 << 20

// commandFromSlash converts a slash-command payload. The text after the
// command (e.g. "health staging") is what the bot's grammar parses.
func commandFromSlash(s slack.SlashCommand) (chat.Command, error) {
	switch {
	case s.UserID == "":
		return chat.Command{}, errors.New("slash command payload has no user_id")
	case s.ChannelID == "":
		return chat.Command{}, errors.New("slash command payload has no channel_id")
	}
	return chat.Command{User: s.UserID, Channel: chat.QualifyChannel(chat.PlatformSlack, s.ChannelID), Text: strings.TrimSpace(s.Text)}, nil
}

// decodeSlashJSON decodes a Socket Mode slash_commands payload.
func decodeSlashJSON(payload []byte) (chat.Command, error) {
	if len(payload) > maxPayload {
		return chat.Command{}, errors.New("slash command payload too large")
	}
	var s slack.SlashCommand
	if err := json.Unmarshal(payload, &s); err != nil {
		return chat.Command{}, fmt.Errorf("malformed slash command payload: %w", err)
	}
	return commandFromSlash(s)
}

// decodeSlashForm decodes an HTTP-mode slash command body
// (application/x-www-form-urlencoded).
func decodeSlashForm(body []byte) (chat.Command, error) {
	if len(body) > maxPayload {
		return chat.Command{}, errors.New("slash command body too large")
	}
	v, err := url.ParseQuery(string(body))
	if err != nil {
		return chat.Command{}, fmt.Errorf("malformed slash command form: %w", err)
	}
	return commandFromSlash(slack.SlashCommand{UserID: v.Get("user_id"), ChannelID: v.Get("channel_id"), Text: v.Get("text"), Command: v.Get("command")})
}

// decodeInteractionJSON decodes an interactive payload; only block_actions
// (button clicks) become Actions, other interaction types yield none.
func decodeInteractionJSON(payload []byte) ([]chat.Action, error) {
	if len(payload) > maxPayload {
		return nil, errors.New("interaction payload too large")
	}
	var cb slack.InteractionCallback
	if err := json.Unmarshal(payload, &cb); err != nil {
		return nil, fmt.Errorf("malformed interaction payload: %w", err)
	}
	if cb.Type != slack.InteractionTypeBlockActions {
		return nil, nil
	}
	user := cb.User.ID
	channel := cb.Channel.ID
	if channel == "" {
		channel = cb.Container.ChannelID
	}
	ts := cb.Container.MessageTs
	if ts == "" {
		ts = cb.Message.Timestamp
	}
	switch {
	case user == "":
		return nil, errors.New("block_actions payload has no user.id")
	case channel == "":
		return nil, errors.New("block_actions payload has no channel.id")
	}
	var out []chat.Action
	for _, ba := range cb.ActionCallback.BlockActions {
		if ba == nil {
			continue
		}
		tok := ba.ActionID
		if tok == "" {
			tok = ba.Value
		}
		if tok == "" {
			continue
		}
		out = append(out, chat.Action{User: user, Channel: chat.QualifyChannel(chat.PlatformSlack, channel), MessageRef: ts, ActionID: tok})
	}
	if len(out) == 0 {
		return nil, errors.New("block_actions payload has no action_id")
	}
	return out, nil
}

// decodeInteractionForm decodes an HTTP-mode interactivity body (payload=JSON).
func decodeInteractionForm(body []byte) ([]chat.Action, error) {
	if len(body) > maxPayload {
		return nil, errors.New("interaction body too large")
	}
	v, err := url.ParseQuery(string(body))
	if err != nil {
		return nil, fmt.Errorf("malformed interactivity form: %w", err)
	}
	p := v.Get("payload")
	if p == "" {
		return nil, errors.New("interactivity form has no payload field")
	}
	return decodeInteractionJSON([]byte(p))
}

// eventPayload is the part of an Events API payload the bot uses.
type eventPayload struct {
	Type      string `json:"type"`
	Challenge string `json:"challenge"`
	EventID   string `json:"event_id"`
	Event     struct {
		Type    string `json:"type"`
		User    string `json:"user"`
		Text    string `json:"text"`
		Channel string `json:"channel"`
		BotID   string `json:"bot_id"`
	} `json:"event"`
}

// decodedEvent is what an Events API payload means to the bot.
type decodedEvent struct {
	Challenge string        // url_verification: echo it
	EventID   string        // for dedupe
	Command   *chat.Command // app_mention from a person
}

// decodeEvent decodes an Events API payload (HTTP body or Socket Mode
// events_api payload). Events other than app_mention yield no command.
func decodeEvent(payload []byte, botUserID string) (decodedEvent, error) {
	if len(payload) > maxPayload {
		return decodedEvent{}, errors.New("event payload too large")
	}
	var p eventPayload
	if err := json.Unmarshal(payload, &p); err != nil {
		return decodedEvent{}, fmt.Errorf("malformed event payload: %w", err)
	}
	switch p.Type {
	case "url_verification":
		if p.Challenge == "" {
			return decodedEvent{}, errors.New("url_verification without challenge")
		}
		return decodedEvent{Challenge: p.Challenge}, nil
	case "event_callback":
	default:
		return decodedEvent{}, fmt.Errorf("unsupported Events API payload type %q", p.Type)
	}
	d := decodedEvent{EventID: p.EventID}
	e := p.Event
	if e.Type != "app_mention" || e.BotID != "" || e.User == "" || (botUserID != "" && e.User == botUserID) {
		return d, nil // not for us (or the bot itself): acknowledged and ignored
	}
	if e.Channel == "" {
		return decodedEvent{}, errors.New("app_mention event has no channel")
	}
	d.Command = &chat.Command{User: e.User, Channel: chat.QualifyChannel(chat.PlatformSlack, e.Channel), Text: stripMention(e.Text, botUserID)}
	return d, nil
}

// stripMention drops everything up to and including the bot's own mention,
// so "hey <@U0BOT> health staging" becomes "health staging", and
// "<@U0BOB> <@U0BOT> health staging" is not read from bob's mention on. With
// the bot's id unknown (or not mentioned as such) it falls back to the first
// user mention.
func stripMention(text, botUserID string) string {
	if botUserID != "" {
		for _, own := range []string{"<@" + botUserID + ">", "<@" + botUserID + "|"} {
			if i := strings.Index(text, own); i >= 0 {
				if j := strings.IndexByte(text[i:], '>'); j >= 0 {
					return strings.TrimSpace(text[i+j+1:])
				}
			}
		}
	}
	if i := strings.Index(text, "<@"); i >= 0 {
		if j := strings.IndexByte(text[i:], '>'); j >= 0 {
			return strings.TrimSpace(text[i+j+1:])
		}
	}
	return strings.TrimSpace(text)
}
