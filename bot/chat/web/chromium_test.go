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

// TestConsoleInChromium drives the real page in headless Chromium: load it
// with the token in the URL fragment, run /talos health staging from the
// command box, see the live result (and its thread reply) arrive over SSE,
// switch to bob and click the button.
func TestConsoleInChromium(t *testing.T) {
	exe := chromiumPath(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()

	c := newConsole("s3cret-token")
	stub := newStub(c)
	srv := httptest.NewServer(c.Handler())
	defer srv.Close()

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
	defer cancelAlloc()
	browser, cancelBrowser := chromedp.NewContext(alloc)
	defer cancelBrowser()

	css := func(s string) chromedp.CSS { return chromedp.CSS(s) }
	text := func(sel string) string {
		t.Helper()
		v, err := chromedp.Run(browser, chromedp.Text(css(sel)))
		if err != nil {
			t.Fatalf("read %s: %v", sel, err)
		}
		return v
	}
	if err := chromedp.Do(browser,
		chromedp.Navigate(srv.URL+"/#token=s3cret-token"),
		chromedp.WaitVisible(css(`#live.on`)), // SSE stream open
	); err != nil {
		t.Fatalf("chromium: load: %v", err)
	}
	hash, err := chromedp.Run(browser, chromedp.Evaluate[string](`location.hash`))
	if err != nil {
		t.Fatal(err)
	}
	firstUser, err := chromedp.Run(browser, chromedp.Value(css(`#user`)))
	if err != nil {
		t.Fatal(err)
	}
	if err := chromedp.Do(browser,
		chromedp.SendKeys(css(`#cmd`), "/talos health staging"),
		chromedp.Click(css(`#send`)),
		chromedp.WaitVisible(css(`#messages .msg button[data-action="act-rerun"]`)),
		chromedp.WaitVisible(css(`#messages > .msg > .replies > .msg`)),
	); err != nil {
		t.Fatalf("chromium: run command: %v", err)
	}
	title := text(`#messages > .msg > .body > .title`)
	reply := text(`#messages > .msg > .replies > .msg .text`)
	if hash != "" {
		t.Errorf("token left in the address bar: %q", hash)
	}
	if firstUser != "alice" || !strings.Contains(title, "/talos health staging") || !strings.Contains(reply, "etcd") {
		t.Fatalf("user %q, title %q, reply %q", firstUser, title, reply)
	}
	stub.waitFor(t, ctx, "command", func() bool { return len(stub.commands) == 1 })
	if want := (chat.Command{User: "alice", Channel: "ops", Text: "/talos health staging"}); stub.commands[0] != want {
		t.Fatalf("command %+v", stub.commands[0])
	}

	if err := chromedp.Do(browser,
		chromedp.SetValue(css(`#user`), "bob"),
		chromedp.Click(css(`#messages .msg button[data-action="act-rerun"]`)),
	); err != nil {
		t.Fatalf("chromium: %v", err)
	}
	stub.waitFor(t, ctx, "click", func() bool { return len(stub.actions) == 1 })
	a := stub.actions[0]
	if a.User != "bob" || a.ActionID != "act-rerun" || a.Channel != "ops" || a.MessageRef == "" {
		t.Fatalf("click arrived as %+v, want bob's", a)
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
