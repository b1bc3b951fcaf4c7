package web_test

import (
	"context"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/talosbot/talosbot/bot/chat"
)

// chromiumPath finds Debian's chromium; without it the test is skipped,
// except in CI where a missing browser is a broken environment.
func chromiumPath(t *testing.T) string {
	t.Helper()
	for _, p := range []string{"/usr/bin/chromium", "chromium", "chromium-browser"} {
		if path, err := exec.LookPath(p); err == nil {
			return path
		}
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("chromium is not installed (apt-get install chromium); it is required in CI")
	}
	t.Skip("chromium not installed; apt-get install chromium to run the console browser test")
	return ""
}

// startBrowser starts headless Chromium for one test.
func startBrowser(t *testing.T, ctx context.Context) context.Context {
	t.Helper()
	exe := chromiumPath(t)
	alloc, cancelAlloc := chromedp.NewExecAllocator(ctx,
		chromedp.ExecPath(exe),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.UserDataDir(t.TempDir()),
	)
	t.Cleanup(cancelAlloc)
	browser, cancelBrowser := chromedp.NewContext(alloc)
	t.Cleanup(cancelBrowser)
	return browser
}

func css(s string) chromedp.CSS { return chromedp.CSS(s) }

func pageText(t *testing.T, browser context.Context, sel string) string {
	t.Helper()
	v, err := chromedp.Run(browser, chromedp.Text(css(sel)))
	if err != nil {
		t.Fatalf("read %s: %v", sel, err)
	}
	return v
}

// TestConsoleInChromium drives the real page in headless Chromium in serve
// mode: load it with alice's token in the URL fragment, see no user picker,
// run /talos health staging from the command box, see the live result (and
// its thread reply) arrive over SSE; sign out, paste bob's token into the
// sign-in form and click the button as bob.
func TestConsoleInChromium(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	c := newConsole(t, false)
	stub := newStub(c)
	srv := httptest.NewServer(c.Handler())
	t.Cleanup(srv.Close) // after the browser is gone: its event stream holds a request open
	browser := startBrowser(t, ctx)

	if err := chromedp.Do(browser,
		chromedp.Navigate(srv.URL+"/#token="+aliceTok),
		chromedp.WaitVisible(css(`#live.on`)), // SSE stream open
	); err != nil {
		t.Fatalf("chromium: load: %v", err)
	}
	hash, err := chromedp.Run(browser, chromedp.Evaluate[string](`location.hash`))
	if err != nil {
		t.Fatal(err)
	}
	if hash != "" {
		t.Errorf("token left in the address bar: %q", hash)
	}
	pickerHidden, err := chromedp.Run(browser, chromedp.Evaluate[bool](`document.getElementById("picker").hidden`))
	if err != nil {
		t.Fatal(err)
	}
	if who := pageText(t, browser, `#whoami`); who != "alice" || !pickerHidden {
		t.Fatalf("signed in as %q, picker hidden %v; want alice and no picker", who, pickerHidden)
	}
	if err := chromedp.Do(browser,
		chromedp.SendKeys(css(`#cmd`), "/talos health staging"),
		chromedp.Click(css(`#send`)),
		chromedp.WaitVisible(css(`#messages .msg button[data-action="act-rerun"]`)),
		chromedp.WaitVisible(css(`#messages > .msg > .replies > .msg`)),
	); err != nil {
		t.Fatalf("chromium: run command: %v", err)
	}
	title := pageText(t, browser, `#messages > .msg > .body > .title`)
	reply := pageText(t, browser, `#messages > .msg > .replies > .msg .text`)
	if !strings.Contains(title, "/talos health staging") || !strings.Contains(reply, "etcd") {
		t.Fatalf("title %q, reply %q", title, reply)
	}
	stub.waitFor(t, ctx, "command", func() bool { return len(stub.commands) == 1 })
	if want := (chat.Command{User: "alice", Channel: "ops", Text: "/talos health staging"}); stub.commands[0] != want {
		t.Fatalf("command %+v", stub.commands[0])
	}

	// Sign out; a wrong token is refused on the page; bob's is accepted.
	if err := chromedp.Do(browser,
		chromedp.Click(css(`#signout`)),
		chromedp.WaitVisible(css(`#signin`)),
		chromedp.SendKeys(css(`#token`), "not-a-real-console-token"),
		chromedp.Click(css(`#signin-btn`)),
	); err != nil {
		t.Fatalf("chromium: sign out: %v", err)
	}
	errText, err := chromedp.Run(browser, chromedp.Poll[string](`document.getElementById("error").textContent || false`, chromedp.WithPollingTimeout(20*time.Second)))
	if err != nil || !strings.Contains(errText, "not accepted") {
		t.Fatalf("wrong token: error shown %q, %v", errText, err)
	}
	if err := chromedp.Do(browser,
		chromedp.SendKeys(css(`#token`), bobTok),
		chromedp.Click(css(`#signin-btn`)),
		chromedp.WaitVisible(css(`#signedin`)),
		chromedp.WaitVisible(css(`#messages .msg button[data-action="act-rerun"]`)),
	); err != nil {
		t.Fatalf("chromium: sign in as bob: %v", err)
	}
	if who := pageText(t, browser, `#whoami`); who != "bob" {
		t.Fatalf("signed in as %q, want bob", who)
	}
	if err := chromedp.Do(browser, chromedp.Click(css(`#messages .msg button[data-action="act-rerun"]`))); err != nil {
		t.Fatalf("chromium: %v", err)
	}
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
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	c := newConsole(t, true)
	stub := newStub(c)
	srv := httptest.NewServer(c.Handler())
	t.Cleanup(srv.Close)
	browser := startBrowser(t, ctx)

	if err := chromedp.Do(browser,
		chromedp.Navigate(srv.URL+"/"),
		chromedp.WaitVisible(css(`#live.on`)),
		chromedp.WaitVisible(css(`#picker`)),
	); err != nil {
		t.Fatalf("chromium: load: %v", err)
	}
	firstUser, err := chromedp.Run(browser, chromedp.Value(css(`#user`)))
	if err != nil {
		t.Fatal(err)
	}
	if err := chromedp.Do(browser,
		chromedp.SendKeys(css(`#cmd`), "/talos health staging"),
		chromedp.Click(css(`#send`)),
		chromedp.WaitVisible(css(`#messages .msg button[data-action="act-rerun"]`)),
		chromedp.SetValue(css(`#user`), "bob"),
		chromedp.Click(css(`#messages .msg button[data-action="act-rerun"]`)),
	); err != nil {
		t.Fatalf("chromium: %v", err)
	}
	stub.waitFor(t, ctx, "click", func() bool { return len(stub.actions) == 1 })
	if firstUser != "alice" || stub.commands[0].User != "alice" || stub.actions[0].User != "bob" {
		t.Fatalf("picker %q, command %+v, click %+v", firstUser, stub.commands[0], stub.actions[0])
	}

	// A refused request shows its error on the page.
	if err := chromedp.Do(browser,
		chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
			_, err := chromedp.Evaluate[chromedp.Void](`(() => { const s = document.getElementById("user"); const o = document.createElement("option"); o.value = "mallory"; o.textContent = "mallory"; s.appendChild(o); s.value = "mallory"; })()`)(ctx, tg)
			return err
		}),
		chromedp.SendKeys(css(`#cmd`), "status"),
		chromedp.Click(css(`#send`)),
	); err != nil {
		t.Fatalf("chromium: %v", err)
	}
	errText, err := chromedp.Run(browser, chromedp.Poll[string](`document.getElementById("error").textContent || false`, chromedp.WithPollingTimeout(20*time.Second)))
	if err != nil {
		t.Fatalf("chromium: no error shown: %v", err)
	}
	if !strings.Contains(errText, "unknown user") {
		t.Fatalf("error shown: %q", errText)
	}
}
