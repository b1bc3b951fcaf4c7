package main

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/talosbot/talosbot/internal/servetest"
	"github.com/talosbot/talosbot/plugins/sdk"
	"github.com/talosbot/talosbot/sim"
)

// TestPluginRefusalsQuoteAShortPrefix: a plugin refusal that quotes what the
// user typed (a version, a --nodes name) shows at most sdk.QuoteRunes runes
// of it, through the real bot and plugin processes (issue 29, defect 3: a
// 60 KB argument came back in full on the card, in R10 and R15).
func TestPluginRefusalsQuoteAShortPrefix(t *testing.T) {
	slow(t)
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := sim.Start(ctx, sim.Options{Dir: filepath.Join(dir, "sim"), Name: "staging", ControlPlanes: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	b := servetest.Config{Dir: dir, Releases: `{talos: [v1.12.6]}`, Clusters: []servetest.Cluster{{Sim: c}}}.Bot(t, talosbotBinary(t))
	b.Start()
	t.Cleanup(func() { _ = b.Cmd.Process.Kill(); _ = b.Cmd.Wait() })

	long := strings.Repeat("y", 60<<10)
	for _, tc := range []struct{ rule, command, want string }{
		{"R10", "upgrade talos v1.12." + long + " staging", `version "v1.12.` + strings.Repeat("y", sdk.QuoteRunes-len("v1.12.")) + `"…`},
		{"R15", "upgrade talos v1.12.6 staging --nodes " + long, `--nodes names "` + strings.Repeat("y", sdk.QuoteRunes) + `"…`},
	} {
		b.Command("alice", "ops", tc.command)
		var got servetest.Message
		b.WaitFor("the "+tc.rule+" refusal", func() bool {
			for _, m := range b.Messages("ops") {
				if strings.Contains(m.Text, tc.rule+":") {
					got = m
					return true
				}
			}
			return false
		})
		if len(got.Text) > 2048 || !strings.Contains(got.Text, tc.want) {
			t.Fatalf("%s: the refusal (%d bytes) does not quote a short prefix of the input: %.400s", tc.rule, len(got.Text), got.Text)
		}
	}
}
