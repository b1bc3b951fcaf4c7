// Package slack is talosbot's Slack adapter. Socket Mode is the default (an
// outbound websocket, no public endpoint); HTTP mode serves the Events API,
// interactivity and slash-command endpoints with v0 request signing.
//
// Every inbound envelope is acknowledged before any work: the handler runs in
// its own goroutine after the ack, so Slack's 3-second deadline never depends
// on the engine. Messages are rendered as Block Kit; progress edits use
// chat.update and details go in the thread (thread_ts).
package slack

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/slack-go/slack"

	"github.com/talosbot/talosbot/bot/chat"
)

// Mode selects how Slack reaches the bot.
type Mode string

// Modes.
const (
	ModeSocket Mode = "socket" // default: Socket Mode websocket
	ModeHTTP   Mode = "http"   // Events API / interactivity / slash commands over HTTPS
)

// Options configure an Adapter.
type Options struct {
	// BotToken (xoxb-…) calls the Web API. Required.
	BotToken string
	// AppToken (xapp-…, connections:write) opens Socket Mode. Required in socket mode.
	AppToken string
	// SigningSecret verifies HTTP-mode requests. Required in http mode.
	SigningSecret string
	// Mode defaults to ModeSocket.
	Mode Mode
	// APIURL overrides https://slack.com/api/ (tests point it at slackfake).
	APIURL string
	// Handler receives commands and clicks; SetHandler may set it later.
	Handler chat.Handler
	// Clock drives the signature replay window and the dedupe window.
	Clock func() time.Time
	// Replays remembers HTTP-mode request signatures and event/trigger ids
	// (the bot passes its store, so a restart inside the window does not
	// forget); default in memory.
	Replays chat.Replays
	Logger  *slog.Logger
	// HTTPClient for the Web API; defaults to a client with a 30 s timeout.
	HTTPClient *http.Client
}

// Adapter is the Slack chat adapter.
type Adapter struct {
	o     Options
	api   *slack.Client
	log   *slog.Logger
	seen  *dedupe
	hmu   sync.RWMutex
	h     chat.Handler
	work  sync.WaitGroup
	botMu sync.Mutex
	botID string // the bot's own user id, learnt from auth.test, to skip its own mentions
}

var _ chat.Adapter = (*Adapter)(nil)

// New validates o and returns an Adapter. It does no network I/O.
func New(o Options) (*Adapter, error) {
	if o.Mode == "" {
		o.Mode = ModeSocket
	}
	switch o.Mode {
	case ModeSocket:
		if !strings.HasPrefix(o.AppToken, "xapp-") {
			return nil, errors.New("slack: socket mode needs an app-level token (xapp-…, scope connections:write); set chat.slack.app_token or use mode: http")
		}
	case ModeHTTP:
		if o.SigningSecret == "" {
			return nil, errors.New("slack: http mode needs the app's signing secret; set chat.slack.signing_secret")
		}
	default:
		return nil, fmt.Errorf("slack: unknown mode %q; use %q or %q", o.Mode, ModeSocket, ModeHTTP)
	}
	if o.BotToken == "" {
		return nil, errors.New("slack: a bot token (xoxb-…) is required to post messages; set chat.slack.bot_token")
	}
	if o.Clock == nil {
		o.Clock = time.Now
	}
	if o.Replays == nil {
		o.Replays = &chat.MemoryReplays{}
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.HTTPClient == nil {
		o.HTTPClient = &http.Client{Timeout: 30 * time.Second}
	}
	opts := []slack.Option{slack.OptionHTTPClient(o.HTTPClient), slack.OptionLog(log.New(io.Discard, "", 0))}
	if o.AppToken != "" {
		opts = append(opts, slack.OptionAppLevelToken(o.AppToken))
	}
	if o.APIURL != "" {
		u := o.APIURL
		if !strings.HasSuffix(u, "/") {
			u += "/"
		}
		opts = append(opts, slack.OptionAPIURL(u))
	}
	a := &Adapter{o: o, api: slack.New(o.BotToken, opts...), log: o.Logger, seen: newDedupe(4096, 10*time.Minute, o.Clock), h: o.Handler}
	return a, nil
}

// Identify runs auth.test with the bot token and remembers the bot's own
// user id, so that its own mentions are never taken for commands. Run does
// it in socket mode; in http mode the bot calls it before serving
// HTTPHandler, which refuses events until it has succeeded. A failure (a bad
// token) is an error that says what to fix.
func (a *Adapter) Identify(ctx context.Context) error {
	auth, err := a.api.AuthTestContext(ctx)
	if err != nil {
		return fmt.Errorf("slack: auth.test with the bot token failed: %w%s", err, hint(err))
	}
	if auth.UserID == "" {
		return errors.New("slack: auth.test named no user for the bot token; set chat.slack.bot_token to the app's bot token (xoxb-…)")
	}
	a.botMu.Lock()
	a.botID = auth.UserID
	a.botMu.Unlock()
	return nil
}

// SetHandler connects the adapter to the bot (the engine needs the adapter
// for its renderer, so it usually exists after the adapter).
func (a *Adapter) SetHandler(h chat.Handler) {
	a.hmu.Lock()
	defer a.hmu.Unlock()
	a.h = h
}

func (a *Adapter) handler() chat.Handler {
	a.hmu.RLock()
	defer a.hmu.RUnlock()
	return a.h
}

// Wait blocks until handler goroutines started by the adapter have returned.
func (a *Adapter) Wait() { a.work.Wait() }

// dispatch runs fn after the ack, detached from the envelope's lifetime.
func (a *Adapter) dispatch(ctx context.Context, what string, fn func(context.Context, chat.Handler) error) {
	h := a.handler()
	if h == nil {
		a.log.Error("slack: no handler connected; dropping input", "what", what)
		return
	}
	a.work.Add(1)
	go func() {
		defer a.work.Done()
		// The engine answers users itself; an error here is only logged.
		if err := fn(context.WithoutCancel(ctx), h); err != nil {
			a.log.Debug("slack: handler returned an error", "what", what, "err", err)
		}
	}()
}

// channelID strips the "slack:" prefix; a bare id is accepted too.
func channelID(channel string) (string, error) {
	p, id := chat.SplitChannel(channel)
	if p != "" && p != chat.PlatformSlack {
		return "", fmt.Errorf("slack: channel %q belongs to platform %q", channel, p)
	}
	if id == "" {
		return "", fmt.Errorf("slack: empty channel id in %q", channel)
	}
	return id, nil
}

// Post sends the message with chat.postMessage (in the thread when threadRef,
// a message ts, is set) and returns the new message's ts.
func (a *Adapter) Post(ctx context.Context, channel, threadRef string, m chat.Message) (string, error) {
	ch, err := channelID(channel)
	if err != nil {
		return "", err
	}
	opts := []slack.MsgOption{slack.MsgOptionText(fallbackText(m), false), slack.MsgOptionBlocks(Blocks(m)...)}
	if threadRef != "" {
		opts = append(opts, slack.MsgOptionTS(threadRef))
	}
	_, ts, err := a.api.PostMessageContext(ctx, ch, opts...)
	if err != nil {
		return "", fmt.Errorf("slack: chat.postMessage to %s: %w%s", ch, err, hint(err))
	}
	return ts, nil
}

// PostPrivate shows the message to user alone with chat.postEphemeral
// (a click's refusal or a repeated approval concerns the clicker only).
func (a *Adapter) PostPrivate(ctx context.Context, channel, user string, m chat.Message) error {
	ch, err := channelID(channel)
	if err != nil {
		return err
	}
	if _, err := a.api.PostEphemeralContext(ctx, ch, user, slack.MsgOptionText(fallbackText(m), false), slack.MsgOptionBlocks(Blocks(m)...)); err != nil {
		return fmt.Errorf("slack: chat.postEphemeral to %s in %s: %w%s", user, ch, err, hint(err))
	}
	return nil
}

var _ chat.Private = (*Adapter)(nil)

// Edit replaces a message with chat.update.
func (a *Adapter) Edit(ctx context.Context, channel, ref string, m chat.Message) error {
	ch, err := channelID(channel)
	if err != nil {
		return err
	}
	if ref == "" {
		return errors.New("slack: edit needs the message ts")
	}
	// An empty blocks list would keep the old blocks; always send at least one.
	_, _, _, err = a.api.UpdateMessageContext(ctx, ch, ref, slack.MsgOptionText(fallbackText(m), false), slack.MsgOptionBlocks(Blocks(m)...))
	if err != nil {
		return fmt.Errorf("slack: chat.update %s/%s: %w%s", ch, ref, err, hint(err))
	}
	return nil
}

func hint(err error) string {
	switch {
	case strings.Contains(err.Error(), "not_in_channel"), strings.Contains(err.Error(), "channel_not_found"):
		return " (invite the bot to the channel: /invite @talosbot)"
	case strings.Contains(err.Error(), "invalid_auth"), strings.Contains(err.Error(), "not_authed"):
		return " (check chat.slack.bot_token)"
	case strings.Contains(err.Error(), "missing_scope"):
		return " (the app needs the chat:write scope; reinstall it from deploy/slack-app-manifest.yaml)"
	}
	return ""
}

// Block Kit limits (https://api.slack.com/reference/block-kit/blocks).
const (
	maxHeader       = 150
	maxSectionText  = 3000
	maxField        = 2000
	fieldsPerBlock  = 10
	buttonsPerBlock = 25
	maxButtonText   = 75
	maxActionID     = 255
	maxBlocks       = 50
	maxFallback     = 3000
	// A table block holds at most 100 rows and 20 columns, and a message
	// at most one table (https://api.slack.com/reference/block-kit/blocks#table).
	maxTableRows = 100
	maxTableCols = 20
)

// Blocks renders a chat.Message as Block Kit: a header (title), a section
// (text), field sections (ten per block) and action blocks whose buttons carry
// the opaque token as both action_id and value.
func Blocks(m chat.Message) []slack.Block {
	var out []slack.Block
	if t := strings.TrimSpace(m.Title); t != "" {
		out = append(out, slack.NewHeaderBlock(slack.NewTextBlockObject(slack.PlainTextType, truncate(t, maxHeader), true, false)))
	}
	if t := withMentions(strings.TrimSpace(m.Text), m.Mentions, maxSectionText); t != "" {
		out = append(out, slack.NewSectionBlock(slack.NewTextBlockObject(slack.MarkdownType, t, false, true), nil, nil))
	}
	if tb := table(m.Table); tb != nil {
		out = append(out, tb)
	}
	for i := 0; i < len(m.Fields); i += fieldsPerBlock {
		var fs []*slack.TextBlockObject
		for _, f := range m.Fields[i:min(i+fieldsPerBlock, len(m.Fields))] {
			fs = append(fs, slack.NewTextBlockObject(slack.MarkdownType, escapeTruncate("*"+f.Label+"*\n"+f.Value, maxField), false, true))
		}
		out = append(out, slack.NewSectionBlock(nil, fs, nil))
	}
	var buttons []chat.Button
	for _, b := range m.Buttons {
		if b.ActionID != "" && len(b.ActionID) <= maxActionID {
			buttons = append(buttons, b)
		}
	}
	for i := 0; i < len(buttons); i += buttonsPerBlock {
		var els []slack.BlockElement
		for _, b := range buttons[i:min(i+buttonsPerBlock, len(buttons))] {
			label := b.Label
			if label == "" {
				label = "…"
			}
			btn := slack.NewButtonBlockElement(b.ActionID, b.ActionID, slack.NewTextBlockObject(slack.PlainTextType, truncate(label, maxButtonText), true, false))
			switch b.Style {
			case "primary":
				btn = btn.WithStyle(slack.StylePrimary)
			case "danger":
				btn = btn.WithStyle(slack.StyleDanger)
			}
			els = append(els, btn)
		}
		out = append(out, slack.NewActionBlock(fmt.Sprintf("talosbot-actions-%d", i/buttonsPerBlock), els...))
	}
	if len(out) == 0 {
		out = append(out, slack.NewSectionBlock(slack.NewTextBlockObject(slack.PlainTextType, " ", false, false), nil, nil))
	}
	if len(out) > maxBlocks {
		out = out[:maxBlocks]
	}
	return out
}

// table renders a chat.Table as a Block Kit table: the header row in bold
// rich text, then plain-text rows, every row as wide as the header.
func table(t *chat.Table) slack.Block {
	if t == nil || len(t.Columns) == 0 {
		return nil
	}
	cols := t.Columns[:min(len(t.Columns), maxTableCols)]
	tb := slack.NewTableBlock("talosbot-table")
	var head []slack.TableCell
	for _, c := range cols {
		head = append(head, slack.NewTableRichTextCell(slack.NewRichTextSection(
			slack.NewRichTextSectionTextElement(c, &slack.RichTextSectionTextStyle{Bold: true}))))
	}
	tb.AddRow(head...)
	for _, r := range t.Rows[:min(len(t.Rows), maxTableRows-1)] {
		cells := make([]slack.TableCell, len(cols))
		for i := range cols {
			v := "—"
			if i < len(r) && r[i] != "" {
				v = r[i]
			}
			cells[i] = slack.NewTableRawTextCell(v)
		}
		tb.AddRow(cells...)
	}
	return tb
}

// fallbackText is the notification/accessibility text sent beside the blocks.
func fallbackText(m chat.Message) string {
	s := strings.TrimSpace(strings.TrimSpace(m.Title) + "\n" + m.Text)
	if s == "" && len(m.Mentions) == 0 {
		s = "talosbot"
	}
	return withMentions(s, m.Mentions, maxFallback)
}

// Escape is Slack's escaping of text
// (https://api.slack.com/reference/surfaces/formatting#escaping): '&', '<'
// and '>' become &amp; &lt; &gt;, nothing else. Every mrkdwn field the
// adapter sends goes through it (the section text, each field, the
// notification text, an ephemeral answer), so no text the bot shows (a
// cluster name someone typed, a freeze reason, an alert's labels) can become
// <!here>, <!channel>, <@U…> or a disguised <url|label> link. The bot's own
// markup (*bold*, _italic_, `code`) uses none of the three, so it still works.
// Plain-text objects (the header, button labels, table cells) are not
// parsed by Slack and are sent as they are.
func Escape(s string) string { return escaper.Replace(s) }

var escaper = strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;")

// escapeTruncate escapes s, then cuts it to n runes without splitting an
// entity (a cut "&am" would show as text).
func escapeTruncate(s string, n int) string {
	e := Escape(s)
	if utf8.RuneCountInString(e) <= n {
		return e
	}
	cut := string([]rune(e)[:n-1])
	if i := strings.LastIndexByte(cut, '&'); i >= 0 && !strings.Contains(cut[i:], ";") {
		cut = cut[:i]
	}
	return cut + "…"
}

func truncate(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n-1]) + "…"
}
