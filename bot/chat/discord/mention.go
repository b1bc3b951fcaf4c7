package discord

import (
	"regexp"
	"strings"

	"github.com/bwmarrin/discordgo"
)

// snowflake is a Discord user id.
var snowflake = regexp.MustCompile(`^[0-9]{5,20}$`)

// mentions renders chat.Message.Mentions: a user id becomes Discord's user
// mention <@id> and is the only user allowed_mentions lets ping; anything
// else is the escaped text "@entry", which pings nobody. Everything else in
// the message stays unable to ping (Parse empty: no @everyone, roles or
// users parsed from text).
func mentions(ids []string) (line string, allowed *discordgo.MessageAllowedMentions) {
	allowed = noMentions()
	parts := make([]string, 0, len(ids))
	for _, id := range ids {
		id = strings.TrimPrefix(strings.TrimSpace(id), "@")
		if snowflake.MatchString(id) {
			parts = append(parts, "<@"+id+">")
			allowed.Users = append(allowed.Users, id)
		} else if id != "" {
			parts = append(parts, Escape("@"+id))
		}
	}
	return strings.Join(parts, " "), allowed
}
