package web

import (
	"html"
	"net/url"
	"regexp"
	"strconv"
	"strings"
)

// RenderHTML turns a message's text, the chat markdown the bot writes for
// every platform (Slack's mrkdwn: *bold*, _italic_, ~strike~, `code`,
// ``` blocks; and the CommonMark forms Discord reads: **bold**, pipe
// tables, - lists, > quotes, # headings), into the HTML the console shows.
//
// Links are bare http(s) URLs, shown as themselves. Chat text has no link
// syntax (chat.Message), so neither Slack's <url|label> nor Markdown's
// [label](url) is read: they would let a freeze reason or an alert label
// show "Approve here" over any address.
//
// Escape first: every character of chat text reaches the output through
// html.EscapeString, and the only markup in the output is the fixed set of
// tags written here (p, strong, em, s, code, pre, a, ul, ol, li, table,
// thead, tbody, tr, th, td, blockquote, h3, h4, div). Links are http(s)
// only. So no chat text — a node name, an error from a cluster, a user's
// freeze reason — can inject HTML into the operator's page. No markdown
// library renders Slack's dialect, and CommonMark would read *bold* as
// italic and keep raw HTML, so the console has its own small renderer.
func RenderHTML(text string) string {
	lines := strings.Split(strings.ReplaceAll(text, "\r\n", "\n"), "\n")
	var b strings.Builder
	for i := 0; i < len(lines); {
		line := lines[i]
		switch {
		case strings.TrimSpace(line) == "":
			i++ // blank lines only separate blocks
		case strings.HasPrefix(strings.TrimLeft(line, " \t"), "```"):
			i = codeBlock(&b, lines, i)
		case isTable(lines, i):
			i = table(&b, lines, i)
		case listMarker.MatchString(line):
			i = list(&b, lines, i)
		case strings.HasPrefix(line, ">"):
			i = quote(&b, lines, i)
		case heading.MatchString(line):
			m := heading.FindStringSubmatch(line)
			tag := "h3"
			if len(m[1]) > 1 {
				tag = "h4"
			}
			b.WriteString("<" + tag + ">")
			inline(&b, m[2])
			b.WriteString("</" + tag + ">")
			i++
		default:
			i = paragraph(&b, lines, i)
		}
	}
	return b.String()
}

var (
	// listMarker: "• x", "◦ x", "- x", "* x", "1. x", "2) x" (a leading indent nests one level).
	listMarker = regexp.MustCompile(`^(\s*)([-*•◦]|(\d{1,4})[.)])\s+(.*)$`)
	heading    = regexp.MustCompile(`^(#{1,3})\s+(.+)$`)
	tableRule  = regexp.MustCompile(`^\s*\|?\s*:?-{3,}:?\s*(\|\s*:?-{3,}:?\s*)*\|?\s*$`)
	langTag    = regexp.MustCompile(`^[A-Za-z0-9_+-]*$`)
)

// startsBlock reports whether line begins a block other than a paragraph.
func startsBlock(lines []string, i int) bool {
	line := lines[i]
	return strings.TrimSpace(line) == "" || strings.HasPrefix(strings.TrimLeft(line, " \t"), "```") ||
		isTable(lines, i) || listMarker.MatchString(line) || strings.HasPrefix(line, ">") || heading.MatchString(line)
}

// paragraph renders lines up to the next block as one <p>; its line breaks
// and indentation are kept (the page styles it white-space: pre-wrap), as
// chat platforms show them.
func paragraph(b *strings.Builder, lines []string, i int) int {
	b.WriteString("<p>")
	for first := true; i < len(lines) && (first || !startsBlock(lines, i)); i++ {
		if !first {
			b.WriteString("\n")
		}
		inline(b, lines[i])
		first = false
	}
	b.WriteString("</p>")
	return i
}

// codeBlock renders a ``` fence up to its closing ``` (or the end of the
// text), verbatim.
func codeBlock(b *strings.Builder, lines []string, i int) int {
	rest := strings.TrimLeft(lines[i], " \t")[3:]
	var body []string
	if before, _, ok := strings.Cut(rest, "```"); ok { // ```one line```
		b.WriteString("<pre><code>" + html.EscapeString(before) + "</code></pre>")
		return i + 1
	}
	if !langTag.MatchString(rest) {
		body = append(body, rest)
	}
	for i++; i < len(lines); i++ {
		if before, ok := strings.CutSuffix(strings.TrimRight(lines[i], " \t"), "```"); ok {
			if before != "" {
				body = append(body, before)
			}
			i++
			break
		}
		body = append(body, lines[i])
	}
	b.WriteString("<pre><code>" + html.EscapeString(strings.Join(body, "\n")) + "</code></pre>")
	return i
}

func isTable(lines []string, i int) bool {
	return i+1 < len(lines) && strings.Contains(lines[i], "|") && strings.HasPrefix(strings.TrimSpace(lines[i]), "|") &&
		strings.Contains(lines[i+1], "|") && tableRule.MatchString(lines[i+1])
}

// table renders a pipe table: a header row, the rule, then rows while lines
// have a pipe. It scrolls sideways in its own box, so wide tables (the audit
// trail) keep every column.
func table(b *strings.Builder, lines []string, i int) int {
	b.WriteString(`<div class="table"><table><thead><tr>`)
	for _, c := range cells(lines[i]) {
		b.WriteString("<th>")
		inline(b, c)
		b.WriteString("</th>")
	}
	b.WriteString("</tr></thead><tbody>")
	for i += 2; i < len(lines) && strings.Contains(lines[i], "|") && strings.TrimSpace(lines[i]) != ""; i++ {
		b.WriteString("<tr>")
		for _, c := range cells(lines[i]) {
			b.WriteString("<td>")
			inline(b, c)
			b.WriteString("</td>")
		}
		b.WriteString("</tr>")
	}
	b.WriteString("</tbody></table></div>")
	return i
}

// cells splits a table row on the pipes outside code spans.
func cells(row string) []string {
	row = strings.TrimSpace(row)
	row = strings.TrimPrefix(row, "|")
	if strings.HasSuffix(row, "|") && !strings.HasSuffix(row, `\|`) {
		row = row[:len(row)-1]
	}
	var out []string
	var cur strings.Builder
	inCode := false
	for i := 0; i < len(row); i++ {
		switch c := row[i]; {
		case c == '\\' && i+1 < len(row) && row[i+1] == '|':
			cur.WriteByte('|')
			i++
		case c == '`':
			inCode = !inCode
			cur.WriteByte(c)
		case c == '|' && !inCode:
			out = append(out, strings.TrimSpace(cur.String()))
			cur.Reset()
		default:
			cur.WriteByte(c)
		}
	}
	return append(out, strings.TrimSpace(cur.String()))
}

// list renders consecutive list items; an indented line that is not an
// item continues the item above it.
func list(b *strings.Builder, lines []string, i int) int {
	open := "" // "ul" or "ol"
	for ; i < len(lines); i++ {
		m := listMarker.FindStringSubmatch(lines[i])
		if m == nil {
			if strings.HasPrefix(lines[i], "  ") && strings.TrimSpace(lines[i]) != "" && open != "" {
				b.WriteString("\n")
				inline(b, strings.TrimSpace(lines[i]))
				continue
			}
			break
		}
		kind := "ul"
		if m[3] != "" {
			kind = "ol"
		}
		if kind != open {
			if open != "" {
				b.WriteString("</li></" + open + ">")
			}
			b.WriteString("<" + kind)
			if n, err := strconv.Atoi(m[3]); err == nil && n != 1 {
				b.WriteString(` start="` + strconv.Itoa(n) + `"`)
			}
			b.WriteString(">")
			open = kind
		} else {
			b.WriteString("</li>")
		}
		if len(m[1]) >= 2 {
			b.WriteString(`<li class="sub">`)
		} else {
			b.WriteString("<li>")
		}
		inline(b, m[4])
	}
	b.WriteString("</li></" + open + ">")
	return i
}

func quote(b *strings.Builder, lines []string, i int) int {
	b.WriteString("<blockquote>")
	for first := true; i < len(lines) && strings.HasPrefix(lines[i], ">"); i++ {
		if !first {
			b.WriteString("\n")
		}
		l := strings.TrimPrefix(lines[i], ">")
		inline(b, strings.TrimPrefix(l, " "))
		first = false
	}
	b.WriteString("</blockquote>")
	return i
}

// inline renders one line's spans: code, links, bold, italic, strike. Text
// between them is escaped.
func inline(b *strings.Builder, s string) {
	lit := 0 // start of the pending literal text
	flush := func(to int) {
		b.WriteString(html.EscapeString(s[lit:to]))
	}
	for i := 0; i < len(s); {
		if n, end, ok := span(s, i); ok {
			flush(i)
			n(b)
			i, lit = end, end
			continue
		}
		i++
	}
	flush(len(s))
}

// span recognises the span that starts at s[i], returning what writes it
// and where it ends.
func span(s string, i int) (func(*strings.Builder), int, bool) {
	switch c := s[i]; {
	case c == '`':
		n := 1
		for i+n < len(s) && s[i+n] == '`' {
			n++
		}
		j := strings.Index(s[i+n:], s[i:i+n])
		if j < 0 {
			return nil, 0, false
		}
		code := s[i+n : i+n+j]
		return func(b *strings.Builder) { b.WriteString("<code>" + html.EscapeString(code) + "</code>") }, i + n + j + n, true
	case c == 'h' && (strings.HasPrefix(s[i:], "https://") || strings.HasPrefix(s[i:], "http://")) && (i == 0 || !wordByte(s[i-1])):
		end := i
		for end < len(s) && !strings.ContainsRune(" \t<>|\"'`", rune(s[end])) {
			end++
		}
		for end > i && strings.ContainsRune(".,;:!?)]", rune(s[end-1])) {
			end--
		}
		if !safeURL(s[i:end]) {
			return nil, 0, false
		}
		return link(s[i:end], s[i:end]), end, true
	case c == '*' && strings.HasPrefix(s[i:], "**"): // CommonMark bold
		j := strings.Index(s[i+2:], "**")
		if j <= 0 || s[i+2] == ' ' || s[i+2+j-1] == ' ' {
			return nil, 0, false
		}
		inner := s[i+2 : i+2+j]
		return wrap("strong", inner), i + 2 + j + 2, true
	case c == '*' || c == '_' || c == '~':
		// Opens after a non-word character and before a non-space; closes
		// before a non-word character and after a non-space, so snake_case,
		// globs ("*") and a*b stay text.
		if i > 0 && wordByte(s[i-1]) || i+1 >= len(s) || s[i+1] == ' ' || s[i+1] == c {
			return nil, 0, false
		}
		for j := i + 2; j < len(s); j++ {
			if s[j] == c && s[j-1] != ' ' && (j+1 == len(s) || !wordByte(s[j+1])) {
				tag := map[byte]string{'*': "strong", '_': "em", '~': "s"}[c]
				return wrap(tag, s[i+1:j]), j + 1, true
			}
		}
	}
	return nil, 0, false
}

func wrap(tag, inner string) func(*strings.Builder) {
	return func(b *strings.Builder) {
		b.WriteString("<" + tag + ">")
		inline(b, inner)
		b.WriteString("</" + tag + ">")
	}
}

func link(target, label string) func(*strings.Builder) {
	return func(b *strings.Builder) {
		b.WriteString(`<a href="` + html.EscapeString(target) + `" target="_blank" rel="noopener noreferrer">` + html.EscapeString(label) + "</a>")
	}
}

// safeURL accepts absolute http(s) URLs only: no javascript:, data: or
// relative links, nothing with spaces or quotes.
func safeURL(s string) bool {
	if s == "" || strings.ContainsAny(s, " \t\n<>\"'`") {
		return false
	}
	u, err := url.Parse(s)
	return err == nil && (u.Scheme == "http" || u.Scheme == "https") && u.Host != ""
}

// wordByte: ASCII letters, digits and underscore (emoji and dashes around
// *bold* do not stop it).
func wordByte(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '_'
}
