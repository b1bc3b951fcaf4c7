package web_test

import (
	"context"
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/talosbot/talosbot/bot/chat"
	"github.com/talosbot/talosbot/bot/chat/web"
	"github.com/talosbot/talosbot/internal/browsertest"
)

func css(s string) chromedp.CSS { return chromedp.CSS(s) }

// serveConsole serves c until the test ends (after the browser is gone: its
// event stream holds a request open).
func serveConsole(t *testing.T, c *web.Console) string {
	srv := httptest.NewServer(c.Handler())
	t.Cleanup(srv.Close)
	return srv.URL
}

// TestConsoleInChromium drives the real page in headless Chromium in serve
// mode: load it with alice's token in the URL fragment, see no user picker,
// run /talos health staging from the command box, see the live result (and,
// behind its thread toggle, its reply) arrive over SSE; sign out, paste
// bob's token into the sign-in form and click the button as bob.
func TestConsoleInChromium(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c := newConsole(t, false)
	stub := newStub(c)
	url := serveConsole(t, c)
	p := browsertest.Start(t, ctx)
	p.Do(chromedp.Navigate(url + "/#token=" + aliceTok))
	p.WaitVisible(`#live.on`) // SSE stream open
	p.AssertText(`#livetext`, "live")
	if hash := browsertest.Eval[string](p, `location.hash`); hash != "" {
		t.Errorf("token left in the address bar: %q", hash)
	}
	pickerHidden := browsertest.Eval[bool](p, `document.getElementById("picker").hidden`)
	if who := p.Text(`#whoami`); who != "alice" || !pickerHidden {
		t.Fatalf("signed in as %q, picker hidden %v; want alice and no picker", who, pickerHidden)
	}
	p.Do(chromedp.SendKeys(css(`#cmd`), "/talos health staging"), chromedp.Click(css(`#send`)))
	p.WaitVisible(`#messages .msg button[data-action="act-rerun"]`)
	p.WaitText(`#messages > .msg > details.thread > summary`, "Thread: 1 reply", "etcd: 1/1 members healthy")
	if p.Text(`#messages > .msg > details.thread > .replies`) != "" {
		t.Errorf("the thread shows its replies before it is opened")
	}
	p.Do(chromedp.Click(css(`#messages > .msg > details.thread > summary`)))
	p.WaitText(`#messages > .msg > details.thread > .replies > .msg .text`, "etcd")
	p.AssertText(`#messages > .msg > .body > .title`, "/talos health staging")
	p.Screenshot("health")
	stub.waitFor(t, ctx, "command", func() bool { return len(stub.commands) == 1 })
	if want := (chat.Command{User: "alice", Channel: "ops", Text: "/talos health staging"}); stub.commands[0] != want {
		t.Fatalf("command %+v", stub.commands[0])
	}

	// Sign out; a wrong token is refused on the page; bob's is accepted.
	p.Do(chromedp.Click(css(`#signout`)))
	p.WaitVisible(`#signin`)
	p.Do(chromedp.SendKeys(css(`#token`), "not-a-real-console-token"), chromedp.Click(css(`#signin-btn`)))
	p.WaitText(`#error`, "not accepted")
	p.Do(chromedp.SendKeys(css(`#token`), bobTok), chromedp.Click(css(`#signin-btn`)))
	p.WaitVisible(`#signedin`)
	p.WaitVisible(`#messages .msg button[data-action="act-rerun"]`)
	if who := p.Text(`#whoami`); who != "bob" {
		t.Fatalf("signed in as %q, want bob", who)
	}
	p.Do(chromedp.Click(css(`#messages .msg button[data-action="act-rerun"]`)))
	stub.waitFor(t, ctx, "click", func() bool { return len(stub.actions) == 1 })
	a := stub.actions[0]
	if a.User != "bob" || a.ActionID != "act-rerun" || a.Channel != "ops" || a.MessageRef == "" {
		t.Fatalf("click arrived as %+v, want bob's", a)
	}
}

// TestDemoConsoleInChromium: the demo's open console shows the user picker;
// switching to bob makes the click bob's, and a user not in the list is
// refused with the error shown on the page.
func TestDemoConsoleInChromium(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c := newConsole(t, true)
	stub := newStub(c)
	p := browsertest.Open(t, ctx, serveConsole(t, c)+"/")
	p.WaitConnected()
	p.WaitVisible(`#picker`)
	firstUser := browsertest.Eval[string](p, `document.getElementById("user").value`)
	p.SendCommand("/talos health staging")
	p.ActAs("bob")
	p.ClickButton("Run again")
	stub.waitFor(t, ctx, "click", func() bool { return len(stub.actions) == 1 })
	if firstUser != "alice" || stub.commands[0].User != "alice" || stub.actions[0].User != "bob" {
		t.Fatalf("picker %q, command %+v, click %+v", firstUser, stub.commands[0], stub.actions[0])
	}

	// A refused request shows its error on the page.
	browsertest.Eval[bool](p, `(() => { const s = document.getElementById("user"); const o = document.createElement("option"); o.value = "mallory"; o.textContent = "mallory"; s.appendChild(o); s.value = "mallory"; return true; })()`)
	p.Do(chromedp.SendKeys(css(`#cmd`), "status"), chromedp.Click(css(`#send`)))
	p.WaitText(`#error`, "unknown user")
}

// TestConsoleRendersMarkdownInChromium: the bot's markdown shows as bold,
// code, code blocks, lists, links and tables, and chat text that carries
// HTML — here a freeze reason — shows as text: no element, no script run.
func TestConsoleRendersMarkdownInChromium(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c := newConsole(t, true)
	bg := context.Background()
	_, _ = c.Post(bg, "ops", "", chat.Message{Title: "📋 Audit", Text: "*Audit* (last 1h), newest first\n" +
		"```\nSEQ  WHEN      WHO    WHAT\n  1  08:31:02  alice  upgrade talos\n```\n" +
		"• run `/talos op 3f2a9c01bd4e` for the record\n• see the Talos docs: https://www.talos.dev/v1.13/\n\n" +
		"| node | role | state |\n|---|---|---|\n| cp-1 | control plane | ✅ done |\n| worker-1 | worker | ⏳ running |",
		Fields: []chat.Field{{Label: "Digest", Value: "`9f2c01ab`"}}})
	_, _ = c.Post(bg, "ops", "", chat.Message{Title: "🧊 production frozen",
		Text: `reason: <img src=x onerror="window.pwned=1"><script>window.pwned=2</script> [x](javascript:window.pwned=3) <https://evil.example|Approve here>`})
	p := browsertest.Open(t, ctx, serveConsole(t, c)+"/")
	p.WaitText(`#messages`, "production frozen", "Audit")
	if got := p.Text(`#messages .msg .text strong`); got != "Audit" {
		t.Errorf("bold: %q", got)
	}
	p.AssertText(`#messages .msg .text pre`, "SEQ  WHEN      WHO    WHAT", "upgrade talos")
	p.AssertText(`#messages .msg .text li code`, "/talos op 3f2a9c01bd4e")
	p.AssertText(`#messages .msg .fields code`, "9f2c01ab")
	if href := browsertest.Eval[string](p, `document.querySelector("#messages .msg .text a").href`); href != "https://www.talos.dev/v1.13/" {
		t.Errorf("link href %q", href)
	}
	p.AssertText(`#messages .msg .text table`, "node", "worker-1", "⏳ running")
	if n := browsertest.Eval[int](p, `document.querySelectorAll("#messages .text td").length`); n != 6 {
		t.Errorf("table cells: %d, want 6", n)
	}
	injected := browsertest.Eval[string](p, `[document.querySelectorAll("#messages img, #messages script, #messages a[href^=javascript]").length, String(window.pwned)].join(" ")`)
	if injected != "0 undefined" {
		t.Errorf("chat text became markup: elements, window.pwned = %s", injected)
	}
	// A link shows where it goes: no label over another address.
	if disguised := browsertest.Eval[int](p, `[...document.querySelectorAll("#messages a")].filter(a => a.textContent !== a.getAttribute("href")).length`); disguised != 0 {
		t.Errorf("%d links show a label instead of their address", disguised)
	}
	p.AssertText(`#messages`, `reason: <img src=x onerror="window.pwned=1"><script>window.pwned=2</script>`)
	p.Screenshot("markdown")
}

// TestConsoleStaysShortInChromium: after 30 commands, each with a dozen
// thread replies, the page is still short — threads are collapsed behind a
// toggle that names their size and latest reply, a long answer is clipped
// behind "Show all" once a newer message follows it — and it has followed the
// conversation to the newest message. Scrolled up, a new message does not move the page but offers
// "New messages below".
func TestConsoleStaysShortInChromium(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c := newConsole(t, true)
	bg := context.Background()
	p := browsertest.Open(t, ctx, serveConsole(t, c)+"/")
	p.WaitVisible(`#live.on`)
	var last string
	for i := 1; i <= 30; i++ {
		ref, _ := c.Post(bg, "ops", "", chat.Message{Title: fmt.Sprintf("✅ done: /talos health staging #%d", i),
			Text: "▰▰▰▰▰ 7/7\n*every probe passed*", Fields: []chat.Field{{Label: "State", Value: "succeeded"}}})
		for j := 1; j <= 12; j++ {
			_, _ = c.Post(bg, "ops", ref, chat.Message{Text: fmt.Sprintf("✅ done: probe %d of run %d\n  etcd: 3/3 members healthy", j, i)})
		}
		last = ref
	}
	lines := make([]string, 80)
	for i := range lines {
		lines[i] = fmt.Sprintf("| %d | alice | upgrade talos |", i)
	}
	audit, _ := c.Post(bg, "ops", "", chat.Message{Title: "📋 Audit", Text: "| seq | who | what |\n|---|---|---|\n" + strings.Join(lines, "\n")})
	lastSel := fmt.Sprintf(`#messages > .msg[data-id=%q]`, audit)
	// The newest answer is shown whole; once another follows, it is clipped.
	p.WaitText(lastSel, "79")
	if clipped := browsertest.Eval[bool](p, fmt.Sprintf(`document.querySelector(%q).classList.contains("clamped")`, lastSel)); clipped {
		t.Errorf("the newest message is clipped")
	}
	_, _ = c.Post(bg, "ops", "", chat.Message{Title: "✅ done: /talos status"})
	p.WaitVisible(lastSel + ` button.more`)
	p.WaitText(fmt.Sprintf(`#messages > .msg[data-id=%q] > details.thread > summary`, last), "Thread: 12 replies", "latest: ✅ done: probe 12 of run 30")
	p.WaitJS("the page to follow to the newest message", `(() => { const m = document.querySelectorAll("#messages > .msg"); const r = m[m.length-1].getBoundingClientRect(); return r.top >= 0 && r.bottom <= innerHeight; })()`)
	p.Screenshot("after-30-commands")
	if h := p.PageHeight(); h > 12000 {
		t.Errorf("after 30 commands with 12 replies each the page is %.0f px tall; want under 12000", h)
	}
	if n := browsertest.Eval[int](p, `document.querySelectorAll("#messages details.thread[open]").length`); n != 0 {
		t.Errorf("%d threads open by default", n)
	}
	before := p.Measure(lastSel).Height
	p.Do(chromedp.Click(css(lastSel + ` button.more`)))
	p.WaitJS("the audit answer to open", fmt.Sprintf(`!document.querySelector(%q).classList.contains("clamped")`, lastSel))
	if after := p.Measure(lastSel).Height; after <= before {
		t.Errorf("Show all: %.0f px → %.0f px", before, after)
	}

	// Scrolled to the top, a new message leaves the page where it is.
	browsertest.Eval[bool](p, `(window.scrollTo(0, 0), true)`)
	p.WaitJS("the scroll to the top", `window.scrollY === 0`)
	_, _ = c.Post(bg, "ops", "", chat.Message{Title: "⏳ running: /talos upgrade talos v1.13.9 staging"})
	p.WaitVisible(`#newmsgs`)
	if y := browsertest.Eval[float64](p, `window.scrollY`); y != 0 {
		t.Errorf("a new message moved the page the reader scrolled up (scrollY %.0f)", y)
	}
	p.Do(chromedp.Click(css(`#newmsgs`)))
	p.WaitJS("the newest message in view", `(() => { const m = document.querySelectorAll("#messages > .msg"); const r = m[m.length-1].getBoundingClientRect(); return r.top >= 0 && r.bottom <= innerHeight; })()`)
}

// TestConsoleCardFitsOneScreenInChromium: a card of the size of an
// approval request (what, where, nodes, risks, evidence, approvers,
// expiry, buttons) with its steps in a collapsed "Details" thread post fits
// in one 1400×1000 screen — the harness's measure the approval card's own
// tests use.
func TestConsoleCardFitsOneScreenInChromium(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c := newConsole(t, true)
	bg := context.Background()
	ref, _ := c.Post(bg, "ops", "", chat.Message{Title: "🔐 awaiting approval: /talos upgrade talos v1.13.9 production",
		Text: "*Upgrade Talos* on *production*: v1.12.6 → v1.13.9, 5 nodes, one at a time\n" +
			"| # | node | role |\n|---|---|---|\n| 1 | worker-1 | worker |\n| 2 | worker-2 | worker |\n| 3 | cp-2 | control plane |\n| 4 | cp-3 | control plane |\n| 5 | cp-1 | control plane (etcd leader, last) |\n" +
			"*Risks:* each node reboots; etcd runs on 2 of 3 members while a control plane is down\n" +
			"*Evidence:* staging run `4c1d9e02aa17` succeeded 2 h ago · etcd snapshot 3 min old · health gate passed\n" +
			"*Approvals:* 0/1 — bob\n*Expires* in 30 min (2026-01-02 03:34 UTC) · estimated 12 min",
		Fields:  []chat.Field{{Label: "Requested by", Value: "alice"}, {Label: "Digest", Value: "`9f2c01ab`"}},
		Buttons: []chat.Button{{ActionID: "a1", Label: "Approve", Style: "primary"}, {ActionID: "a2", Label: "Reject", Style: "danger"}}})
	steps := make([]string, 38)
	for i := range steps {
		steps[i] = fmt.Sprintf("%d. gate probe %d on node %d", i+1, i+1, i%5+1)
	}
	_, _ = c.Post(bg, "ops", ref, chat.Message{Title: "Details", Text: strings.Join(steps, "\n")})
	p := browsertest.Open(t, ctx, serveConsole(t, c)+"/")
	sel := fmt.Sprintf(`#messages > .msg[data-id=%q]`, ref)
	p.WaitText(sel, "0/1 — bob", "Expires", "cp-1", "Thread: 1 reply")
	box := p.AssertFitsOneScreen(sel, "approval-card")
	if box.Height < 200 {
		t.Errorf("card measured %.0f px: not the card", box.Height)
	}
	// Opened, the details make it taller than a screen: the measure tells.
	p.Do(chromedp.Click(css(sel + ` > details.thread > summary`)))
	p.WaitText(sel+` > details.thread > .replies`, "gate probe 38 on node 3")
	if p.Measure(sel).Fits() {
		t.Errorf("with 38 steps open the card still fits one screen: the measure is wrong")
	}
}
