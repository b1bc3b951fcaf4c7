package chat_test

import (
	"strings"
	"testing"

	"github.com/talosbot/talosbot/bot/chat"
)

// Input of exactly EchoRunes runes is quoted whole, without "…"; one rune
// more is cut to EchoRunes and marked.
func TestEchoAndClipCutOnlyPastTheLimit(t *testing.T) {
	exact := strings.Repeat("é", chat.EchoRunes)
	if got := chat.Echo(exact); got != `"`+exact+`"` {
		t.Errorf("Echo of %d runes = %q, want it whole", chat.EchoRunes, got)
	}
	if got := chat.Clip(exact); got != exact {
		t.Errorf("Clip of %d runes = %q, want it whole", chat.EchoRunes, got)
	}
	over := exact + "x"
	if got := chat.Echo(over); got != `"`+exact+`"…` {
		t.Errorf("Echo of %d runes = %q", chat.EchoRunes+1, got)
	}
	if got := chat.Clip(over); got != exact+"…" {
		t.Errorf("Clip of %d runes = %q", chat.EchoRunes+1, got)
	}
}
