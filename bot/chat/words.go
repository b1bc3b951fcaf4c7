package chat

import (
	"fmt"
	"strconv"
	"time"
	"unicode/utf8"
)

// Duration says d in words, to the unit a person reads: "40 s", "12 min",
// "2 h 5 min", "14 days", "1 day 3 h". Never Go's "336h0m0s" or nanoseconds.
func Duration(d time.Duration) string {
	if d < 0 {
		d = -d
	}
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%d s", int(d.Round(time.Second)/time.Second))
	case d < time.Hour:
		return fmt.Sprintf("%d min", int(d.Round(time.Minute)/time.Minute))
	case d < 24*time.Hour:
		d = d.Round(time.Minute)
		h, m := int(d/time.Hour), int(d%time.Hour/time.Minute)
		if m == 0 {
			return fmt.Sprintf("%d h", h)
		}
		return fmt.Sprintf("%d h %d min", h, m)
	}
	d = d.Round(time.Hour)
	days, h := int(d/(24*time.Hour)), int(d%(24*time.Hour)/time.Hour)
	unit := "days"
	if days == 1 {
		unit = "day"
	}
	if h == 0 {
		return fmt.Sprintf("%d %s", days, unit)
	}
	return fmt.Sprintf("%d %s %d h", days, unit, h)
}

// EchoRunes is how much of a user's input a reply quotes back.
const EchoRunes = 64

// Echo is user input as a reply quotes it: Go-quoted, cut to its first
// EchoRunes runes and "…". A refusal names what was refused; it never
// repeats a whole line back into the channel (a 60 KB "cluster name" is
// answered with 64 runes of it). The quote is not an escape: every adapter
// still escapes it for its platform like any other text (see Message).
func Echo(s string) string {
	if utf8.RuneCountInString(s) <= EchoRunes {
		return strconv.Quote(s)
	}
	return strconv.Quote(string([]rune(s)[:EchoRunes])) + "…"
}

// Clip is Echo without the quotes, for input shown in a form of its own
// (a flag's name after "--").
func Clip(s string) string {
	if utf8.RuneCountInString(s) <= EchoRunes {
		return s
	}
	return string([]rune(s)[:EchoRunes]) + "…"
}
