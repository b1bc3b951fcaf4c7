package chat

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
)

// Channel ids are platform-qualified strings, the same everywhere a channel is
// named (Command.Channel, Adapter calls, config's clusters[].channels):
//
//	slack:C0123ABCD    a Slack channel id
//	discord:1234567890 a Discord channel (snowflake) id
//	ops                a web console channel: a plain name without a colon
//
// A qualified id never changes meaning when a second platform is added, and a
// plain name can never collide with a platform's ids.

// Platform names used as channel prefixes.
const (
	PlatformSlack   = "slack"
	PlatformDiscord = "discord"
)

// SplitChannel splits a channel id into its platform and the platform's own
// id. A plain name (the console) has platform "".
func SplitChannel(channel string) (platform, id string) {
	if p, rest, ok := strings.Cut(channel, ":"); ok {
		return p, rest
	}
	return "", channel
}

// QualifyChannel returns the channel id for a platform's own channel id.
func QualifyChannel(platform, id string) string {
	if platform == "" {
		return id
	}
	return platform + ":" + id
}

// Mux is an Adapter that routes each call to the adapter of the channel's
// platform. Adapters receive the channel id unchanged (qualified), so an
// adapter behaves the same behind a Mux or used alone.
type Mux struct {
	plain     Adapter
	platforms map[string]Adapter
}

var _ Adapter = (*Mux)(nil)

// NewMux returns a Mux. plain serves console channels (nil: none);
// platforms maps a platform name ("slack", "discord") to its adapter. Nil
// adapters are ignored, so callers can pass disabled platforms as nil.
func NewMux(plain Adapter, platforms map[string]Adapter) *Mux {
	m := &Mux{plain: plain, platforms: map[string]Adapter{}}
	for p, a := range platforms {
		if a != nil {
			m.platforms[p] = a
		}
	}
	return m
}

func (m *Mux) route(channel string) (Adapter, error) {
	if channel == "" {
		return nil, fmt.Errorf("chat: empty channel id")
	}
	p, id := SplitChannel(channel)
	if p == "" {
		if m.plain == nil {
			return nil, fmt.Errorf("chat: channel %q is a console channel but the web console is not enabled; enable chat.web or use a qualified id such as slack:C0123", channel)
		}
		return m.plain, nil
	}
	if id == "" {
		return nil, fmt.Errorf("chat: channel %q has no id after %q", channel, p+":")
	}
	a, ok := m.platforms[p]
	if !ok {
		known := make([]string, 0, len(m.platforms))
		for k := range m.platforms {
			known = append(known, k)
		}
		sort.Strings(known)
		return nil, fmt.Errorf("chat: no adapter for platform %q (channel %q); configured platforms: [%s]; configure chat.%s or fix the channel id",
			p, channel, strings.Join(known, ", "), p)
	}
	return a, nil
}

// Post routes to the channel's adapter.
func (m *Mux) Post(ctx context.Context, channel, threadRef string, msg Message) (string, error) {
	a, err := m.route(channel)
	if err != nil {
		return "", err
	}
	return a.Post(ctx, channel, threadRef, msg)
}

// Edit routes to the channel's adapter.
func (m *Mux) Edit(ctx context.Context, channel, ref string, msg Message) error {
	a, err := m.route(channel)
	if err != nil {
		return err
	}
	return a.Edit(ctx, channel, ref, msg)
}

// PostPrivate routes to the channel's adapter; ErrNoPrivate when it cannot
// show a message to one user only.
func (m *Mux) PostPrivate(ctx context.Context, channel, user string, msg Message) error {
	a, err := m.route(channel)
	if err != nil {
		return err
	}
	p, ok := a.(Private)
	if !ok {
		return ErrNoPrivate
	}
	return p.PostPrivate(ctx, channel, user, msg)
}

// ErrNoPrivate says the adapter cannot post to one user only.
var ErrNoPrivate = errors.New("chat: this platform has no private messages")
