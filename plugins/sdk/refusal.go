package sdk

import (
	"errors"
	"fmt"
	"strconv"
	"unicode/utf8"
)

// Refusal is the one refusal type of the plugin side: the runbook rule that
// forbids an operation, why, and how to proceed. It is an error, so the
// functions that check a rule return it and callers pass it up unchanged;
// Plan turns it into OperationPlan.Refusal (RefusalPlan) and Run into a
// refused Result (RefusedResult); it is also the wire Refusal's Go type.
// It lives here rather than in plugins/cluster so a plugin can refuse
// without linking client-go.
type Refusal struct {
	// Rule names the runbook rule, e.g. "R1" (docs/RUNBOOK.md).
	Rule string
	// Reason says what is wrong, in the operator's terms.
	Reason string
	// Fix says how to proceed; every refusal carries one.
	Fix string
}

// Refuse returns a *Refusal; the usual way to construct one inline.
func Refuse(rule, reason, fix string) *Refusal {
	return &Refusal{Rule: rule, Reason: reason, Fix: fix}
}

func (r *Refusal) Error() string {
	return fmt.Sprintf("%s: %s; %s", r.Rule, r.Reason, r.Fix)
}

// AsRefusal returns the *Refusal in err's chain, if any.
func AsRefusal(err error) (*Refusal, bool) {
	var r *Refusal
	ok := errors.As(err, &r)
	return r, ok
}

// RefusalPlan turns a *Refusal anywhere in err's chain into a refused plan
// (nothing will run) and passes any other error through, for Plan methods:
//
//	if err := checkRule(...); err != nil {
//		return sdk.RefusalPlan(err)
//	}
func RefusalPlan(err error) (*OperationPlan, error) {
	if r, ok := AsRefusal(err); ok {
		return &OperationPlan{Refusal: r, Summary: "refused: " + r.Reason}, nil
	}
	return nil, err
}

// RefusedResult is the final Result of a run that a rule stopped (the host
// re-checks rules at run time), or nil when err holds no *Refusal. summary
// defaults to "refused".
func RefusedResult(err error, summary string) *Result {
	r, ok := AsRefusal(err)
	if !ok {
		return nil
	}
	if summary == "" {
		summary = "refused"
	}
	return &Result{OK: false, Summary: summary, Error: err.Error(), Refusal: r}
}

// QuoteRunes is how much of a value Quote shows: the bot's own echoes
// (bot/chat.Echo) show as much.
const QuoteRunes = 64

// Quote is how a refusal or error shows a value the user typed (a version,
// a node name): quoted, and cut to QuoteRunes runes with "…". The text goes
// to chat, the card and the audit trail, so a 60 KB argument must not come
// back in full.
func Quote(s string) string {
	if utf8.RuneCountInString(s) <= QuoteRunes {
		return strconv.Quote(s)
	}
	return strconv.Quote(string([]rune(s)[:QuoteRunes])) + "…"
}

// Clip is Quote without the quotes, for a value shown bare (a node name in
// "cp-9 is not in the inventory").
func Clip(s string) string {
	if utf8.RuneCountInString(s) <= QuoteRunes {
		return s
	}
	return string([]rune(s)[:QuoteRunes]) + "…"
}
