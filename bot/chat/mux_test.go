package chat_test

import (
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/talosbot/talosbot/bot/chat"
)

type recAdapter struct {
	name string
	mu   sync.Mutex
	log  []string
}

func (r *recAdapter) Post(_ context.Context, channel, thread string, m chat.Message) (string, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.log = append(r.log, "post "+channel+" "+thread+" "+m.Text)
	return r.name + "-ref", nil
}

func (r *recAdapter) Edit(_ context.Context, channel, ref string, m chat.Message) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.log = append(r.log, "edit "+channel+" "+ref+" "+m.Text)
	return nil
}

func TestMuxRoutesByPlatform(t *testing.T) {
	ctx := context.Background()
	web, sl, dc := &recAdapter{name: "web"}, &recAdapter{name: "slack"}, &recAdapter{name: "discord"}
	m := chat.NewMux(web, map[string]chat.Adapter{"slack": sl, "discord": dc, "matrix": nil})

	cases := []struct {
		channel string
		want    *recAdapter
	}{{"ops", web}, {"slack:C0123", sl}, {"discord:123456", dc}}
	for _, c := range cases {
		ref, err := m.Post(ctx, c.channel, "t1", chat.Message{Text: "hi"})
		if err != nil {
			t.Fatalf("post %s: %v", c.channel, err)
		}
		if ref != c.want.name+"-ref" {
			t.Fatalf("post %s went to %s", c.channel, ref)
		}
		if err := m.Edit(ctx, c.channel, ref, chat.Message{Text: "bye"}); err != nil {
			t.Fatal(err)
		}
		want := []string{"post " + c.channel + " t1 hi", "edit " + c.channel + " " + ref + " bye"}
		if strings.Join(c.want.log, "|") != strings.Join(want, "|") {
			t.Fatalf("%s got %q, want %q", c.want.name, c.want.log, want)
		}
	}
}

func TestMuxErrors(t *testing.T) {
	ctx := context.Background()
	m := chat.NewMux(nil, map[string]chat.Adapter{"slack": &recAdapter{name: "slack"}, "matrix": nil})
	for channel, want := range map[string]string{
		"":          "empty channel",
		"ops":       "web console is not enabled",
		"discord:1": `no adapter for platform "discord"`,
		"matrix:!x": `no adapter for platform "matrix"`,
		"slack:":    "no id",
	} {
		if _, err := m.Post(ctx, channel, "", chat.Message{}); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Post(%q) error = %v, want containing %q", channel, err, want)
		}
		if err := m.Edit(ctx, channel, "r", chat.Message{}); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Edit(%q) error = %v, want containing %q", channel, err, want)
		}
	}
}

func TestSplitQualify(t *testing.T) {
	for _, c := range []struct{ in, p, id string }{
		{"slack:C0123", "slack", "C0123"}, {"discord:42", "discord", "42"}, {"ops", "", "ops"},
	} {
		p, id := chat.SplitChannel(c.in)
		if p != c.p || id != c.id {
			t.Errorf("SplitChannel(%q) = %q,%q", c.in, p, id)
		}
		if q := chat.QualifyChannel(p, id); q != c.in {
			t.Errorf("QualifyChannel(%q,%q) = %q", p, id, q)
		}
	}
}
