package bot_test

import (
	"context"
	"strings"
	"testing"

	"github.com/talosbot/talosbot/bot"
	"github.com/talosbot/talosbot/bot/engine"
	"github.com/talosbot/talosbot/bot/grammar"
)

// A Router that bot.New did not build has neither the engine's actions nor
// what its commands read: Serve refuses with an error naming bot.New, for
// every bot command, instead of a nil dereference halfway through one.
func TestUnbuiltRouterServesNothing(t *testing.T) {
	r := &bot.Router{}
	g := grammar.NewGrammar(r.Specs())
	for _, line := range []string{"/talos help", "/talos status", "/talos approve 3f2a9c01bd4e", `/talos freeze staging "drill"`} {
		inv, err := g.Parse(line)
		if err != nil {
			t.Fatalf("%s: %v", line, err)
		}
		err = r.Serve(context.Background(), engine.Origin{User: "alice", Channel: "ops"}, inv)
		if err == nil || !strings.Contains(err.Error(), "bot.New") {
			t.Fatalf("%s on an unbuilt router: %v; want a refusal naming bot.New", line, err)
		}
	}
}
