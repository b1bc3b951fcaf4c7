// Package chat is the platform-neutral message model and the interface every
// chat adapter (Slack, Discord, the web console) implements. Adapters turn
// platform events into Commands and Actions and render Messages; they know
// nothing about Talos or Kubernetes.
package chat

import (
	"context"
	"strings"
	"time"
	"unicode/utf8"
)

// Command is a typed command line from a user in a channel.
type Command struct {
	User    string
	Channel string
	Text    string
}

// Action is a button click. ActionID is the opaque token the button carried.
type Action struct {
	User       string
	Channel    string
	MessageRef string
	ActionID   string
}

// Field is a label/value pair shown under a message's text.
type Field struct {
	Label string `json:"label"`
	Value string `json:"value"`
}

// Button is a clickable action on a message.
type Button struct {
	ActionID string `json:"action_id"`
	Label    string `json:"label"`
	Style    string `json:"style,omitempty"`
}

// Message is one chat message: an operation's live message, a thread reply or
// a plain answer.
//
// Its text is plain text with the bot's light markup: *bold*, _italic_,
// ~strike~, `code` and ``` blocks, nothing else. In particular it has no
// link, mention or HTML syntax: every '<', '>' and '&' in every field is a
// literal character, and a URL is shown as itself. The bot builds its text
// from user, alert and cluster words (a cluster name someone typed, a freeze
// reason, an alert's labels, a plugin's error), so each adapter escapes
// every text field for its platform as it renders it: Slack's &amp; &lt;
// &gt; (so "<!here>" or "<https://evil|Approve>" cannot become a mention or
// a disguised link), Discord's backslash escapes outside code and
// allowed_mentions none, the console's HTML escaping. The bot's markup
// survives because none of it uses those characters.
type Message struct {
	Title string `json:"title,omitempty"`
	Text  string `json:"text"`
	// Table is shown after Text (an operation's nodes); each platform
	// draws it its own way (Slack: a table block; Discord: a monospace
	// block; the console: an HTML table).
	Table   *Table   `json:"table,omitempty"`
	Fields  []Field  `json:"fields,omitempty"`
	Buttons []Button `json:"buttons,omitempty"`
	// Mentions are the users the message pings, each a user id on the
	// channel's platform as Command.User carries it (Slack "U0123ABC", a
	// Discord snowflake, a console user name). They are the one part of a
	// message that is not text: each adapter renders them as its platform's
	// real mention on a line after the text (Slack <@U0123ABC>, Discord
	// <@123> with allowed_mentions naming exactly those users, the console a
	// highlighted @name), while every text field stays escaped. An entry
	// that is not a user id of the platform is shown as the escaped text
	// "@entry" and pings nobody, so a mention can never carry markup.
	Mentions []string `json:"mentions,omitempty"`
}

// Table is a small table: a header row and rows of plain-text cells.
type Table struct {
	Columns []string   `json:"columns"`
	Rows    [][]string `json:"rows"`
}

// Markdown is the table as a pipe table (the console and CommonMark read it).
func (t *Table) Markdown() string {
	if t == nil || len(t.Columns) == 0 {
		return ""
	}
	var b strings.Builder
	row := func(cells []string) {
		b.WriteString("|")
		for i := range t.Columns {
			c := ""
			if i < len(cells) {
				c = strings.ReplaceAll(cells[i], "|", "/")
			}
			b.WriteString(" " + c + " |")
		}
		b.WriteString("\n")
	}
	row(t.Columns)
	b.WriteString("|" + strings.Repeat(" --- |", len(t.Columns)) + "\n")
	for _, r := range t.Rows {
		row(r)
	}
	return strings.TrimSuffix(b.String(), "\n")
}

// Aligned is the table as padded columns, for a monospace block (Discord
// has no tables). Widths count runes; an emoji may still be drawn wider.
func (t *Table) Aligned() string {
	if t == nil || len(t.Columns) == 0 {
		return ""
	}
	w := make([]int, len(t.Columns))
	all := append([][]string{t.Columns}, t.Rows...)
	for _, r := range all {
		for i := range w {
			if i < len(r) {
				w[i] = max(w[i], utf8.RuneCountInString(r[i]))
			}
		}
	}
	var b strings.Builder
	for _, r := range all {
		var line strings.Builder
		for i := range w {
			c := ""
			if i < len(r) {
				c = r[i]
			}
			line.WriteString(c + strings.Repeat(" ", w[i]-utf8.RuneCountInString(c)+2))
		}
		b.WriteString(strings.TrimRight(line.String(), " ") + "\n")
	}
	return strings.TrimSuffix(b.String(), "\n")
}

// Adapter delivers messages to one chat platform.
type Adapter interface {
	// Post creates a message in channel (in a thread when threadRef is set)
	// and returns its reference for later edits and replies.
	Post(ctx context.Context, channel, threadRef string, m Message) (ref string, err error)
	// Edit replaces the content of a posted message.
	Edit(ctx context.Context, channel, ref string, m Message) error
}

// Private is an adapter that can show a message to one user only (Slack's
// ephemeral messages). An adapter without it gets the message in the
// channel, addressed to the user by name.
type Private interface {
	PostPrivate(ctx context.Context, channel, user string, m Message) error
}

// Handler is what adapters call with platform input; the bot implements it.
type Handler interface {
	HandleCommand(ctx context.Context, c Command) error
	HandleAction(ctx context.Context, a Action) error
	// HandleRefusal records input the adapter refused before it reached the
	// bot (a replayed signed request, a console token naming another user, a
	// stale button): the bot audits it and, when Channel is set, answers
	// there. Nothing else happens.
	HandleRefusal(ctx context.Context, r Refusal) error
}

// Refusal is input an adapter authenticated but refused.
type Refusal struct {
	// User is who the credential says sent it (a signed payload's user, the
	// console token's owner), never a name the request merely claims.
	User    string
	Channel string
	// What was refused, e.g. "replay", "identity", "action".
	What   string
	Reason string
	// Detail is added to the audit record (e.g. the claimed user, the
	// request id). No secrets.
	Detail map[string]string
}

// Clock abstracts time for coalescing and tests.
type Clock interface {
	Now() time.Time
	AfterFunc(d time.Duration, f func()) (stop func() bool)
}

// RealClock is the wall clock.
type RealClock struct{}

// Now returns time.Now().
func (RealClock) Now() time.Time { return time.Now() }

// AfterFunc calls f after d.
func (RealClock) AfterFunc(d time.Duration, f func()) func() bool { return time.AfterFunc(d, f).Stop }

// StatusMark is the marker shown before a step with this status
// ("ok", "failed", "skipped", "running"; anything else is pending).
func StatusMark(status string) string {
	switch status {
	case "ok":
		return "✅"
	case "failed":
		return "❌"
	case "skipped":
		return "⏭️"
	case "not-checked":
		return "❔"
	case "unknown":
		return "❓"
	case "refused":
		return "⛔"
	case "running":
		return "⏳"
	case "stopped":
		return "⏹️"
	}
	// ⬜, not ▫️: the small square was nearly invisible beside the other
	// markers (issue 31).
	return "⬜"
}

// StatusLabel is the word shown beside a step's marker, so a status reads
// the same without an emoji font.
func StatusLabel(status string) string {
	switch status {
	case "ok":
		return "done"
	case "failed", "skipped", "running", "refused", "stopped":
		return status
	case "not-checked":
		return "not checked"
	case "unknown":
		return "unknown"
	}
	return "pending"
}

// ShownStatus is the status a step is shown with, and its detail without
// the words its marker already says. The protocol has one status for a step
// that did not run, SKIPPED; what it means is in the detail's first words:
// "not checked: …" (a check that could not run, gate.Report) and
// "unknown: …" (a fact that could not be read) are shown as such, never as
// a plain skip, and the same in every renderer (the message, the thread,
// the record).
func ShownStatus(status, detail string) (string, string) {
	if status != "skipped" {
		return status, detail
	}
	for _, st := range []string{"not-checked", "unknown"} {
		word := StatusLabel(st)
		if rest, ok := strings.CutPrefix(detail, word); ok && (rest == "" || strings.HasPrefix(rest, ":")) {
			return st, strings.TrimSpace(strings.TrimPrefix(rest, ":"))
		}
	}
	return status, detail
}
