package web

import (
	"html"
	"strings"
)

// mentionsHTML renders chat.Message.Mentions for the page: each name
// highlighted (<mark class="mention">@name</mark>), HTML-escaped like every
// other text, on its own paragraph after the text. The console has no
// notifications; the highlight is how a named person sees they are called.
func mentionsHTML(names []string) string {
	parts := make([]string, 0, len(names))
	for _, n := range names {
		n = strings.TrimPrefix(strings.TrimSpace(n), "@")
		if n != "" {
			parts = append(parts, `<mark class="mention">@`+html.EscapeString(n)+`</mark>`)
		}
	}
	if len(parts) == 0 {
		return ""
	}
	return `<p class="mentions">` + strings.Join(parts, " ") + `</p>`
}
