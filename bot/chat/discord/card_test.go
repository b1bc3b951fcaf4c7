package discord_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/bwmarrin/discordgo"

	"github.com/talosbot/talosbot/bot/chat"
	"github.com/talosbot/talosbot/bot/chat/discord/discordfake"
	"github.com/talosbot/talosbot/bot/engine"
	"github.com/talosbot/talosbot/bot/render"
	"github.com/talosbot/talosbot/internal/rendertest"
)

// TestApprovalCardAndRunningUpgradeAsEmbeds posts the approval card and
// edits it into the running upgrade through the protocol fake, and reads
// the REST bodies back as discordgo's types: one embed whose description
// carries the node table in a closed monospace block, fields for the
// approvals and the ETA, and button components.
func TestApprovalCardAndRunningUpgradeAsEmbeds(t *testing.T) {
	h := newStub()
	fake, a, ctx := startGateway(t, h)
	op, f := rendertest.Awaiting()
	card := render.Render(op, nil, f, rendertest.Now)
	card.Buttons = []chat.Button{{ActionID: "tok-approve", Label: "Approve", Style: "primary"}, {ActionID: "tok-deny", Label: "Deny", Style: "danger"}, {ActionID: "tok-cancel", Label: "Cancel"}}
	ch := "discord:600000000000000001"
	ref, err := a.Post(ctx, ch, "", card)
	if err != nil {
		t.Fatal(err)
	}
	running, rf := rendertest.Running()
	live := render.Render(running, nil, rf, rendertest.Now)
	live.Buttons = []chat.Button{{ActionID: "tok-cancel2", Label: "Cancel", Style: "danger"}, {ActionID: "tok-pause", Label: "Pause"}}
	if err := a.Edit(ctx, ch, ref, live); err != nil {
		t.Fatal(err)
	}
	recs, err := fake.WaitFor(ctx, func(rs []discordfake.Record) bool {
		return len(filter(rs, rest("POST", "/channels/600000000000000001/messages"))) == 1 && len(filter(rs, rest("PATCH", "/channels/600000000000000001/messages/"))) == 1
	})
	if err != nil {
		t.Fatal(err)
	}
	type body struct {
		Embeds     []*discordgo.MessageEmbed `json:"embeds"`
		Components []json.RawMessage         `json:"components"`
	}
	read := func(raw []byte) (body, []discordgo.Button) {
		t.Helper()
		var b body
		if err := json.Unmarshal(raw, &b); err != nil {
			t.Fatal(err)
		}
		var buttons []discordgo.Button
		for _, c := range b.Components {
			mc, err := discordgo.MessageComponentFromJSON(c)
			if err != nil {
				t.Fatalf("discordgo cannot read the component: %v (%s)", err, c)
			}
			row, ok := mc.(*discordgo.ActionsRow)
			if !ok {
				t.Fatalf("component %T, want an actions row", mc)
			}
			for _, x := range row.Components {
				buttons = append(buttons, *x.(*discordgo.Button))
			}
		}
		return b, buttons
	}
	posted, buttons := read(filter(recs, rest("POST", "/channels/600000000000000001/messages"))[0].Body)
	if len(posted.Embeds) != 1 {
		t.Fatalf("embeds %+v", posted.Embeds)
	}
	e := posted.Embeds[0]
	if e.Title != "🕒 awaiting approval · /talos upgrade talos · production" || !strings.Contains(e.Description, "Order: worker-1 → worker-2 → cp-2 → cp-3 → cp-1") {
		t.Errorf("embed %q\n%s", e.Title, e.Description)
	}
	if strings.Contains(e.Description, "```") { // the table is on the running message only (bot/render/card.go)
		t.Errorf("node table block on the approval card:\n%s", e.Description)
	}
	fields := map[string]string{}
	for _, fl := range e.Fields {
		fields[fl.Name] = fl.Value
	}
	if fields["Approvals"] != "0/2 — may approve: bob, dave" || fields["Expires"] != "in 30 min, 2026-12-01 08:31 UTC" {
		t.Errorf("fields %v", fields)
	}
	if len(buttons) != 3 || buttons[0].Label != "Approve" || buttons[0].Style != discordgo.PrimaryButton || buttons[0].CustomID != "tok-approve" || buttons[1].Style != discordgo.DangerButton {
		t.Errorf("buttons %+v", buttons)
	}
	edited, ebuttons := read(filter(recs, rest("PATCH", "/channels/600000000000000001/messages/"))[0].Body)
	ed := edited.Embeds[0]
	if !strings.Contains(ed.Description, "▰▰▱▱▱ 2/5 nodes") || !strings.Contains(ed.Description, "cp-2      controlplane  v1.12.6 → v1.13.9  ⏳ running  3 min") {
		t.Errorf("running embed:\n%s", ed.Description)
	}
	efields := map[string]string{}
	for _, fl := range ed.Fields {
		efields[fl.Name] = fl.Value
	}
	if !strings.HasPrefix(efields["ETA"], "about 12 min") || !strings.HasPrefix(efields["Approved by"], "bob (13 min ago") {
		t.Errorf("running fields %v", efields)
	}
	if len(ebuttons) != 2 || ebuttons[1].Label != "Pause" || ebuttons[0].Style != discordgo.DangerButton {
		t.Errorf("running buttons %+v", ebuttons)
	}
}

// replyingHandler answers every click the way the engine answers a second
// Approve: through the renderer, marked as a click's answer.
type replyingHandler struct {
	*stubHandler
	r *render.Renderer
}

func (h replyingHandler) HandleAction(ctx context.Context, a chat.Action) error {
	h.r.Reply(ctx, engine.Origin{User: a.User, Channel: a.Channel, Click: true}, "you already approved 9c41d7e2b6a0; your approval is counted once")
	return nil
}

// TestClickAnswerIsEphemeral: the answer to a click is an ephemeral
// follow-up on the click's interaction token (flags 64), naming the
// clicker; nothing is posted in the channel.
func TestClickAnswerIsEphemeral(t *testing.T) {
	stub := newStub()
	fake, a, ctx := startGateway(t, stub)
	a.SetHandler(replyingHandler{stubHandler: stub, r: render.NewRenderer(a, nil, nil)})
	ia, err := fake.Click("500000000000000002", "600000000000000001", "700000000000000001", "tok-approve")
	if err != nil {
		t.Fatal(err)
	}
	recs, err := fake.WaitFor(ctx, func(rs []discordfake.Record) bool {
		return len(filter(rs, rest("POST", "/webhooks/"+fake.ApplicationID()+"/"+ia.Token))) == 1
	})
	if err != nil {
		t.Fatal(err)
	}
	var sent struct {
		Content string `json:"content"`
		Flags   int    `json:"flags"`
	}
	if err := json.Unmarshal(filter(recs, rest("POST", "/webhooks/"))[0].Body, &sent); err != nil {
		t.Fatal(err)
	}
	if sent.Flags&int(discordgo.MessageFlagsEphemeral) == 0 || sent.Content != "500000000000000002: you already approved 9c41d7e2b6a0; your approval is counted once" {
		t.Fatalf("follow-up %+v", sent)
	}
	if n := len(filter(recs, rest("POST", "/channels/600000000000000001/messages"))); n != 0 {
		t.Fatalf("%d channel posts; the answer must go to the clicker only", n)
	}
}
