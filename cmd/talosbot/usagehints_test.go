package main

import (
	"context"
	"log/slog"
	"os"
	"regexp"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/talosbot/talosbot/bot"
	"github.com/talosbot/talosbot/bot/grammar"
	"github.com/talosbot/talosbot/config"
)

// TestUsageHintsParse: every command line the bot teaches parses, with the
// real grammar (the bot's own commands and the built-in plugins' manifests,
// policy flags included), as the command it names: the Slack manifest's
// usage hint, the README's "Using it" list (placeholders filled in), the
// README's backticked commands, and every command's help example. A hint
// that is not a command ("upgrade staging to v1.13.9") fails here.
func TestUsageHintsParse(t *testing.T) {
	host, err := newPluginHost(&config.Config{}, slog.New(slog.DiscardHandler), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer host.Close()
	g, err := bot.Grammar(context.Background(), host)
	if err != nil {
		t.Fatal(err)
	}
	parses := func(where, line string) {
		t.Helper()
		if _, err := g.Parse(line); err != nil {
			t.Errorf("%s: %q does not parse: %v", where, line, err)
		}
	}

	// The Slack manifest's usage hint: "health staging | upgrade talos v1.13.9 staging | …".
	raw, err := os.ReadFile("../../deploy/slack-app-manifest.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var man struct {
		Features struct {
			SlashCommands []struct {
				UsageHint string `yaml:"usage_hint"`
			} `yaml:"slash_commands"`
		}
	}
	if err := yaml.Unmarshal(raw, &man); err != nil || len(man.Features.SlashCommands) == 0 {
		t.Fatalf("slack manifest: %v %+v", err, man)
	}
	for _, sc := range man.Features.SlashCommands {
		hints := strings.Split(sc.UsageHint, "|")
		if len(hints) < 2 {
			t.Fatalf("slack manifest: usage hint %q", sc.UsageHint)
		}
		for _, h := range hints {
			parses("slack manifest usage_hint", fill(strings.TrimSpace(h)))
		}
	}

	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, usage, ok := strings.Cut(string(readme), "## Using it\n\n```\n")
	if !ok {
		t.Fatal(`README: no "## Using it" command list`)
	}
	usage, _, _ = strings.Cut(usage, "```")
	n := 0
	for _, line := range strings.Split(usage, "\n") {
		if !strings.HasPrefix(line, "/talos ") {
			continue
		}
		// "/talos resume <id> | abandon <id>    continue …" names two commands.
		for _, part := range strings.Split(line, " | ") {
			if cmd := usageOf(g, part); cmd != "" {
				parses("README Using it", fill(cmd))
				n++
			} else {
				t.Errorf("README Using it: %q names no command", part)
			}
		}
	}
	if n < 25 {
		t.Fatalf("README Using it: only %d commands found", n)
	}

	// Backticked commands in prose either parse or only name a command
	// ("`/talos upgrade talos` refuses …"): what is written is never wrong.
	for _, m := range regexp.MustCompile("`(/talos [^`]+)`").FindAllStringSubmatch(string(readme), -1) {
		_, err := g.Parse(fill(m[1]))
		if ue := (*grammar.UsageError)(nil); err != nil && !(asUsage(err, &ue) && strings.HasPrefix(ue.Msg, "missing <")) {
			t.Errorf("README: `%s` does not parse: %v", m[1], err)
		}
	}

	for _, s := range g.Specs() {
		if s.GetExample() == "" {
			t.Errorf("%q has no help example", s.Name)
			continue
		}
		inv, err := g.Parse(s.GetExample())
		if err != nil {
			t.Errorf("help example of %q: %q does not parse: %v", s.Name, s.GetExample(), err)
		} else if inv.Spec.Name != s.Name {
			t.Errorf("help example of %q: %q parses as %q", s.Name, s.GetExample(), inv.Spec.Name)
		}
	}
}

func asUsage(err error, ue **grammar.UsageError) bool {
	u, ok := err.(*grammar.UsageError)
	*ue = u
	return ok
}

// usageOf is the command part of a README usage line: the command's words,
// then its placeholders and flags, up to the description.
func usageOf(g *grammar.Grammar, part string) string {
	words := strings.Fields(strings.TrimPrefix(strings.TrimSpace(part), "/talos "))
	for n := min(len(words), 3); n > 0; n-- {
		if _, ok := g.Lookup(strings.Join(words[:n], " ")); !ok {
			continue
		}
		out := words[:n]
		for _, w := range words[n:] {
			if !placeholderRE.MatchString(w) && !strings.HasPrefix(w, "--") {
				break
			}
			out = append(out, w)
		}
		return "/talos " + strings.Join(out, " ")
	}
	return ""
}

var placeholderRE = regexp.MustCompile(`^("?<[^>]+>"?|\[[^\]]+\]|ID)$`)

// fill puts an example value in each placeholder of a usage line.
func fill(line string) string {
	var out []string
	for _, w := range strings.Fields(line) {
		if !placeholderRE.MatchString(w) {
			out = append(out, w)
			continue
		}
		switch name := strings.Trim(w, `"<>[]…`); name {
		case "id", "ID":
			out = append(out, "op-1")
		case "cluster":
			out = append(out, "staging")
		case "node":
			out = append(out, "cp-1")
		case "v", "version":
			out = append(out, "v1.13.9")
		case "reason":
			out = append(out, `"restore drill"`)
		case "snap":
			out = append(out, "snap-1")
		case "command":
			out = append(out, "upgrade talos")
		case "filters":
			out = append(out, "--since", "1h")
		default:
			out = append(out, "x-"+name)
		}
	}
	return strings.Join(out, " ")
}
