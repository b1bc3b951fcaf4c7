// Package render turns the engine's updates into chat messages: one message
// per operation, edited in place with edits coalesced (at most one per
// MinEditInterval, the latest state always delivered) and a failed final
// edit retried, plus thread replies. Adapters are transports; rendering is
// the same for every platform.
package render

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/talosbot/talosbot/bot/chat"
	"github.com/talosbot/talosbot/bot/engine"
	"github.com/talosbot/talosbot/plugins/host"
	lifecyclev1 "github.com/talosbot/talosbot/plugins/sdk/proto/lifecycle/v1"
	"github.com/talosbot/talosbot/state"
)

// MinEditInterval is the fastest an operation's message is edited; bursts of
// progress are coalesced and the latest state is always delivered.
const MinEditInterval = time.Second

// ageEvery is how often the message of an operation that has not ended is
// rendered again although nothing happened: "just now", "in 30 min", the
// elapsed time and the ETA are relative to now and must age (issue 31), and
// a long step sends no update.
const ageEvery = time.Minute

// forgetAfter is how long a finished operation's view is kept.
const forgetAfter = 15 * time.Minute

// maxEditRetries bounds the retries of a failed edit. The wait doubles from
// MinEditInterval (1s, 2s, … 16s): long enough to ride out a rate limit or a
// brief outage of the chat API, short enough to end within a minute. Without
// retries a failed final edit would leave the message showing "running"
// forever, since no later update comes to replace it.
const maxEditRetries = 5

// Renderer turns engine updates into chat messages on one adapter: one message
// per operation, edited in place (at most once per MinEditInterval), plus
// thread replies.
type Renderer struct {
	adapter chat.Adapter
	clock   chat.Clock
	log     *slog.Logger

	mu  sync.Mutex
	ops map[string]*opView
}

type opView struct {
	ref     string
	channel string
	// pending is the newest update not yet rendered. Its Facts read the
	// store, so they are read and rendered in flush, at most once per
	// MinEditInterval, not on every progress event.
	pending      *engine.Update
	latest       chat.Message // the newest rendered message (resent on a retry)
	buttons      []chat.Button
	buttonsState state.OpState
	lastEdit     time.Time
	timerSet     bool
	dirty        bool
	forgetSet    bool           // the view is dropped a while after the op ends
	editFailures int            // consecutive failed edits (reset by a successful one)
	detailsFor   string         // the plan digest whose Details thread post was made
	last         *engine.Update // the newest update, rendered again to age its times
	ageSet       bool           // an ageing render is scheduled
	sending      sync.Mutex
}

// NewRenderer returns a Renderer for adapter.
func NewRenderer(adapter chat.Adapter, clock chat.Clock, log *slog.Logger) *Renderer {
	if clock == nil {
		clock = chat.RealClock{}
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Renderer{adapter: adapter, clock: clock, log: log, ops: map[string]*opView{}}
}

var _ engine.Sink = (*Renderer)(nil)

// Reply posts a plain answer in the channel. An answer to a click (a
// refused or repeated Approve) concerns the clicker alone: it is shown to
// them only where the platform can (Slack), and names them everywhere, so
// nobody else reads someone's "you already approved" as an error of theirs.
func (r *Renderer) Reply(ctx context.Context, to engine.Origin, text string) {
	if to.Click && to.User != "" {
		msg := chat.Message{Text: to.User + ": " + text}
		if p, ok := r.adapter.(chat.Private); ok {
			err := p.PostPrivate(ctx, to.Channel, to.User, msg)
			if err == nil {
				return
			}
			if !errors.Is(err, chat.ErrNoPrivate) {
				r.log.Warn("private reply; answering in the channel", "channel", to.Channel, "err", err)
			}
		}
		text = msg.Text
	}
	if _, err := r.adapter.Post(ctx, to.Channel, "", chat.Message{Text: text}); err != nil {
		r.log.Warn("reply", "channel", to.Channel, "err", err)
	}
}

// ReplyButtons posts an answer with buttons.
func (r *Renderer) ReplyButtons(ctx context.Context, to engine.Origin, text string, buttons []engine.Button) {
	if _, err := r.adapter.Post(ctx, to.Channel, "", chat.Message{Text: text, Buttons: toChatButtons(buttons)}); err != nil {
		r.log.Warn("reply", "channel", to.Channel, "err", err)
	}
}

// Thread posts a detail line under the operation's message.
func (r *Renderer) Thread(ctx context.Context, op *state.Operation, text string) {
	v := r.view(ctx, op)
	if v == nil {
		return
	}
	if _, err := r.adapter.Post(ctx, op.Channel, v.ref, chat.Message{Text: text}); err != nil {
		r.log.Warn("thread reply", "op", op.ID, "err", err)
	}
}

// ThreadMention posts a line under the operation's message that pings
// users (chat.Message.Mentions: each adapter renders a real mention).
func (r *Renderer) ThreadMention(ctx context.Context, op *state.Operation, text string, users []string) {
	v := r.view(ctx, op)
	if v == nil {
		return
	}
	if _, err := r.adapter.Post(ctx, op.Channel, v.ref, chat.Message{Text: text, Mentions: users}); err != nil {
		r.log.Warn("thread reply", "op", op.ID, "err", err)
	}
}

// Operation renders the operation's message, creating it on first use. Only
// the newest update is kept; flush reads its facts and renders it.
func (r *Renderer) Operation(ctx context.Context, u engine.Update) {
	r.mu.Lock()
	v := r.ops[u.Op.ID]
	if v == nil {
		v = &opView{channel: u.Op.Channel}
		r.ops[u.Op.ID] = v
	}
	if u.Buttons != nil {
		v.buttons = toChatButtons(u.Buttons)
		v.buttonsState = u.Op.State
	} else if v.buttonsState != u.Op.State && !(u.Op.State.Terminal() && v.buttonsState == "suggest") {
		v.buttons = nil
	}
	if u.Op.State.Terminal() && u.Buttons != nil {
		v.buttonsState = "suggest"
	}
	if u.Op.State.Terminal() && !v.forgetSet {
		// Late updates (suggested actions after a failure) still find the
		// message for a while; then the view goes, so memory stays bounded.
		v.forgetSet = true
		id := u.Op.ID
		r.clock.AfterFunc(forgetAfter, func() {
			r.mu.Lock()
			delete(r.ops, id)
			r.mu.Unlock()
		})
	}
	details := ""
	if u.Op.State == state.StateAwaitingApproval && u.Op.Digest != "" && v.detailsFor != u.Op.Digest {
		// Every step goes behind the card, once per plan.
		v.detailsFor = u.Op.Digest
		details = Details(u.Op)
	}
	v.pending = &u
	v.last = &u
	v.dirty = true
	if !u.Op.State.Terminal() && !v.ageSet {
		v.ageSet = true
		id := u.Op.ID
		r.clock.AfterFunc(ageEvery, func() { r.age(context.WithoutCancel(ctx), id) })
	}
	first := v.ref == ""
	wait := time.Duration(0)
	if !first {
		wait = MinEditInterval - r.clock.Now().Sub(v.lastEdit)
	}
	if wait > 0 {
		if !v.timerSet {
			v.timerSet = true
			r.clock.AfterFunc(wait, func() { r.flush(context.WithoutCancel(ctx), u.Op.ID) })
		}
		r.mu.Unlock()
	} else {
		r.mu.Unlock()
		r.flush(ctx, u.Op.ID)
	}
	if details != "" {
		r.Thread(ctx, u.Op, details)
	}
}

// age renders the newest update again, so the message's relative times
// move on while the operation waits or runs, and schedules the next time
// until the operation ends.
func (r *Renderer) age(ctx context.Context, id string) {
	r.mu.Lock()
	v := r.ops[id]
	if v == nil || v.last == nil || v.last.Op.State.Terminal() {
		if v != nil {
			v.ageSet = false
		}
		r.mu.Unlock()
		return
	}
	if !v.dirty {
		v.pending = v.last
		v.dirty = true
	}
	r.clock.AfterFunc(ageEvery, func() { r.age(ctx, id) })
	r.mu.Unlock()
	r.flush(ctx, id)
}

// render turns u into its message, reading its facts (the store) first.
// It runs in flush, outside the renderer's lock.
func (r *Renderer) render(ctx context.Context, u *engine.Update, buttons []chat.Button) chat.Message {
	var facts *engine.Facts
	if u.Facts != nil {
		facts = u.Facts(ctx)
	}
	now := r.clock.Now()
	if facts != nil && !facts.Now.IsZero() {
		now = facts.Now // the engine's clock, which set the expiry
	}
	m := Render(u.Op, u.Lines, facts, now)
	m.Buttons = buttons
	return m
}

// view returns the operation's view, posting its message if needed.
func (r *Renderer) view(ctx context.Context, op *state.Operation) *opView {
	r.mu.Lock()
	v := r.ops[op.ID]
	r.mu.Unlock()
	if v == nil || v.ref == "" {
		r.Operation(ctx, engine.Update{Op: op})
		r.mu.Lock()
		v = r.ops[op.ID]
		r.mu.Unlock()
	}
	return v
}

func (r *Renderer) flush(ctx context.Context, id string) {
	r.mu.Lock()
	v := r.ops[id]
	r.mu.Unlock()
	if v == nil {
		return
	}
	v.sending.Lock()
	defer v.sending.Unlock()
	r.mu.Lock()
	if !v.dirty {
		v.timerSet = false
		r.mu.Unlock()
		return
	}
	// v.buttons are those of the pending update: both change together.
	u, buttons, ref := v.pending, v.buttons, v.ref
	v.pending = nil
	v.dirty, v.timerSet = false, false
	v.lastEdit = r.clock.Now()
	r.mu.Unlock()
	if u != nil {
		// An update arriving meanwhile is newer: it sets pending and a
		// timer again, so the latest state is still the one delivered.
		m := r.render(ctx, u, buttons)
		r.mu.Lock()
		v.latest = m
		r.mu.Unlock()
	}
	r.mu.Lock()
	msg := v.latest // the retry path resends it while nothing newer came
	r.mu.Unlock()
	if ref == "" {
		newRef, err := r.adapter.Post(ctx, v.channel, "", msg)
		if err != nil {
			r.log.Warn("post operation message", "op", id, "err", err)
			return
		}
		r.mu.Lock()
		v.ref = newRef
		r.mu.Unlock()
		return
	}
	err := r.adapter.Edit(ctx, v.channel, ref, msg)
	r.mu.Lock()
	defer r.mu.Unlock()
	if err == nil {
		v.editFailures = 0
		return
	}
	v.editFailures++
	if v.editFailures > maxEditRetries {
		v.editFailures = 0
		r.log.Error("edit operation message: giving up; the message shows an older state", "op", id, "attempts", maxEditRetries+1, "err", err)
		return
	}
	r.log.Warn("edit operation message; retrying", "op", id, "failures", v.editFailures, "err", err)
	// Send again: the latest message, which is msg unless a newer update
	// arrived meanwhile (and is then delivered by the same retry).
	v.dirty = true
	if !v.timerSet {
		v.timerSet = true
		r.clock.AfterFunc(MinEditInterval<<(v.editFailures-1), func() { r.flush(context.WithoutCancel(ctx), id) })
	}
}

func toChatButtons(bs []engine.Button) []chat.Button {
	out := make([]chat.Button, 0, len(bs))
	for _, b := range bs {
		out = append(out, chat.Button{ActionID: b.ID, Label: b.Label, Style: b.Style})
	}
	return out
}

// StateEmoji is the status marker for an operation state.
func StateEmoji(s state.OpState) string {
	switch s {
	case state.StatePlanned:
		return "📝"
	case state.StateAwaitingApproval:
		return "🕒"
	case state.StateApproved:
		return "👍"
	case state.StateRunning:
		return "⏳"
	case state.StateSucceeded:
		return "✅"
	case state.StateFailed:
		return "❌"
	case state.StateCancelled, state.StateDenied, state.StateExpired:
		return "🚫"
	case state.StateInterrupted:
		return "⚠️"
	case state.StateRefused:
		return "⛔"
	}
	return "•"
}

// StateLabel is the word beside StateEmoji ("awaiting approval").
func StateLabel(op *state.Operation) string {
	return strings.ReplaceAll(string(shownState(op)), "_", " ")
}

// shownState is the state an operation's message shows. Records written
// before state.StateRefused existed say "failed" with the flag "refused"
// (the engine no longer writes the flag); they show as refused, emoji and
// label alike.
func shownState(op *state.Operation) state.OpState {
	if op.State == state.StateFailed && slices.Contains(op.Flags, "refused") {
		return state.StateRefused
	}
	return op.State
}

// ProgressBar renders done/total as ▰▰▰▱▱ 3/5.
func ProgressBar(done, total int) string {
	if total <= 0 {
		return ""
	}
	width := min(total, 10) // one cell per step up to ten steps
	n := min(done, total) * width / total
	return strings.Repeat("▰", n) + strings.Repeat("▱", width-n) + fmt.Sprintf(" %d/%d", done, total)
}

// RenderOperation renders an operation as its one chat message, without
// facts (no approvers, evidence or estimates).
func RenderOperation(op *state.Operation, lines []string, now time.Time) chat.Message {
	return Render(op, lines, nil, now)
}

// Render renders an operation as its one chat message. An operation with
// nodes (an upgrade, a rollback) shows them as a table: while it awaits
// approval as the approval card, while it runs with a bar over nodes and an
// ETA; one without nodes lists its steps.
func Render(op *state.Operation, lines []string, f *engine.Facts, now time.Time) chat.Message {
	title := fmt.Sprintf("%s %s · /talos %s · %s", StateEmoji(shownState(op)), StateLabel(op), op.Command, op.Cluster)
	m := chat.Message{Title: title}
	p := engine.DecodePlan(op.Plan)
	nodes := nodesOf(op, p, f)
	var b strings.Builder
	switch {
	case op.State == state.StateAwaitingApproval && p != nil:
		b.WriteString(cardBody(op, p, nodes, f, now) + "\n") // no node table: see cardBody
	case len(nodes) > 0:
		if ft := fromTo(nodes); ft != "" {
			fmt.Fprintf(&b, "%s on %s\n", ft, op.Cluster)
		}
		b.WriteString(nodeBar(nodes) + "\n")
		for _, l := range phases(op, p) {
			b.WriteString(l + "\n")
		}
		m.Table = nodeTable(nodes, now)
	case len(op.Steps) > 0:
		done := 0
		for _, s := range op.Steps {
			if s.Status == "ok" || s.Status == "skipped" || s.Status == "failed" {
				done++
			}
		}
		kinds := map[string]string{}
		noun := "steps" // a bar's count has its noun
		for _, s := range p.GetSteps() {
			kinds[s.GetId()] = s.GetKind()
		}
		if len(kinds) > 0 && !slices.ContainsFunc(p.GetSteps(), func(s *lifecyclev1.Step) bool { return s.GetKind() != "gate" }) {
			noun = "probes" // the health gate: every step is a probe
		}
		fmt.Fprintf(&b, "%s %s\n", ProgressBar(done, len(op.Steps)), noun)
		for _, s := range op.Steps {
			st, detail := chat.ShownStatus(s.Status, s.Detail)
			if st == "skipped" && kinds[s.ID] == "gate" {
				st = "not-checked" // a probe that did not run is not a skip
			}
			line := mark(st) + " " + s.Title
			if detail != "" && s.Status != "pending" {
				line += " — " + engine.FirstLine(detail)
			}
			b.WriteString(line + "\n")
		}
	}
	for _, l := range resultLines(op, nodes) {
		b.WriteString(l + "\n")
	}
	for _, l := range lines {
		b.WriteString(l + "\n")
	}
	if op.Error != "" {
		b.WriteString("error: " + op.Error + "\n")
	}
	m.Text = strings.TrimSpace(b.String())
	m.Fields = []chat.Field{
		{Label: "Operation", Value: op.ID},
		{Label: "State", Value: StateLabel(op)},
		{Label: "Requested by", Value: op.Requester},
	}
	if op.Digest != "" {
		m.Fields = append(m.Fields, chat.Field{Label: "Plan digest", Value: host.ShortDigest(op.Digest)})
	}
	if al := approvalLine(f); al != "" && op.State == state.StateAwaitingApproval {
		m.Fields = append(m.Fields, chat.Field{Label: "Approvals", Value: al})
	} else if ab := approvedBy(f, now); ab != "" {
		m.Fields = append(m.Fields, chat.Field{Label: "Approved by", Value: ab})
	}
	if op.State == state.StateAwaitingApproval && !op.ExpiresAt.IsZero() {
		m.Fields = append(m.Fields, chat.Field{Label: "Expires", Value: When(op.ExpiresAt, now)})
	}
	if op.State == state.StateAwaitingApproval && op.Disruptive {
		m.Fields = append(m.Fields, chat.Field{Label: "Estimated duration", Value: estimate(nodes, f)})
	}
	if !op.StartedAt.IsZero() {
		end := now
		if !op.EndedAt.IsZero() {
			end = op.EndedAt
		}
		elapsed := Duration(end.Sub(op.StartedAt))
		if end.Sub(op.StartedAt) < time.Second {
			elapsed = "under 1 s" // "0 s" read as if nothing ran
		}
		m.Fields = append(m.Fields, chat.Field{Label: "Elapsed", Value: elapsed})
	}
	if op.State == state.StateRunning && len(nodes) > 0 {
		m.Fields = append(m.Fields, chat.Field{Label: "ETA", Value: eta(nodes, f, now)})
	}
	return m
}

// resultLines are the summary and report lines of a finished operation,
// without the lines that only repeat a step's detail already shown above,
// nor a node's own line ("✅ cp-2 v1.12.6 → v1.13.9", "⏭️ cp-2 already at
// v1.13.9") when the node table shows that node: each node is listed once.
func resultLines(op *state.Operation, nodes []*node) []string {
	if op.Result == "" {
		return nil
	}
	all := strings.Split(op.Result, "\n")
	out := all[:1]
	for i, l := range all[1:] {
		if l == engine.EndingHeader {
			// The ending (bot/engine/endings.go) is the engine's own
			// words about every node, never a repeated step detail.
			return append(out, all[i+1:]...)
		}
		dup := slices.ContainsFunc(nodes, func(n *node) bool {
			return strings.HasPrefix(l, "✅ "+n.name+" ") || strings.HasPrefix(l, "⏭️ "+n.name+" already at ")
		})
		for _, s := range op.Steps {
			if s.Detail != "" && strings.HasSuffix(l, s.Detail) {
				dup = true
				break
			}
		}
		if !dup {
			out = append(out, l)
		}
	}
	return out
}
