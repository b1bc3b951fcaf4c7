package render

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/talosbot/talosbot/bot/chat"
	"github.com/talosbot/talosbot/bot/engine"
	"github.com/talosbot/talosbot/bot/escalate"
	"github.com/talosbot/talosbot/state"
)

// The renderer is the escalation's sink in talosbot serve: it must be able
// to mention, or the second late notice pings nobody.
var _ escalate.MentionSink = (*Renderer)(nil)

type postRecorder struct {
	mu    sync.Mutex
	posts []chat.Message
	refs  []string
}

func (a *postRecorder) Post(_ context.Context, _, thread string, m chat.Message) (string, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.posts, a.refs = append(a.posts, m), append(a.refs, thread)
	return "ref", nil
}

func (*postRecorder) Edit(context.Context, string, string, chat.Message) error { return nil }

// ThreadMention posts in the operation's thread a message whose Mentions
// carry the users, the text left as it is (the adapter escapes it).
func TestThreadMentionCarriesMentions(t *testing.T) {
	ad := &postRecorder{}
	r := NewRenderer(ad, &manualClock{now: time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)}, nil)
	ctx := context.Background()
	op := &state.Operation{ID: "op1", Command: "upgrade talos", Cluster: "production", Channel: "ops", State: state.StateRunning}
	r.Operation(ctx, engine.Update{Op: op})
	r.ThreadMention(ctx, op, "🔔 late", []string{"U0BOB"})
	if len(ad.posts) != 2 || ad.refs[1] != "ref" || ad.posts[1].Text != "🔔 late" || len(ad.posts[1].Mentions) != 1 || ad.posts[1].Mentions[0] != "U0BOB" {
		t.Fatalf("posts %+v in %v", ad.posts, ad.refs)
	}
}
