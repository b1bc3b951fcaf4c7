package main

import (
	"context"
	"log/slog"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/talosbot/talosbot/bot"
	"github.com/talosbot/talosbot/config"
)

// TestReadmeCommandsExist: every `/talos …` command the README names — in
// the tour, in prose and in the "Using it" list — is a command of the real
// catalogue (the bot's own and the built-in plugins' manifests), so a
// newcomer copying one never gets "unknown command".
func TestReadmeCommandsExist(t *testing.T) {
	host, err := newPluginHost(&config.Config{}, slog.New(slog.DiscardHandler), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer host.Close()
	cat, err := bot.Catalogue(context.Background(), host)
	if err != nil {
		t.Fatal(err)
	}
	known := map[string]bool{}
	for _, c := range cat {
		known[c.Name] = true
	}
	raw, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	readme := string(raw)
	var uses []string
	for _, m := range regexp.MustCompile("`(/talos [^`]+)`").FindAllStringSubmatch(readme, -1) {
		uses = append(uses, m[1])
	}
	_, usage, ok := strings.Cut(readme, "## Using it\n\n```\n")
	if !ok {
		t.Fatal(`README: no "## Using it" command list`)
	}
	usage, _, _ = strings.Cut(usage, "```")
	for _, line := range strings.Split(usage, "\n") {
		if cmd, _, _ := strings.Cut(line, "  "); strings.HasPrefix(cmd, "/talos ") {
			uses = append(uses, cmd)
		}
	}
	if len(uses) < 20 {
		t.Fatalf("found only %d commands in the README: %q", len(uses), uses)
	}
	for _, use := range uses {
		// "/talos resume <id> | abandon <id>" names two commands.
		for _, part := range strings.Split(strings.TrimPrefix(use, "/talos "), " | ") {
			words := strings.Fields(strings.TrimPrefix(strings.TrimSpace(part), "/talos "))
			found := false
			for n := len(words); n > 0 && !found; n-- {
				found = known[strings.Join(words[:n], " ")]
			}
			if !found {
				t.Errorf("README names %q (in %q): no such command", part, use)
			}
		}
	}
}
