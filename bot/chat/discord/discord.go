// Package discord is talosbot's Discord adapter: a gateway session (via
// discordgo) receives interactions, the bot registers one /talos application
// command, and messages are ordinary bot messages with an embed and buttons,
// created and edited through REST. Interaction tokens expire after 15
// minutes, so the interaction itself is only acknowledged (deferred) and the
// long-lived operation message never depends on it.
package discord

import (
	"context"
	"crypto/ed25519"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/bwmarrin/discordgo"

	"github.com/talosbot/talosbot/bot/chat"
)

// Options configure an Adapter.
type Options struct {
	// Token is the bot token (without the "Bot " prefix). Required.
	Token string
	// ApplicationID registers the command; when empty it is learnt from READY.
	ApplicationID string
	// PublicKey (hex) verifies the optional HTTP interactions endpoint.
	PublicKey string
	// GuildID registers /talos in one guild (instant) instead of globally.
	GuildID string
	// APIURL replaces https://discord.com/ for REST (tests: discordfake).
	APIURL string
	// GatewayURL replaces the gateway URL Discord's REST would hand out.
	GatewayURL string
	// Handler receives commands and clicks; SetHandler may set it later.
	Handler chat.Handler
	Logger  *slog.Logger
	// HTTPClient is the base client for REST; APIURL rewriting wraps it.
	HTTPClient *http.Client
	// Clock drives the HTTP endpoint's replay window; default time.Now.
	Clock func() time.Time
	// Replays remembers interaction ids seen by the HTTP endpoint (the bot
	// passes its store, so a restart does not forget); default in memory.
	Replays chat.Replays
}

// Adapter is the Discord chat adapter.
type Adapter struct {
	o    Options
	s    *discordgo.Session
	log  *slog.Logger
	pub  ed25519.PublicKey
	work sync.WaitGroup

	mu      sync.RWMutex
	h       chat.Handler
	appID   string
	threads map[string]bool // parent message ids whose thread exists
	// clicks are the interactions of the clicks being handled now, by user
	// and channel: an answer to one of them goes to the clicker alone, as
	// an ephemeral follow-up on its token (PostPrivate).
	clicks map[string]*discordgo.Interaction
}

var _ chat.Adapter = (*Adapter)(nil)

// New validates o and builds the session; it does no network I/O.
func New(o Options) (*Adapter, error) {
	if o.Token == "" {
		return nil, errors.New("discord: a bot token is required; set chat.discord.token")
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Clock == nil {
		o.Clock = time.Now
	}
	if o.Replays == nil {
		o.Replays = &chat.MemoryReplays{}
	}
	var pub ed25519.PublicKey
	if o.PublicKey != "" {
		k, err := hex.DecodeString(o.PublicKey)
		if err != nil || len(k) != ed25519.PublicKeySize {
			return nil, errors.New("discord: public_key must be the application's 64-hex-digit Ed25519 public key (Developer Portal → General Information)")
		}
		pub = k
	}
	s, err := discordgo.New("Bot " + o.Token)
	if err != nil {
		return nil, fmt.Errorf("discord: session: %w", err)
	}
	base := o.HTTPClient
	if base == nil {
		base = &http.Client{Timeout: 30 * time.Second}
	}
	client := *base
	next := client.Transport
	if next == nil {
		next = http.DefaultTransport
	}
	rt := &rewrite{next: next, gateway: o.GatewayURL}
	if o.APIURL != "" {
		u, err := url.Parse(o.APIURL)
		if err != nil || u.Host == "" {
			return nil, fmt.Errorf("discord: APIURL %q is not an absolute URL", o.APIURL)
		}
		rt.base = u
	}
	client.Transport = rt
	s.Client = &client
	s.LogLevel = -1 // discordgo logs through the standard logger; keep it quiet
	s.Identify.Intents = discordgo.IntentsGuilds
	s.StateEnabled = false
	a := &Adapter{o: o, s: s, log: o.Logger, pub: pub, h: o.Handler, appID: o.ApplicationID, threads: map[string]bool{}}
	return a, nil
}

// rewrite points discordgo's fixed https://discord.com/ endpoints at
// APIURL without touching discordgo's package-level endpoint variables, and
// answers gateway discovery with GatewayURL when set.
type rewrite struct {
	base    *url.URL
	gateway string
	next    http.RoundTripper
}

func (r *rewrite) RoundTrip(req *http.Request) (*http.Response, error) {
	if r.gateway != "" && req.Method == http.MethodGet && strings.HasSuffix(req.URL.Path, "/gateway") {
		body := fmt.Sprintf(`{"url":%q}`, r.gateway)
		return &http.Response{StatusCode: 200, Status: "200 OK", Header: http.Header{"Content-Type": {"application/json"}},
			Body: io.NopCloser(strings.NewReader(body)), Request: req, ContentLength: int64(len(body))}, nil
	}
	if r.base != nil && req.URL.Host == "discord.com" {
		req = req.Clone(req.Context())
		req.URL.Scheme, req.URL.Host = r.base.Scheme, r.base.Host
		req.URL.Path = strings.TrimSuffix(r.base.Path, "/") + req.URL.Path
		req.Host = r.base.Host
	}
	return r.next.RoundTrip(req)
}

// SetHandler connects the adapter to the bot.
func (a *Adapter) SetHandler(h chat.Handler) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.h = h
}

func (a *Adapter) handler() chat.Handler {
	a.mu.RLock()
	defer a.mu.RUnlock()
	return a.h
}

func (a *Adapter) applicationID() string {
	a.mu.RLock()
	defer a.mu.RUnlock()
	return a.appID
}

// Wait blocks until handler goroutines started by the adapter have returned.
func (a *Adapter) Wait() { a.work.Wait() }

// Command is the one application command talosbot registers: /talos with a
// required free-form string option "command" holding the rest of the line
// (e.g. "upgrade talos v1.13.9 staging"). See docs/CHAT.md for why.
func Command() *discordgo.ApplicationCommand {
	return &discordgo.ApplicationCommand{
		Name:        "talos",
		Type:        discordgo.ChatApplicationCommand,
		Description: "Run a talosbot command (try: help)",
		Options: []*discordgo.ApplicationCommandOption{{
			Type:        discordgo.ApplicationCommandOptionString,
			Name:        "command",
			Description: "The command line, e.g. health staging — same grammar as Slack and the console",
			Required:    true,
			MaxLength:   1000,
		}},
	}
}

// Run opens the gateway, registers /talos and serves until ctx ends.
func (a *Adapter) Run(ctx context.Context) error {
	ready := make(chan *discordgo.Ready, 1)
	remove := []func(){
		a.s.AddHandler(func(_ *discordgo.Session, r *discordgo.Ready) {
			select {
			case ready <- r:
			default:
			}
		}),
		a.s.AddHandler(func(_ *discordgo.Session, ic *discordgo.InteractionCreate) {
			a.onGatewayInteraction(ctx, ic.Interaction)
		}),
	}
	defer func() {
		for _, f := range remove {
			f()
		}
	}()
	if err := a.s.Open(); err != nil {
		return fmt.Errorf("discord: open gateway: %w%s", err, hint(err))
	}
	defer func() { _ = a.s.Close() }()
	select {
	case r := <-ready:
		a.mu.Lock()
		if a.appID == "" {
			if r.Application != nil && r.Application.ID != "" {
				a.appID = r.Application.ID
			} else if r.User != nil {
				a.appID = r.User.ID
			}
		}
		a.mu.Unlock()
	case <-ctx.Done():
		return nil
	}
	if err := a.Register(ctx); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	a.log.Info("discord: gateway connected and /talos registered", "guild", a.o.GuildID)
	<-ctx.Done()
	return nil
}

// Register (re)declares /talos with a bulk overwrite, which is idempotent:
// Discord keeps the command id when nothing changed.
func (a *Adapter) Register(ctx context.Context) error {
	app := a.applicationID()
	if app == "" {
		return errors.New("discord: application id unknown; set chat.discord.application_id")
	}
	if _, err := a.s.ApplicationCommandBulkOverwrite(app, a.o.GuildID, []*discordgo.ApplicationCommand{Command()}, discordgo.WithContext(ctx)); err != nil {
		return fmt.Errorf("discord: register /talos: %w%s", err, hint(err))
	}
	return nil
}

func hint(err error) string {
	var re *discordgo.RESTError
	if errors.As(err, &re) && re.Response != nil {
		switch re.Response.StatusCode {
		case http.StatusUnauthorized:
			return " (check chat.discord.token)"
		case http.StatusForbidden:
			return " (invite the bot with the bot and applications.commands scopes and let it send messages in the channel)"
		}
	}
	return ""
}

// channelID strips the "discord:" prefix; a bare id is accepted too.
func channelID(channel string) (string, error) {
	p, id := chat.SplitChannel(channel)
	if p != "" && p != chat.PlatformDiscord {
		return "", fmt.Errorf("discord: channel %q belongs to platform %q", channel, p)
	}
	if id == "" {
		return "", fmt.Errorf("discord: empty channel id in %q", channel)
	}
	return id, nil
}

// Post creates an ordinary bot message. With threadRef (a message id), the
// message goes into the thread started from that message (creating it on
// first use) and its ref is "<thread id>/<message id>".
func (a *Adapter) Post(ctx context.Context, channel, threadRef string, m chat.Message) (string, error) {
	ch, err := channelID(channel)
	if err != nil {
		return "", err
	}
	send, err := render(m)
	if err != nil {
		return "", err
	}
	target := ch
	if threadRef != "" {
		parent := threadRef
		if i := strings.LastIndexByte(parent, '/'); i >= 0 {
			target = threadRef[:i] // a reply to a reply goes to the same thread
		} else {
			if err := a.ensureThread(ctx, ch, parent); err != nil {
				return "", err
			}
			target = parent // a thread started from a message has the message's id
		}
	}
	msg, err := a.s.ChannelMessageSendComplex(target, &discordgo.MessageSend{
		Content: send.content, Embeds: send.embeds, Components: send.components,
		AllowedMentions: send.allowed,
	}, discordgo.WithContext(ctx))
	if err != nil {
		return "", fmt.Errorf("discord: create message in %s: %w%s", target, err, hint(err))
	}
	if threadRef != "" {
		return target + "/" + msg.ID, nil
	}
	return msg.ID, nil
}

// Edit replaces a message's content, embed and buttons.
func (a *Adapter) Edit(ctx context.Context, channel, ref string, m chat.Message) error {
	ch, err := channelID(channel)
	if err != nil {
		return err
	}
	if ref == "" {
		return errors.New("discord: edit needs a message id")
	}
	if i := strings.LastIndexByte(ref, '/'); i >= 0 {
		ch, ref = ref[:i], ref[i+1:]
	}
	send, err := render(m)
	if err != nil {
		return err
	}
	content := send.content
	embeds := send.embeds
	if embeds == nil {
		embeds = []*discordgo.MessageEmbed{}
	}
	components := send.components
	if components == nil {
		components = []discordgo.MessageComponent{} // clears old buttons
	}
	_, err = a.s.ChannelMessageEditComplex(&discordgo.MessageEdit{ID: ref, Channel: ch, Content: &content, Embeds: &embeds,
		Components: &components, AllowedMentions: send.allowed}, discordgo.WithContext(ctx))
	if err != nil {
		return fmt.Errorf("discord: edit message %s/%s: %w%s", ch, ref, err, hint(err))
	}
	return nil
}

// errThreadExists is Discord's "A thread has already been created for this
// message" code.
const errThreadExists = 160004

func (a *Adapter) ensureThread(ctx context.Context, ch, parent string) error {
	a.mu.RLock()
	ok := a.threads[parent]
	a.mu.RUnlock()
	if ok {
		return nil
	}
	_, err := a.s.MessageThreadStartComplex(ch, parent, &discordgo.ThreadStart{Name: "talosbot details", AutoArchiveDuration: 1440, Type: discordgo.ChannelTypeGuildPublicThread}, discordgo.WithContext(ctx))
	var re *discordgo.RESTError
	if err != nil && !(errors.As(err, &re) && re.Message != nil && re.Message.Code == errThreadExists) {
		return fmt.Errorf("discord: start thread on %s/%s: %w%s", ch, parent, err, hint(err))
	}
	a.mu.Lock()
	if len(a.threads) > 10000 { // bounded: forgetting only costs one more create call
		a.threads = map[string]bool{}
	}
	a.threads[parent] = true
	a.mu.Unlock()
	return nil
}

func clickKey(user, channel string) string { return user + "\x00" + channel }

// PostPrivate answers the click user is making in channel with an ephemeral
// follow-up (only the clicker sees it). Outside a click there is no token
// to answer on: chat.ErrNoPrivate, and the renderer posts in the channel.
func (a *Adapter) PostPrivate(ctx context.Context, channel, user string, m chat.Message) error {
	a.mu.RLock()
	i := a.clicks[clickKey(user, channel)]
	a.mu.RUnlock()
	if i == nil {
		return chat.ErrNoPrivate
	}
	text := escapeTruncate(strings.TrimSpace(strings.TrimSpace(m.Title)+"\n"+m.Text), maxContent)
	_, err := a.s.FollowupMessageCreate(i, true, &discordgo.WebhookParams{Content: text, Flags: discordgo.MessageFlagsEphemeral,
		AllowedMentions: noMentions()}, discordgo.WithContext(ctx))
	if err != nil {
		return fmt.Errorf("discord: ephemeral follow-up to %s: %w%s", user, err, hint(err))
	}
	return nil
}

var _ chat.Private = (*Adapter)(nil)

// Discord limits (https://discord.com/developers/docs/resources/message).
const (
	MaxCustomID    = 100
	maxContent     = 2000
	maxEmbedTitle  = 256
	maxEmbedDesc   = 4096
	maxEmbedFields = 25
	maxFieldName   = 256
	maxFieldValue  = 1024
	maxButtonLabel = 80
	buttonsPerRow  = 5
	maxRows        = 5
)

type rendered struct {
	content    string
	embeds     []*discordgo.MessageEmbed
	components []discordgo.MessageComponent
	// allowed pings the message's Mentions and no one else.
	allowed *discordgo.MessageAllowedMentions
}

// render turns a chat.Message into Discord's shape: plain text replies stay
// plain content; anything with a title or fields becomes one embed; buttons
// become rows of five whose custom_id is the opaque token. Every text
// Discord parses (content, description, field names and values) goes
// through Escape; the table sits in a code block whose fence its cells
// cannot close.
func render(m chat.Message) (rendered, error) {
	var r rendered
	// Mentions go in the content: Discord pings no one from an embed.
	line, allowed := mentions(m.Mentions)
	r.allowed = allowed
	if strings.TrimSpace(m.Title) == "" && len(m.Fields) == 0 && m.Table == nil {
		r.content = escapeTruncate(m.Text, max(maxContent-utf8.RuneCountInString(line)-1, 1))
		if line != "" {
			r.content = strings.TrimSpace(r.content + "\n" + line)
		}
		if strings.TrimSpace(r.content) == "" && len(m.Buttons) == 0 {
			r.content = "…" // Discord refuses an empty message
		}
	} else {
		desc := escapeTruncate(m.Text, maxEmbedDesc)
		if t := strings.ReplaceAll(m.Table.Aligned(), "`", "'"); t != "" {
			// Discord has no tables: a monospace block keeps the columns.
			// The table is cut, never the fence, so the block stays closed.
			room := maxEmbedDesc - utf8.RuneCountInString(desc) - len("\n```\n\n```")
			if room > 40 {
				desc = strings.TrimSpace(desc + "\n```\n" + truncate(t, room) + "\n```")
			}
		}
		e := &discordgo.MessageEmbed{Title: truncate(m.Title, maxEmbedTitle), Description: truncate(desc, maxEmbedDesc)}
		for _, f := range m.Fields[:min(len(m.Fields), maxEmbedFields)] {
			name, value := escapeTruncate(f.Label, maxFieldName), escapeTruncate(f.Value, maxFieldValue)
			if strings.TrimSpace(name) == "" {
				name = "\u200b"
			}
			if strings.TrimSpace(value) == "" {
				value = "—"
			}
			e.Fields = append(e.Fields, &discordgo.MessageEmbedField{Name: name, Value: value, Inline: true})
		}
		r.embeds = []*discordgo.MessageEmbed{e}
		r.content = line
	}
	if len(m.Buttons) > buttonsPerRow*maxRows {
		return r, fmt.Errorf("discord: %d buttons; a message holds at most %d", len(m.Buttons), buttonsPerRow*maxRows)
	}
	var row []discordgo.MessageComponent
	for i, b := range m.Buttons {
		if b.ActionID == "" || len(b.ActionID) > MaxCustomID {
			return r, fmt.Errorf("discord: button %q has a %d-byte action id; Discord custom_id must be 1..%d bytes (keep tokens short)", b.Label, len(b.ActionID), MaxCustomID)
		}
		label := truncate(b.Label, maxButtonLabel)
		if label == "" {
			label = "…"
		}
		style := discordgo.SecondaryButton
		switch b.Style {
		case "primary":
			style = discordgo.PrimaryButton
		case "danger":
			style = discordgo.DangerButton
		}
		row = append(row, discordgo.Button{Label: label, Style: style, CustomID: b.ActionID})
		if len(row) == buttonsPerRow || i == len(m.Buttons)-1 {
			r.components = append(r.components, discordgo.ActionsRow{Components: row})
			row = nil
		}
	}
	return r, nil
}

// escapeTruncate escapes s (Escape) cut to at most n runes. It cuts the
// text, then escapes it: escaping first and cutting after could cut off the
// backticks that close a code span, whose text Escape leaves as it is, and
// Discord would then show the masked link or mention in it.
func escapeTruncate(s string, n int) string {
	if e := Escape(s); utf8.RuneCountInString(e) <= n {
		return e
	}
	r := []rune(s)
	keep := min(len(r), n-1)
	for {
		e := Escape(string(r[:keep]))
		over := utf8.RuneCountInString(e) - (n - 1)
		if over <= 0 {
			return e + "…"
		}
		keep = max(keep-over, 0) // escaping only adds, so this ends
	}
}

func truncate(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	return string([]rune(s)[:n-1]) + "…"
}
