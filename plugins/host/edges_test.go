package host

import (
	"log/slog"
	"os/exec"
	"strings"
	"testing"
)

// TestLineLoggerEveryLineOnceNoBlanks: the plugin's stdout/stderr is logged
// one debug record per non-empty line, also when a line follows an empty one
// (a newline at the very start of what is buffered), and blank lines make no
// empty records.
func TestLineLoggerEveryLineOnceNoBlanks(t *testing.T) {
	var out syncBuffer
	w := newLineLogger(slog.New(slog.NewTextHandler(&out, &slog.HandlerOptions{Level: slog.LevelDebug})), "stdout")
	for _, s := range []string{"first\n\n", "second\r\n", "\n", "third\n"} {
		if _, err := w.Write([]byte(s)); err != nil {
			t.Fatal(err)
		}
	}
	got := out.String()
	if n := strings.Count(got, "level=DEBUG"); n != 3 {
		t.Fatalf("%d records, want 3 (first, second, third):\n%s", n, got)
	}
	for _, line := range []string{"msg=first", "msg=second", "msg=third"} {
		if !strings.Contains(got, line+" stream=stdout") {
			t.Errorf("no %s record:\n%s", line, got)
		}
	}
}

// TestKillingAGoneGroupIsNoError: killing the process group of a plugin
// whose group has already emptied (the usual case after the reap) is not an
// error, so no warning is logged for it.
func TestKillingAGoneGroupIsNoError(t *testing.T) {
	cmd := exec.Command("true")
	isolate(cmd)
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	if err := killProcessGroup(cmd.Process.Pid); err != nil {
		t.Fatalf("killing the gone group of pid %d: %v", cmd.Process.Pid, err)
	}
}
