package auditview

import (
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/talosbot/talosbot/state"
)

// ChatTable renders records as a compact fixed-width table with a header and
// the seq column (the paging cursor), for a code block in chat. Long values
// are cut with "…" so the columns stay aligned.
func ChatTable(recs []state.AuditRecord) string {
	var b strings.Builder
	widths := []int{6, 16, 10, 16, 12, 10, 12}
	row := func(cols ...string) {
		var line strings.Builder
		for i, c := range cols {
			if i < len(widths) {
				fmt.Fprintf(&line, "%-*s ", widths[i], cut(c, widths[i]))
			} else {
				line.WriteString(c)
			}
		}
		b.WriteString(strings.TrimRight(line.String(), " ") + "\n")
	}
	row("seq", "time (UTC)", "cluster", "action", "user", "result", "op", "command")
	for _, r := range recs {
		row(fmt.Sprint(r.Seq), r.Time.UTC().Format("2006-01-02 15:04"), dash(r.Cluster), r.Action, r.Actor, dash(r.Result), dash(r.OpID), r.Command)
	}
	return strings.TrimRight(b.String(), "\n")
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func cut(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n-1]) + "…"
}
