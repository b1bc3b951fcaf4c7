package auditview

import (
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/talosbot/talosbot/bot/chat"
	"github.com/talosbot/talosbot/config"
	"github.com/talosbot/talosbot/state"
)

// FilterKeys are the filter names shared by `/talos audit`, GET /api/audit
// and `talosbot audit export`: cluster, user (actor), op (operation type,
// a command name as /talos help lists it), result, action, op_id, since, until, limit, before.
func FilterKeys() []string {
	return []string{"cluster", "user", "op", "result", "action", "op_id", "since", "until", "limit", "before"}
}

// MaxFilterValue is the longest string filter value (cluster, user, op,
// result, action, op_id) ParseFilter accepts, in characters.
const MaxFilterValue = 256

// ParseFilter turns filter values (looked up by get, "" when absent) into a
// query. since/until take a duration back from now ("7d", "12h") or a time
// (RFC 3339 or 2006-01-02). limit must be 1..maxLimit; it defaults to defLimit.
// before is the paging cursor: only records with a smaller seq.
func ParseFilter(get func(string) string, now time.Time, defLimit, maxLimit int) (state.AuditQuery, error) {
	q := state.AuditQuery{
		Cluster: get("cluster"), Actor: get("user"), Command: get("op"), Result: get("result"),
		Action: get("action"), OpID: get("op_id"), Limit: defLimit,
	}
	// Every filter is repeated in the answer's header and its "more"
	// command, so a long value would come back in full; no record holds
	// one this long (user and operation ids, cluster and command names).
	for _, k := range []string{"cluster", "user", "op", "result", "action", "op_id"} {
		if v := get(k); utf8.RuneCountInString(v) > MaxFilterValue {
			return q, fmt.Errorf("%s %s is longer than %d characters, which no audit record holds; give the value itself", k, chat.Echo(v), MaxFilterValue)
		}
	}
	var err error
	if q.Since, err = parseWhen(get("since"), now); err != nil {
		return q, fmt.Errorf("since: %w", err)
	}
	if q.Until, err = parseWhen(get("until"), now); err != nil {
		return q, fmt.Errorf("until: %w", err)
	}
	if s := get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > maxLimit {
			return q, fmt.Errorf("limit %s: use a number from 1 to %d", chat.Echo(s), maxLimit)
		}
		q.Limit = n
	}
	if s := get("before"); s != "" {
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil || n == 0 {
			return q, fmt.Errorf("before %s: use a record sequence number (the seq column)", chat.Echo(s))
		}
		q.BeforeSeq = n
	}
	return q, nil
}

func parseWhen(s string, now time.Time) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	if d, err := config.ParseDuration(s); err == nil {
		if d < 0 {
			return time.Time{}, fmt.Errorf("%s is negative; use how far back, e.g. 7d", chat.Echo(s))
		}
		return now.Add(-d).UTC(), nil
	}
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t.UTC(), nil
	}
	if t, err := time.Parse("2006-01-02", s); err == nil {
		return t.UTC(), nil
	}
	return time.Time{}, fmt.Errorf("%s is neither a duration (7d, 12h) nor a time (2026-05-01 or RFC 3339)", chat.Echo(s))
}

// FilterArgs renders q back as `--name value` flags (quoted where needed), so
// a "more" button can run the next page. Times are absolute, so the next page
// covers the same window as the first.
func FilterArgs(q state.AuditQuery) string { return filterArgs(q, time.RFC3339Nano) }

// DescribeFilter is FilterArgs for people: the times to the second
// ("--since 2026-11-30T08:31:02Z"), never with nanoseconds. It is not for a
// command that must cover the exact same window (a "more" page).
func DescribeFilter(q state.AuditQuery) string { return filterArgs(q, time.RFC3339) }

func filterArgs(q state.AuditQuery, layout string) string {
	var parts []string
	add := func(name, v string) {
		if v != "" {
			parts = append(parts, "--"+name+" "+quote(v))
		}
	}
	add("cluster", q.Cluster)
	add("user", q.Actor)
	add("op", q.Command)
	add("result", q.Result)
	add("action", q.Action)
	add("op_id", q.OpID)
	if !q.Since.IsZero() {
		add("since", q.Since.UTC().Format(layout))
	}
	if !q.Until.IsZero() {
		add("until", q.Until.UTC().Format(layout))
	}
	if q.Limit > 0 {
		add("limit", strconv.Itoa(q.Limit))
	}
	if q.BeforeSeq > 0 {
		add("before", strconv.FormatUint(q.BeforeSeq, 10))
	}
	return strings.Join(parts, " ")
}

// quote wraps v in double quotes when the command tokenizer would split or
// reinterpret it (grammar.Tokenize: whitespace, quotes, backslashes).
func quote(v string) string {
	if v != "" && !strings.ContainsAny(v, " \t\r\n\u00a0\"'\\“”‘’") {
		return v
	}
	r := strings.NewReplacer(`\`, `\\`, `"`, `\"`)
	return `"` + r.Replace(v) + `"`
}
