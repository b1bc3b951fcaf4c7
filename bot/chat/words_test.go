package chat_test

import (
	"strings"
	"testing"

	"github.com/talosbot/talosbot/bot/chat"
)

// TestEchoIsShort: a reply quotes at most EchoRunes runes of what it
// refuses, so 60 KB of input is not posted back into the channel.
func TestEchoIsShort(t *testing.T) {
	if got := chat.Echo("prod"); got != `"prod"` {
		t.Fatalf("Echo(prod) = %s", got)
	}
	long := strings.Repeat("é", 60<<10)
	if got, want := chat.Echo(long), `"`+strings.Repeat("é", chat.EchoRunes)+`"…`; got != want {
		t.Fatalf("Echo(60 KB) = %.80s… (%d bytes), want %s", got, len(got), want)
	}
	if got, want := chat.Clip(long), strings.Repeat("é", chat.EchoRunes)+"…"; got != want {
		t.Fatalf("Clip(60 KB) = %.80s…", got)
	}
}
