package slack

import (
	"regexp"
	"strings"
)

// userID is a Slack user id (U…, or W… for an Enterprise Grid user).
var userID = regexp.MustCompile(`^[UW][A-Z0-9]{2,20}$`)

// mentionLine renders chat.Message.Mentions as mrkdwn: a user id becomes
// Slack's user mention <@U…> (https://api.slack.com/reference/surfaces/formatting#mentioning-users),
// anything else the escaped text "@entry", which pings nobody.
func mentionLine(ids []string) string {
	parts := make([]string, 0, len(ids))
	for _, id := range ids {
		id = strings.TrimPrefix(strings.TrimSpace(id), "@")
		if userID.MatchString(id) {
			parts = append(parts, "<@"+id+">")
		} else if id != "" {
			parts = append(parts, Escape("@"+id))
		}
	}
	return strings.Join(parts, " ")
}

// withMentions is the escaped text s (cut to n runes) followed by the
// mention line: the text is cut, never the mentions.
func withMentions(s string, ids []string, n int) string {
	m := mentionLine(ids)
	if m == "" {
		return escapeTruncate(s, n)
	}
	if strings.TrimSpace(s) == "" {
		return m
	}
	return escapeTruncate(s, max(n-len([]rune(m))-1, 1)) + "\n" + m
}
