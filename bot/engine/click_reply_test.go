package engine_test

import (
	"context"
	"fmt"
	"github.com/talosbot/talosbot/bot/chat"
	"github.com/talosbot/talosbot/bot/render"
	"github.com/talosbot/talosbot/state"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// privateChat is a chat platform that can show a message to one user only
// (as Slack can): it records what the channel sees and what one user sees.
type privateChat struct {
	mu      sync.Mutex
	n       int
	public  []string // "channel: text", for everyone in the channel
	private []string // "channel/user: text", for that user alone
}

func (c *privateChat) Post(_ context.Context, channel, _ string, m chat.Message) (string, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.n++
	c.public = append(c.public, channel+": "+m.Text)
	return fmt.Sprint(c.n), nil
}

func (c *privateChat) Edit(context.Context, string, string, chat.Message) error { return nil }

func (c *privateChat) PostPrivate(_ context.Context, channel, user string, m chat.Message) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.private = append(c.private, channel+"/"+user+": "+m.Text)
	return nil
}

// saw reports whether the channel, and whether anyone privately, saw a
// message containing text.
func (c *privateChat) saw(text string) (public, private bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, m := range c.public {
		public = public || strings.Contains(m, text)
	}
	for _, m := range c.private {
		private = private || strings.Contains(m, text)
	}
	return public, private
}

// A clicked Cancel or Pause changes an operation everyone in the channel is
// watching, so its acknowledgement is posted in the channel (naming who
// clicked), not shown to the clicker alone as a refused or repeated click
// is (docs/CHAT.md).
func TestClickedCancelAndPauseAreAcknowledgedInTheChannel(t *testing.T) {
	platform := &privateChat{}
	e := newEnvConfig(t, nodesConfig, func(e *env) { e.also = render.NewRenderer(platform, nil, nil) })
	click := func(id, label string) {
		t.Helper()
		if err := e.eng.HandleAction(context.Background(), chat.Action{User: "alice", Channel: "stg", ActionID: e.sink.Button(t, id, label)}); err != nil {
			t.Fatalf("click %s on %s: %v", label, id, err)
		}
	}

	push, err := e.submit("alice", "stg", "/talos push")
	if err != nil {
		t.Fatal(err)
	}
	click(push, "Cancel")
	if pub, priv := platform.saw("cancelling " + push + " at alice's request"); !pub || priv {
		t.Errorf("cancel acknowledgement: in the channel %t, private %t; want the channel only\npublic: %q\nprivate: %q", pub, priv, platform.public, platform.private)
	}
	e.await(push, state.StateCancelled)

	roll, err := e.submit("alice", "stg", "/talos roll v2 --mode nodes-pause --drift "+filepath.Join(t.TempDir(), "versions"))
	if err != nil {
		t.Fatal(err)
	}
	e.awaitStep(roll, "node/cp-1/check", "ok")
	click(roll, "Pause")
	if pub, priv := platform.saw("pausing " + roll + " before its next node at alice's request"); !pub || priv {
		t.Errorf("pause acknowledgement: in the channel %t, private %t; want the channel only\npublic: %q\nprivate: %q", pub, priv, platform.public, platform.private)
	}
	e.await(roll, state.StateInterrupted)

	// A refused click still concerns the clicker alone.
	if err := e.eng.HandleAction(context.Background(), chat.Action{User: "alice", Channel: "stg", ActionID: "a-forged"}); err == nil {
		t.Fatal("a forged button was accepted")
	}
	if pub, priv := platform.saw("this button is unknown"); pub || !priv {
		t.Errorf("refused click: in the channel %t, private %t; want private only", pub, priv)
	}
}
