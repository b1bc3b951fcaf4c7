package slack_test

import (
	"encoding/json"
	"strings"
	"testing"

	goslack "github.com/slack-go/slack"

	"github.com/talosbot/talosbot/bot/chat"
	"github.com/talosbot/talosbot/bot/chat/slack/slackfake"
	"github.com/talosbot/talosbot/bot/engine"
	"github.com/talosbot/talosbot/bot/render"
	"github.com/talosbot/talosbot/internal/rendertest"
)

// TestApprovalCardAndRunningUpgradeAsBlockKit posts the approval card and the
// running upgrade through the adapter to the protocol fake and reads the
// Block Kit back with slack-go's own types (an unknown or malformed block
// fails to decode).
func TestApprovalCardAndRunningUpgradeAsBlockKit(t *testing.T) {
	h := newStub()
	fake, a, ctx := startSocket(t, h)
	op, f := rendertest.Awaiting()
	card := render.Render(op, nil, f, rendertest.Now)
	card.Buttons = []chat.Button{{ActionID: "tok-approve", Label: "Approve", Style: "primary"}, {ActionID: "tok-deny", Label: "Deny", Style: "danger"}, {ActionID: "tok-cancel", Label: "Cancel"}}
	ts, err := a.Post(ctx, "slack:C0OPS", "", card)
	if err != nil {
		t.Fatal(err)
	}
	running, rf := rendertest.Running()
	live := render.Render(running, nil, rf, rendertest.Now)
	live.Buttons = []chat.Button{{ActionID: "tok-cancel2", Label: "Cancel", Style: "danger"}, {ActionID: "tok-pause", Label: "Pause"}}
	if err := a.Edit(ctx, "slack:C0OPS", ts, live); err != nil {
		t.Fatal(err)
	}
	recs, err := fake.WaitFor(ctx, func(rs []slackfake.Record) bool {
		return len(seqOf(rs, api("chat.postMessage"))) == 1 && len(seqOf(rs, api("chat.update"))) == 1
	})
	if err != nil {
		t.Fatal(err)
	}
	decode := func(raw string) goslack.Blocks {
		t.Helper()
		var bs goslack.Blocks
		if err := json.Unmarshal([]byte(raw), &bs); err != nil {
			t.Fatalf("slack-go cannot read the blocks: %v\n%s", err, raw)
		}
		return bs
	}
	types := func(bs goslack.Blocks) string {
		var out []string
		for _, b := range bs.BlockSet {
			out = append(out, string(b.BlockType()))
		}
		return strings.Join(out, ",")
	}
	posted := decode(seqOf(recs, api("chat.postMessage"))[0].Params.Get("blocks"))
	// No table on the approval card: every node is pending (bot/render/card.go).
	if got := types(posted); got != "header,section,section,actions" {
		t.Fatalf("card blocks %s", got)
	}
	sec := posted.BlockSet[1].(*goslack.SectionBlock)
	if sec.Text.Type != goslack.MarkdownType || !strings.Contains(sec.Text.Text, "Order: worker-1 → worker-2 → cp-2 → cp-3 → cp-1") ||
		!strings.Contains(sec.Text.Text, "❔ not checked gate") {
		t.Errorf("card section %q", sec.Text.Text)
	}
	var fields []string
	for _, fl := range posted.BlockSet[2].(*goslack.SectionBlock).Fields {
		fields = append(fields, fl.Text)
	}
	all := strings.Join(fields, "\n")
	for _, want := range []string{"*Approvals*\n0/2 — may approve: bob, dave", "*Expires*\nin 30 min, 2026-12-01 08:31 UTC", "*Estimated duration*\nabout 25 min"} {
		if !strings.Contains(all, want) {
			t.Errorf("fields lack %q: %s", want, all)
		}
	}
	if els := posted.BlockSet[3].(*goslack.ActionBlock).Elements.ElementSet; len(els) != 3 || els[0].(*goslack.ButtonBlockElement).Style != goslack.StylePrimary {
		t.Errorf("buttons %+v", els)
	}
	updated := decode(seqOf(recs, api("chat.update"))[0].Params.Get("blocks"))
	if got := types(updated); got != "header,section,table,section,actions" {
		t.Fatalf("running blocks %s", got)
	}
	ut := updated.BlockSet[2].(*goslack.TableBlock)
	if c := ut.Rows[3][3].(*goslack.TableRawTextCell); c.Text != "⏳ running" {
		t.Errorf("cp-2 state cell %q", c.Text)
	}
	var ufields []string
	for _, fl := range updated.BlockSet[3].(*goslack.SectionBlock).Fields {
		ufields = append(ufields, fl.Text)
	}
	if u := strings.Join(ufields, "\n"); !strings.Contains(u, "*ETA*\nabout 12 min") || !strings.Contains(u, "*Approved by*\nbob (13 min ago") {
		t.Errorf("running fields %s", u)
	}
	if els := updated.BlockSet[4].(*goslack.ActionBlock).Elements.ElementSet; len(els) != 2 || els[1].(*goslack.ButtonBlockElement).Text.Text != "Pause" {
		t.Errorf("running buttons %+v", els)
	}
}

// TestClickAnswerIsEphemeral: the answer to a click (here a second Approve)
// goes to the clicker alone with chat.postEphemeral, naming them; nothing is
// posted in the channel.
func TestClickAnswerIsEphemeral(t *testing.T) {
	h := newStub()
	fake, a, ctx := startSocket(t, h)
	r := render.NewRenderer(a, nil, nil)
	r.Reply(ctx, engine.Origin{User: "U034BOB", Channel: "slack:C0OPS", Click: true}, "you already approved 9c41d7e2b6a0; your approval is counted once")
	r.Reply(ctx, engine.Origin{User: "U012ALICE", Channel: "slack:C0OPS"}, "typed answers stay in the channel")
	recs, err := fake.WaitFor(ctx, func(rs []slackfake.Record) bool {
		return len(seqOf(rs, api("chat.postEphemeral"))) == 1 && len(seqOf(rs, api("chat.postMessage"))) == 1
	})
	if err != nil {
		t.Fatal(err)
	}
	e := seqOf(recs, api("chat.postEphemeral"))[0].Params
	if e.Get("user") != "U034BOB" || e.Get("channel") != "C0OPS" || e.Get("text") != "U034BOB: you already approved 9c41d7e2b6a0; your approval is counted once" {
		t.Fatalf("ephemeral %v", e)
	}
	if p := seqOf(recs, api("chat.postMessage"))[0].Params; p.Get("text") != "typed answers stay in the channel" {
		t.Fatalf("channel post %v", p)
	}
}
