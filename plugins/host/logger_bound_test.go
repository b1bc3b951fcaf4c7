package host

import (
	"log/slog"
	"strings"
	"testing"
)

// TestLineLoggerFlushesAtMaxLine: output without a newline is buffered up
// to maxLine bytes; a buffer that reaches maxLine is logged at once (so a
// plugin that never ends its line cannot grow the bot's memory), and
// shorter output waits for its newline.
func TestLineLoggerFlushesAtMaxLine(t *testing.T) {
	var out syncBuffer
	w := newLineLogger(slog.New(slog.NewTextHandler(&out, &slog.HandlerOptions{Level: slog.LevelDebug})), "stdout")
	if _, err := w.Write([]byte(strings.Repeat("a", maxLine-1))); err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(out.String(), "level=DEBUG"); n != 0 {
		t.Fatalf("%d records after maxLine-1 bytes without a newline; want 0 (it waits for the newline)", n)
	}
	if _, err := w.Write([]byte("a")); err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(out.String(), "level=DEBUG"); n != 1 {
		t.Fatalf("%d records once the buffer holds maxLine bytes; want 1 (logged at once)", n)
	}
}
