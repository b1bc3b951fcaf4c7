package bot

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"google.golang.org/protobuf/encoding/protojson"

	"github.com/talosbot/talosbot/bot/chat"
	"github.com/talosbot/talosbot/plugins/host"
	lifecyclev1 "github.com/talosbot/talosbot/plugins/proto/lifecycle/v1"
	"github.com/talosbot/talosbot/state"
)

// MinEditInterval is the fastest an operation's message is edited; bursts of
// progress are coalesced and the latest state is always delivered.
const MinEditInterval = time.Second

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
	ref          string
	channel      string
	latest       chat.Message
	buttons      []chat.Button
	buttonsState state.OpState
	lastEdit     time.Time
	timerSet     bool
	dirty        bool
	forgetSet    bool // the view is dropped a while after the op ends
	editFailures int  // consecutive failed edits (reset by a successful one)
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

var _ Sink = (*Renderer)(nil)

// Reply posts a plain answer in the channel.
func (r *Renderer) Reply(ctx context.Context, to Origin, text string) {
	if _, err := r.adapter.Post(ctx, to.Channel, "", chat.Message{Text: text}); err != nil {
		r.log.Warn("reply", "channel", to.Channel, "err", err)
	}
}

// ReplyButtons posts an answer with buttons.
func (r *Renderer) ReplyButtons(ctx context.Context, to Origin, text string, buttons []Button) {
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

// Operation renders the operation's message, creating it on first use.
func (r *Renderer) Operation(ctx context.Context, u Update) {
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
	v.latest = RenderOperation(u.Op, u.Lines, r.clock.Now())
	v.latest.Buttons = v.buttons
	v.dirty = true
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
		return
	}
	r.mu.Unlock()
	r.flush(ctx, u.Op.ID)
}

// view returns the operation's view, posting its message if needed.
func (r *Renderer) view(ctx context.Context, op *state.Operation) *opView {
	r.mu.Lock()
	v := r.ops[op.ID]
	r.mu.Unlock()
	if v == nil || v.ref == "" {
		r.Operation(ctx, Update{Op: op})
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
	msg, ref := v.latest, v.ref
	v.dirty, v.timerSet = false, false
	v.lastEdit = r.clock.Now()
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

func toChatButtons(bs []Button) []chat.Button {
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
	}
	return "•"
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

// RenderOperation renders an operation as its one chat message.
func RenderOperation(op *state.Operation, lines []string, now time.Time) chat.Message {
	m := chat.Message{Title: fmt.Sprintf("%s /talos %s · %s", StateEmoji(op.State), op.Command, op.Cluster)}
	var b strings.Builder
	done := 0
	for _, s := range op.Steps {
		if s.Status == "ok" || s.Status == "skipped" || s.Status == "failed" {
			done++
		}
	}
	if op.State == state.StateAwaitingApproval && len(op.Plan) > 0 {
		b.WriteString(renderPlan(op.Plan))
	} else if len(op.Steps) > 0 {
		fmt.Fprintf(&b, "%s\n", ProgressBar(done, len(op.Steps)))
		for _, s := range op.Steps {
			line := chat.StatusMark(s.Status) + " " + s.Title
			if s.Detail != "" && s.Status != "pending" {
				line += " — " + firstLine(s.Detail)
			}
			b.WriteString(line + "\n")
		}
	}
	for _, l := range resultLines(op) {
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
		{Label: "State", Value: string(op.State)},
		{Label: "Requested by", Value: op.Requester},
	}
	if op.Digest != "" {
		m.Fields = append(m.Fields, chat.Field{Label: "Plan digest", Value: host.ShortDigest(op.Digest)})
	}
	if op.State == state.StateAwaitingApproval && !op.ExpiresAt.IsZero() {
		m.Fields = append(m.Fields, chat.Field{Label: "Approval expires", Value: op.ExpiresAt.UTC().Format("15:04 MST")})
	}
	if !op.StartedAt.IsZero() {
		end := now
		if !op.EndedAt.IsZero() {
			end = op.EndedAt
		}
		m.Fields = append(m.Fields, chat.Field{Label: "Elapsed", Value: end.Sub(op.StartedAt).Truncate(time.Second).String()})
	}
	return m
}

// resultLines are the summary and report lines of a finished operation,
// without the lines that only repeat a step's detail already shown above.
func resultLines(op *state.Operation) []string {
	if op.Result == "" {
		return nil
	}
	all := strings.Split(op.Result, "\n")
	out := all[:1]
	for _, l := range all[1:] {
		dup := false
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

// renderPlan shows what approvers approve: every step with its node,
// versions and installer image, the preconditions and the warnings.
func renderPlan(raw []byte) string {
	var p lifecyclev1.OperationPlan
	if err := protojson.Unmarshal(raw, &p); err != nil {
		return "(plan unreadable: " + err.Error() + ")\n"
	}
	var b strings.Builder
	if p.GetSummary() != "" {
		b.WriteString("Plan: " + p.GetSummary() + "\n")
	}
	for i, s := range p.GetSteps() {
		line := fmt.Sprintf("%d. %s", i+1, s.GetTitle())
		if s.GetNode() != "" && !strings.Contains(s.GetTitle(), s.GetNode()) {
			line += " [" + s.GetNode() + "]"
		}
		if s.GetFromVersion() != "" || s.GetToVersion() != "" {
			line += fmt.Sprintf(" %s → %s", s.GetFromVersion(), s.GetToVersion())
		}
		if s.GetImage() != "" {
			line += " `" + s.GetImage() + "`"
		}
		b.WriteString(line + "\n")
	}
	for _, pc := range p.GetPreconditions() {
		mark := "✅"
		if !pc.GetOk() {
			mark = "❌"
		}
		b.WriteString(fmt.Sprintf("%s %s %s\n", mark, pc.GetName(), pc.GetDetail()))
	}
	for _, w := range p.GetWarnings() {
		b.WriteString("⚠️ " + w + "\n")
	}
	return b.String()
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}
