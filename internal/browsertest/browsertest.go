// Package browsertest drives a page (the web console) in real headless
// Chromium for tests: open it at one operator's screen size, wait on a
// condition in the page (never a sleep), assert the text a person would see,
// keep PNG screenshots as artefacts, and measure whether an element fits in
// one screen.
//
// Screenshots go to $TALOSBOT_ARTIFACTS/<test name>/<name>.png (.ci/run sets
// it to a directory outside the repository and prints it), or to the test's
// temp dir. Without Chromium a test is skipped, except in CI (CI=true), where
// a missing browser is a broken environment.
package browsertest

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// The screen the console is checked at: a laptop browser window.
const (
	Width  = 1400
	Height = 1000
)

// Timeout bounds every wait; the test machine is shared and slow.
const Timeout = 60 * time.Second

// Chromium returns the path of Chromium (Debian's chromium package), or
// skips the test without it (fails it in CI).
func Chromium(t testing.TB) string {
	t.Helper()
	for _, p := range []string{"/usr/bin/chromium", "chromium", "chromium-browser"} {
		if path, err := exec.LookPath(p); err == nil {
			return path
		}
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("chromium is not installed (apt-get install chromium); it is required in CI")
	}
	t.Skip("chromium not installed; apt-get install chromium to run the browser tests")
	return ""
}

// ArtifactsDir is where this test's screenshots go:
// $TALOSBOT_ARTIFACTS/<test name>, created, or the test's temp dir.
func ArtifactsDir(t testing.TB) string {
	t.Helper()
	root := os.Getenv("TALOSBOT_ARTIFACTS")
	if root == "" {
		return t.TempDir()
	}
	dir := filepath.Join(root, safeName(t.Name()))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatalf("artifacts dir: %v", err)
	}
	return dir
}

var unsafeChars = regexp.MustCompile(`[^A-Za-z0-9._-]+`)

func safeName(s string) string { return strings.Trim(unsafeChars.ReplaceAllString(s, "_"), "_") }

// Page is one browser tab showing one page.
type Page struct {
	t   testing.TB
	ctx context.Context
}

// Start starts headless Chromium with a Width×Height viewport; it stops when
// the test ends. Open a page with Navigate.
func Start(t testing.TB, ctx context.Context) *Page {
	t.Helper()
	exe := Chromium(t)
	alloc, cancelAlloc := chromedp.NewExecAllocator(ctx,
		chromedp.ExecPath(exe),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.WindowSize(Width, Height),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.Flag("hide-scrollbars", true),
		chromedp.UserDataDir(t.TempDir()),
	)
	t.Cleanup(cancelAlloc)
	browser, cancelBrowser := chromedp.NewContext(alloc)
	t.Cleanup(cancelBrowser)
	p := &Page{t: t, ctx: browser}
	p.Do(chromedp.EmulateViewport(Width, Height))
	return p
}

// Open starts Chromium and navigates to url.
func Open(t testing.TB, ctx context.Context, url string) *Page {
	t.Helper()
	p := Start(t, ctx)
	p.Do(chromedp.Navigate(url))
	return p
}

// Do runs chromedp actions and fails the test on an error.
func (p *Page) Do(actions ...chromedp.Action[chromedp.Void]) {
	p.t.Helper()
	if err := chromedp.Do(p.ctx, actions...); err != nil {
		p.t.Fatalf("chromium: %v", err)
	}
}

// Eval evaluates a JavaScript expression and decodes its value into T.
func Eval[T any](p *Page, expr string) T {
	p.t.Helper()
	v, err := chromedp.Run(p.ctx, chromedp.Evaluate[T](expr))
	if err != nil {
		p.t.Fatalf("chromium: evaluate %s: %v", expr, err)
	}
	return v
}

// WaitJS waits until the JavaScript expression is truthy (polled on each
// frame), failing the test with what after Timeout.
func (p *Page) WaitJS(what, expr string) {
	p.t.Helper()
	if _, err := chromedp.Run(p.ctx, chromedp.Poll[chromedp.Void](expr, chromedp.WithPollingTimeout(Timeout))); err != nil {
		p.t.Fatalf("chromium: waiting for %s (%s): %v\npage text:\n%s", what, expr, err, p.pageTextOrErr())
	}
}

// WaitVisible waits until an element matching the CSS selector is visible.
func (p *Page) WaitVisible(sel string) {
	p.t.Helper()
	p.WaitJS("a visible "+sel, fmt.Sprintf(`(() => { const e = document.querySelector(%s); return !!e && !!(e.offsetWidth || e.offsetHeight || e.getClientRects().length); })()`, jsString(sel)))
}

// Text is the visible text of the first element matching sel (innerText:
// what is rendered, so a collapsed thread's replies are not in it).
func (p *Page) Text(sel string) string {
	p.t.Helper()
	return Eval[string](p, fmt.Sprintf(`(() => { const e = document.querySelector(%s); return e ? e.innerText : ""; })()`, jsString(sel)))
}

// WaitText waits until the visible text of sel contains every want, and
// returns it.
func (p *Page) WaitText(sel string, want ...string) string {
	p.t.Helper()
	wants, _ := json.Marshal(want)
	p.WaitJS(fmt.Sprintf("%s to show %q", sel, want), fmt.Sprintf(`(() => { const e = document.querySelector(%s); if (!e) return false; const t = e.innerText; return %s.every((w) => t.includes(w)); })()`, jsString(sel), wants))
	return p.Text(sel)
}

// AssertText fails the test unless the visible text of sel contains every want.
func (p *Page) AssertText(sel string, want ...string) {
	p.t.Helper()
	got := p.Text(sel)
	for _, w := range want {
		if !strings.Contains(got, w) {
			p.t.Errorf("the page's %s does not show %q; it shows:\n%s", sel, w, got)
		}
	}
}

// Screenshot stores a PNG of what the screen shows now as
// ArtifactsDir/name.png and returns its path.
func (p *Page) Screenshot(name string) string {
	p.t.Helper()
	return p.save(name, chromedp.CaptureScreenshot())
}

func (p *Page) save(name string, shot chromedp.Action[[]byte]) string {
	p.t.Helper()
	png, err := chromedp.Run(p.ctx, shot)
	if err != nil {
		p.t.Fatalf("chromium: screenshot %s: %v", name, err)
	}
	path := filepath.Join(ArtifactsDir(p.t), safeName(name)+".png")
	if err := os.WriteFile(path, png, 0o644); err != nil {
		p.t.Fatalf("write screenshot: %v", err)
	}
	p.t.Logf("screenshot %s", path)
	return path
}

// Box is where an element is, in CSS pixels of the page.
type Box struct {
	Top, Bottom, Height float64
	// ScreenHeight is the part of the viewport the page's own bars (a
	// sticky header, a fixed command line) leave for content.
	ScreenHeight float64
	// ScreenTop is where the screen's content starts, under any bar fixed
	// to the top (InViewport only).
	ScreenTop float64
}

// Fits reports whether the element is no taller than one screen.
func (b Box) Fits() bool { return b.Height <= b.ScreenHeight }

// fixedBarsJS sets top and bottom to the heights of the bars fixed or sticky
// at the viewport's top and bottom edges (not screen space for a message),
// for Measure and InViewport.
const fixedBarsJS = `let top = 0, bottom = 0;
		for (const o of document.querySelectorAll("body *")) {
			const pos = getComputedStyle(o).position;
			if (pos !== "fixed" && pos !== "sticky") continue;
			const r = o.getBoundingClientRect();
			if (r.height === 0 || r.width < innerWidth / 2 || r.height > innerHeight / 3) continue;
			if (r.top <= 0) top = Math.max(top, r.bottom); else if (r.bottom >= innerHeight) bottom = Math.max(bottom, innerHeight - r.top);
		}`

// Measure scrolls the first element matching sel to the top of the screen,
// just under any bar fixed to the top, and reports its box. Bars fixed or
// sticky at the top or bottom edge of the viewport are not screen space.
func (p *Page) Measure(sel string) Box {
	p.t.Helper()
	b := Eval[*Box](p, fmt.Sprintf(`(() => { const e = document.querySelector(%s); if (!e) return null;
		`+fixedBarsJS+`
		e.scrollIntoView({block: "start"});
		window.scrollBy(0, -top);
		const r = e.getBoundingClientRect();
		return {Top: r.top, Bottom: r.bottom, Height: r.height, ScreenHeight: innerHeight - top - bottom}; })()`, jsString(sel)))
	if b == nil {
		p.t.Fatalf("no element %s on the page", sel)
	}
	return *b
}

// AssertFitsOneScreen fails the test unless the element matching sel is
// at most one screen tall, and takes a screenshot of it (name) either way.
func (p *Page) AssertFitsOneScreen(sel, name string) Box {
	p.t.Helper()
	b := p.Measure(sel)
	path := p.Screenshot(name)
	p.t.Logf("%s: %.0f px of %.0f px", sel, b.Height, b.ScreenHeight)
	if !b.Fits() {
		p.t.Errorf("%s is %.0f px tall, more than one %d×%d screen (%.0f px between the page's bars); see %s", sel, b.Height, Width, Height, b.ScreenHeight, path)
	}
	return b
}

// Lines counts the rows of text the first element matching sel shows as
// a person reads them: every rendered line box of its text (a wrapped
// paragraph counts each line it wraps to), with boxes side by side (the
// cells of a table row, fields in a grid row, buttons in a bar) counted as
// one row. Text in collapsed parts (a closed <details>) is not rendered
// and not counted.
func (p *Page) Lines(sel string) int {
	p.t.Helper()
	n := Eval[*int](p, fmt.Sprintf(`(() => { const e = document.querySelector(%s); if (!e) return null;
		const rows = [];
		const walk = document.createTreeWalker(e, NodeFilter.SHOW_TEXT);
		for (let t = walk.nextNode(); t; t = walk.nextNode()) {
			// A closed <details> still lays its content out in Chromium;
			// checkVisibility says it is not shown.
			if (!t.textContent.trim() || !t.parentElement.checkVisibility({contentVisibilityAuto: true, visibilityProperty: true})) continue;
			const r = document.createRange(); r.selectNodeContents(t);
			for (const b of r.getClientRects()) if (b.width > 0 && b.height > 0) rows.push([b.top, b.bottom]);
		}
		rows.sort((a, b) => (a[0] + a[1]) - (b[0] + b[1]));
		let n = 0, bottom = -Infinity;
		for (const [top, bot] of rows) {
			// A box whose middle is above the bottom of the row before is
			// on that row (cells, fields and buttons side by side).
			if ((top + bot) / 2 > bottom) { n++; bottom = bot; }
		}
		return n; })()`, jsString(sel)))
	if n == nil {
		p.t.Fatalf("no element %s on the page", sel)
	}
	return *n
}

// InViewport reports whether the first element matching sel is wholly on
// the screen as it is now scrolled, between the page's fixed bars (see
// Measure), and returns its box.
func (p *Page) InViewport(sel string) (Box, bool) {
	p.t.Helper()
	b := Eval[*Box](p, fmt.Sprintf(`(() => { const e = document.querySelector(%s); if (!e) return null;
		`+fixedBarsJS+`
		const r = e.getBoundingClientRect();
		return {Top: r.top, Bottom: r.bottom, Height: r.height, ScreenHeight: innerHeight - top - bottom, ScreenTop: top}; })()`, jsString(sel)))
	if b == nil {
		p.t.Fatalf("no element %s on the page", sel)
	}
	return *b, b.Height > 0 && b.Top >= b.ScreenTop && b.Bottom <= b.ScreenBottom()
}

// ScreenBottom is where the screen's content ends, over any bar fixed to
// the bottom (a Box from InViewport).
func (b Box) ScreenBottom() float64 { return b.ScreenTop + b.ScreenHeight }

// PageHeight is the height of the whole document in CSS pixels.
func (p *Page) PageHeight() float64 {
	p.t.Helper()
	return Eval[float64](p, `document.documentElement.scrollHeight`)
}

func (p *Page) pageTextOrErr() string {
	v, err := chromedp.Run(p.ctx, chromedp.Evaluate[string](`document.body ? document.body.innerText : ""`))
	if err != nil {
		return "(unreadable: " + err.Error() + ")"
	}
	if len(v) > 4000 {
		v = v[len(v)-4000:]
	}
	return v
}

func jsString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// The web console's page (bot/chat/web/console.html), for tests that use
// it as an operator would.

// WaitConnected waits until the console's live stream is open.
func (p *Page) WaitConnected() {
	p.t.Helper()
	p.WaitVisible(`#live.on`)
}

// ActAs picks the user in the demo console's user picker.
func (p *Page) ActAs(user string) {
	p.t.Helper()
	if !Eval[bool](p, fmt.Sprintf(`(() => { const s = document.getElementById("user"); if (!s || ![...s.options].some((o) => o.value === %[1]s)) return false; s.value = %[1]s; s.dispatchEvent(new Event("change")); return true; })()`, jsString(user))) {
		p.t.Fatalf("the console's user picker has no %q", user)
	}
}

// SendCommand types a command into the console's command line and sends
// it; it fails the test when the console refuses it (the error it shows).
func (p *Page) SendCommand(text string) {
	p.t.Helper()
	p.Do(chromedp.SetValue(chromedp.CSS(`#cmd`), text), chromedp.Click(chromedp.CSS(`#send`)))
	p.WaitJS("the console to accept "+text, `document.getElementById("cmd").value === "" || document.getElementById("error").textContent !== ""`)
	if e := p.Text(`#error`); e != "" {
		p.t.Fatalf("the console refused %q: %s", text, e)
	}
}

// ClickButton clicks the newest button labelled label in the channel (a
// message's Approve, Cancel, Resume …), waiting until there is one.
func (p *Page) ClickButton(label string) {
	p.t.Helper()
	find := fmt.Sprintf(`[...document.querySelectorAll("#messages button[data-action]")].filter((b) => b.textContent === %s).pop()`, jsString(label))
	p.WaitJS("a "+label+" button", find+` !== undefined`)
	Eval[bool](p, `(`+find+`.click(), true)`)
}
