package discord

import (
	"strings"

	"github.com/bwmarrin/discordgo"
)

// Escape is Discord's escaping of the bot's text (chat.Message: plain text
// with *bold*, _italic_, ~strike~ and `code` markup, where '<', '>' and '&'
// are literal). Outside code spans and blocks it backslash-escapes '\', '<'
// and '[', so no text the bot shows (a cluster name someone typed, a freeze
// reason, an alert's labels) becomes a user, role or channel mention
// (<@…>, <@&…>, <#…>), a timestamp, an emoji or a masked link
// ([label](url)); and it puts a zero-width space after the '@' of @everyone
// and @here, so they read as text. Inside code Discord parses none of these
// and shows backslashes as they are, so code is left alone. The bot's own
// markup uses none of these characters, so it still works. Pings are
// refused separately on every message (noMentions).
func Escape(s string) string {
	var b strings.Builder
	b.Grow(len(s) + 8)
	for i := 0; i < len(s); {
		switch c := s[i]; {
		case c == '`':
			n := 1
			for i+n < len(s) && s[i+n] == '`' {
				n++
			}
			end := i + n
			if j := closingRun(s, i+n, n); j >= 0 {
				end = j + n // a code span or block: verbatim
			}
			b.WriteString(s[i:end])
			i = end
		case c == '\\' || c == '<' || c == '[':
			b.WriteByte('\\')
			b.WriteByte(c)
			i++
		case c == '@' && (strings.HasPrefix(s[i+1:], "everyone") || strings.HasPrefix(s[i+1:], "here")):
			b.WriteString("@\u200b")
			i++
		default:
			b.WriteByte(c)
			i++
		}
	}
	return b.String()
}

// noMentions is the allowed_mentions of every message, edit, interaction
// response and follow-up the bot sends: an empty, non-nil parse list, sent
// as "parse":[], which Discord reads as "ping no one" (a nil list would be
// sent as null). Text shown is escaped too (Escape); this stops the ping
// even where escaping cannot reach (an embed title).
func noMentions() *discordgo.MessageAllowedMentions {
	return &discordgo.MessageAllowedMentions{Parse: []discordgo.AllowedMentionType{}}
}

// closingRun returns where, from from on, the next run of exactly n
// backticks starts (a run with no backtick just before or after it), or -1.
// Discord closes a code span only there: one backtick, a masked link and
// then a run of two backticks is no code span, so Discord shows the link,
// and leaving it verbatim as code would let the link through.
func closingRun(s string, from, n int) int {
	for j := from; j < len(s); {
		if s[j] != '`' {
			j++
			continue
		}
		k := j
		for k < len(s) && s[k] == '`' {
			k++
		}
		if k-j == n {
			return j
		}
		j = k
	}
	return -1
}
