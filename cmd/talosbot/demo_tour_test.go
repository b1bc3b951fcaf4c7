//go:build !demo

package main

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/talosbot/talosbot/internal/browsertest"
	"github.com/talosbot/talosbot/internal/servetest"
)

// TestDemoTourInChromium walks the README's "5-minute tour" against the
// real demo process in headless Chromium, as a person would (the console's
// command line, its user picker, its buttons), and keeps a screenshot of
// every step under $TALOSBOT_ARTIFACTS (.ci/run prints where). The approval
// card is checked where issue 31 found it wanting: at most 20 rendered lines
// at 1400×1000, its Approve button on the screen both as it arrives and
// with the card scrolled to the top. After bob's approval the buttons are
// gone, and a typed second approval is refused saying why, which is what
// the README now says.
func TestDemoTourInChromium(t *testing.T) {
	// Waits on processes and the sim's reboots, not the CPU: runs beside the package's other slow tests.
	t.Parallel()
	if testing.Short() {
		t.Skip("starts two simulated clusters and rolls them")
	}
	addr := servetest.FreeAddr(t)
	dataDir := filepath.Join(t.TempDir(), "demo")
	d := startDemo(t, "--listen", addr, "--data-dir", dataDir, "--reboot-delay", "1s")
	if !d.waitLine("talosbot demo is ready", 3*time.Minute) {
		t.Fatalf("the demo was not ready within 3 minutes (or exited); output:\n%s", d.output())
	}
	b := &servetest.Bot{T: t, Addr: addr}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	p := browsertest.Open(t, ctx, "http://"+addr+"/")
	p.WaitConnected()
	shot := func(step int, name string) { p.Screenshot(fmt.Sprintf("tour-%d-%s", step, name)) }
	// ended waits for the newest operation of command on cluster to finish.
	ended := func(command, cluster string, within time.Duration) servetest.Message {
		t.Helper()
		var got servetest.Message
		b.WaitForWithin("/talos "+command+" "+cluster+" to end", within, func() bool {
			for _, m := range b.Messages("ops") {
				if strings.Contains(m.Title, "· /talos "+command+" · "+cluster) {
					switch m.Field("State") {
					case "succeeded", "failed", "refused", "cancelled", "denied", "expired":
						got = m
						return true
					}
				}
			}
			return false
		})
		return got
	}
	// newMessages waits until the channel shows more messages than before.
	count := func() int { return browsertest.Eval[int](p, `document.querySelectorAll("#messages > .msg").length`) }
	newMessages := func(what string, before int) {
		t.Helper()
		p.WaitJS(what, fmt.Sprintf(`document.querySelectorAll("#messages > .msg").length > %d`, before))
	}

	// 1. The console, as alice.
	shot(1, "console")

	// 2–4. Health, a snapshot and the staging upgrade, one after another.
	for i, c := range []struct{ command, cluster, typed string }{
		{"health", "staging", "/talos health staging"},
		{"snapshot", "staging", "/talos snapshot staging"},
		{"upgrade talos", "staging", "/talos upgrade talos v1.13.9 staging"},
	} {
		p.SendCommand(c.typed)
		if m := ended(c.command, c.cluster, 6*time.Minute); m.Field("State") != "succeeded" {
			shot(i+2, strings.ReplaceAll(c.command, " ", "-"))
			t.Fatalf("%s: %s\n%s", c.typed, m.Title, m.Text)
		}
		shot(i+2, strings.ReplaceAll(c.command, " ", "-"))
	}

	// 5. The production upgrade waits for approval: the card fits one
	// screen with Approve in view.
	p.SendCommand("/talos upgrade talos v1.13.9 production")
	var id string
	b.WaitForWithin("the production approval card with its buttons", 3*time.Minute, func() bool {
		for _, m := range b.Messages("ops") {
			if m.Button("Approve") != "" && strings.Contains(m.Title, "awaiting approval · /talos upgrade talos · production") {
				id = m.Field("Operation")
				return true
			}
		}
		return false
	})
	card := `#messages > .msg[data-id="` + browsertest.Eval[string](p, `[...document.querySelectorAll("#messages > .msg")].filter((m) => m.innerText.includes("awaiting approval · /talos upgrade talos · production")).pop().dataset.id`) + `"]`
	approve := card + ` button[data-action]:first-of-type`
	p.WaitText(card, "Approve", "Thread: 1 reply", "may approve: bob")
	if lbl := p.Text(approve); lbl != "Approve" {
		t.Fatalf("the card's first button is %q, want Approve", lbl)
	}
	if bx, ok := p.InViewport(approve); !ok {
		t.Errorf("as the card arrives, Approve is at %.0f–%.0f px, outside the screen's %.0f–%.0f px", bx.Top, bx.Bottom, bx.ScreenTop, bx.ScreenBottom())
	}
	shot(5, "approval-card")
	box := p.AssertFitsOneScreen(card, "tour-5-approval-card-top")
	if bx, ok := p.InViewport(approve); !ok {
		t.Errorf("with the card at the top of the screen, Approve is at %.0f–%.0f px, outside %.0f–%.0f px", bx.Top, bx.Bottom, bx.ScreenTop, bx.ScreenBottom())
	}
	if n := p.Lines(card); n > 20 {
		t.Errorf("the approval card is %d lines (%.0f px) at %d×%d, want at most 20:\n%s", n, box.Height, browsertest.Width, browsertest.Height, p.Text(card))
	} else {
		t.Logf("approval card: %d lines, %.0f px", n, box.Height)
	}
	// Approving it yourself is refused.
	before := count()
	p.ClickButton("Approve")
	newMessages("alice's own approval to be answered", before)
	p.WaitText(`#messages`, "refused:")
	// bob approves: the card records it; Approve and Deny give way to
	// Cancel and Pause.
	p.ActAs("bob")
	p.ClickButton("Approve")
	b.WaitForWithin("bob's approval to start the roll", 3*time.Minute, func() bool {
		for _, m := range b.Messages("ops") {
			if m.Field("Operation") == id && m.Field("State") == "running" && strings.Contains(m.Field("Approved by"), "bob") {
				return m.Button("Approve") == "" && m.Button("Deny") == "" && m.Button("Cancel") != "" && m.Button("Pause") != ""
			}
		}
		return false
	})
	shot(5, "running")
	// A second approval has no button; typed, it is refused, saying why.
	before = count()
	p.SendCommand("/talos approve " + id)
	newMessages("the second approval to be answered", before)
	p.WaitText(`#messages`, "operation "+id+" is running; there is nothing to approve")
	shot(5, "second-approval")

	// 6. carol, a viewer, is refused.
	p.ActAs("carol")
	before = count()
	p.SendCommand("/talos upgrade k8s 1.36.3 production")
	newMessages("carol's upgrade to be refused", before)
	p.WaitJS("carol's refusal", `[...document.querySelectorAll("#messages > .msg")].pop().innerText.includes("refused")`)
	shot(6, "viewer-refused")

	// 7. The audit trail and the maintenance record.
	p.ActAs("alice")
	p.SendCommand("/talos audit --since 1h")
	p.WaitJS("the audit answer", `document.querySelector("#messages .msg .text pre") !== null`)
	shot(7, "audit")
	before = count()
	p.SendCommand("/talos op " + id)
	newMessages("the maintenance record", before)
	shot(7, "op-record")

	// 8. An alert posted the way Alertmanager does.
	token, err := os.ReadFile(filepath.Join(dataDir, "demo-token"))
	if err != nil {
		t.Fatal(err)
	}
	alert, err := os.ReadFile("../../deploy/examples/alert.json")
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+addr+"/api/alerts/alertmanager", bytes.NewReader(alert))
	req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(token)))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		t.Fatalf("the alert was answered %s", resp.Status)
	}
	p.WaitJS("the alert's suggestion buttons", `(() => { const l = [...document.querySelectorAll("#messages button[data-action]")].map((b) => b.textContent); return l.some((x) => x.includes("health production")) && l.some((x) => x.includes("status production")); })()`)
	shot(8, "alert-suggestion")

	d.interrupt()
}
