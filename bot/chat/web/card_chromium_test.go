package web_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/talosbot/talosbot/bot/engine"
	"github.com/talosbot/talosbot/bot/render"
	"github.com/talosbot/talosbot/internal/browsertest"
	"github.com/talosbot/talosbot/internal/rendertest"
)

// steppingClock moves on a few seconds at every reading, so the renderer
// never holds an edit back; its timers are not needed and never fire.
type steppingClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *steppingClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(5 * time.Second)
	return c.now
}

func (c *steppingClock) AfterFunc(time.Duration, func()) func() bool {
	return func() bool { return false }
}

func msgWith(text string) string {
	return fmt.Sprintf(`[...document.querySelectorAll("#messages > .msg")].find(m => m.querySelector(".title") ? m.querySelector(".title").textContent.includes(%q) : m.textContent.includes(%q)).dataset.id`, text, text)
}

// TestApprovalCardAndRunningUpgradeInChromium renders the five-node
// production upgrade through the renderer into the console: the approval
// card (with its steps in the collapsed Details thread post) is at most 20
// lines of a 1400×1000 screen with its Approve button on the screen as it
// arrives (issue 31: 40 lines, Approve on the bottom edge), and shows who
// may approve, the expiry with its date, the estimate and the nodes in
// order; the running upgrade shows the node table, the
// bar over nodes, the ETA and its Cancel and Pause buttons.
func TestApprovalCardAndRunningUpgradeInChromium(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c := newConsole(t, true)
	r := render.NewRenderer(c, &steppingClock{now: rendertest.Now}, nil)
	bg := context.Background()
	op, f := rendertest.AwaitingDemo()
	r.Operation(bg, engine.Update{Op: op, Facts: func(context.Context) *engine.Facts { return f },
		Buttons: []engine.Button{{ID: "a1", Label: "Approve", Style: "primary"}, {ID: "a2", Label: "Deny", Style: "danger"}, {ID: "a3", Label: "Cancel"}}})

	p := browsertest.Open(t, ctx, serveConsole(t, c)+"/")
	p.WaitText(`#messages`, "awaiting approval")
	card := fmt.Sprintf(`#messages > .msg[data-id=%q]`, browsertest.Eval[string](p, msgWith("awaiting approval")))
	p.WaitText(card, "Thread: 1 reply")
	p.AssertText(card, "Order: worker-1 → worker-2 → cp-2 → cp-3 → cp-1", "0/2 — may approve: bob, dave", "in 30 min, 2026-12-01 08:31 UTC", "about 25 min",
		"⚠️ warning: worker-2 runs the only replica", "⚠️ warning: no kubeconfig",
		"✅ ok staging: 5f2c81d0a9e4", "❔ not checked gate", "see Details in the thread")
	if browsertest.Eval[bool](p, fmt.Sprintf(`document.querySelector(%q) !== null`, card+` table`)) {
		t.Errorf("the approval card shows the node table; every node is pending, so it only repeats What and Order")
	}
	// The Approve button is on the screen as the card arrives, without
	// scrolling (issue 31: it sat on the screen's bottom edge).
	approve := card + ` button[data-action="a1"]`
	if b, ok := p.InViewport(approve); !ok {
		t.Errorf("the Approve button is at %.0f–%.0f px, not inside the %d×%d screen's %.0f–%.0f px; see %s", b.Top, b.Bottom, browsertest.Width, browsertest.Height, b.ScreenTop, b.ScreenBottom(), p.Screenshot("approval-card-arrived"))
	}
	box := p.AssertFitsOneScreen(card, "approval-card")
	if box.Height < 200 {
		t.Errorf("card measured %.0f px: not the card", box.Height)
	}
	lines := p.Lines(card)
	t.Logf("approval card: %d lines, %.0f px", lines, box.Height)
	if lines > 20 || lines < 10 {
		t.Errorf("the approval card shows %d lines at %d×%d, want at most 20 (and at least 10, or this is not the card)", lines, browsertest.Width, browsertest.Height)
	}
	// The steps are one click away, in the thread.
	p.Do(chromedp.Click(css(card + ` > details.thread > summary`)))
	p.WaitText(card+` > details.thread > .replies`, "Details: the 34 steps of plan", "node 5/5 cp-1: v1.12.6 → v1.13.9", "gate after: certificates")

	running, rf := rendertest.Running()
	running.ID = "running-op"
	r.Operation(bg, engine.Update{Op: running, Facts: func(context.Context) *engine.Facts { return rf },
		Buttons: []engine.Button{{ID: "b1", Label: "Cancel", Style: "danger"}, {ID: "b2", Label: "Pause"}}})
	p.WaitText(`#messages`, "⏳ running · /talos upgrade talos")
	live := fmt.Sprintf(`#messages > .msg[data-id=%q]`, browsertest.Eval[string](p, msgWith("⏳ running")))
	p.AssertText(live, "▰▰▱▱▱ 2/5 nodes", "gate before: ✅ 5 probes done, ❔ 1 probe not checked", "ETA", "about 12 min", "Approved by", "bob (13 min ago")
	p.AssertText(live+` table`, "worker-1", "✅ done", "4 min", "cp-2", "⏳ running", "3 min", "cp-1", "⬜ pending")
	p.AssertText(live+` button`, "Cancel")
	p.AssertText(live, "Pause")
	p.AssertFitsOneScreen(live, "running-upgrade")
}
