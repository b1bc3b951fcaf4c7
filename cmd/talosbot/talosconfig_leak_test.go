package main

import (
	"strings"
	"syscall"
	"testing"

	"github.com/talosbot/talosbot/internal/servetest"
)

// TestTalosconfigErrorsShowNoSecret: a talosconfig credential that points at
// the wrong file (here a token) is reported with its line, never its text.
// Before, the YAML decoder's "cannot construct !!str `xoxb-SU...`" reached
// the card, the bot's log and the audit trail through the plugins' errors:
// the start of whatever secret the file held. Through the real bot and
// plugin processes.
func TestTalosconfigErrorsShowNoSecret(t *testing.T) {
	const secret = "xoxb-SECRETTOKEN-4f9a0c7d2b1e"
	b := servetest.Config{Dir: t.TempDir(), Clusters: []servetest.Cluster{{Name: "production",
		Endpoints: []string{"127.0.0.1"}, Talosconfig: []byte(secret + "\n"),
		Nodes: []string{"{name: cp-1, address: 127.0.0.1, role: controlplane, host: pve1}"}}}}.Bot(t, talosbotBinary(t))
	b.Start()
	t.Cleanup(func() { _ = b.Cmd.Process.Signal(syscall.SIGTERM); _ = b.Cmd.Wait() })

	for _, cmd := range []string{"/talos status production", "/talos snapshot production"} {
		b.Command("alice", "ops", cmd)
	}
	var shown []string
	b.WaitFor("both commands to report the talosconfig error", func() bool {
		shown = shown[:0]
		for _, m := range b.Messages("ops") {
			if strings.Contains(m.Text, "parse talosconfig") {
				shown = append(shown, m.Text)
			}
		}
		return len(shown) >= 2 && strings.Contains(strings.Join(shown, "\n"), "failed")
	})
	for _, s := range shown {
		if !strings.Contains(s, "line 1") {
			t.Errorf("the error does not name the line: %s", s)
		}
	}
	for _, m := range b.Messages("ops") {
		if strings.Contains(m.Text, secret[:7]) {
			t.Errorf("a message shows the start of the secret file: %s", m.Text)
		}
	}
	if strings.Contains(b.Stderr.String(), secret[:7]) {
		t.Errorf("the bot's log shows the start of the secret file:\n%s", b.Stderr)
	}
}
