// Package grammar parses `/talos …` command lines: a shell-like tokenizer and
// multi-word commands with positional arguments and flags, built from the
// plugin manifests and the bot's own command specs. It has no side effects.
package grammar

import (
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/talosbot/talosbot/bot/chat"
	"github.com/talosbot/talosbot/config"
	lifecyclev1 "github.com/talosbot/talosbot/plugins/sdk/proto/lifecycle/v1"
)

// CommandSpec is one command the grammar knows: a plugin command (from its
// manifest) or one the bot itself serves (status, audit, resume, …).
type CommandSpec struct {
	// Plugin is the plugin serving the command, or "" for a bot command.
	Plugin string
	*lifecyclev1.Command
	// Rest makes the last positional argument take the rest of the line,
	// words joined by one space (`help upgrade talos`); bot commands only.
	Rest bool
}

// Invocation is a parsed command line.
type Invocation struct {
	Spec CommandSpec
	// Args holds positional and flag values by argument name. Boolean flags are "true".
	Args map[string]string
	Text string
}

// Grammar parses `/talos …` lines against the known commands.
type Grammar struct {
	specs []CommandSpec // sorted by descending word count, then name
}

// NewGrammar builds a grammar; specs with more words win over their prefixes
// ("a b" before "a").
func NewGrammar(specs []CommandSpec) *Grammar {
	s := append([]CommandSpec(nil), specs...)
	sort.SliceStable(s, func(i, j int) bool {
		wi, wj := len(strings.Fields(s[i].Name)), len(strings.Fields(s[j].Name))
		if wi != wj {
			return wi > wj
		}
		return s[i].Name < s[j].Name
	})
	return &Grammar{specs: s}
}

// Specs returns the known commands sorted by name.
func (g *Grammar) Specs() []CommandSpec {
	out := append([]CommandSpec(nil), g.specs...)
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// Lookup returns the spec with exactly this name.
func (g *Grammar) Lookup(name string) (CommandSpec, bool) {
	for _, s := range g.specs {
		if s.Name == name {
			return s, true
		}
	}
	return CommandSpec{}, false
}

// UsageError is a command-line problem with the usage that fixes it.
type UsageError struct {
	Msg   string
	Usage string
}

func (e *UsageError) Error() string {
	if e.Usage == "" {
		return e.Msg
	}
	return e.Msg + "\nusage: " + e.Usage
}

// ErrEmpty is returned for a blank command line.
var ErrEmpty = errors.New("empty command")

// Parse turns a command line into an Invocation. It never has side effects.
func (g *Grammar) Parse(line string) (*Invocation, error) {
	text := strings.TrimSpace(line)
	toks, err := Tokenize(text)
	if err != nil {
		return nil, &UsageError{Msg: err.Error()}
	}
	// Accept "/talos status", "talos status", "<@U123> status" and "status".
	if len(toks) > 0 && (toks[0] == "/talos" || toks[0] == "talos" || (strings.HasPrefix(toks[0], "<@") && strings.HasSuffix(toks[0], ">"))) {
		toks = toks[1:]
	}
	if len(toks) == 0 {
		return nil, &UsageError{Msg: "no command given. " + g.CommandList()}
	}
	spec, ok := g.match(toks)
	if !ok {
		return nil, g.unknown(toks)
	}
	rest := toks[len(strings.Fields(spec.Name)):]
	args, err := bindArgs(spec, rest)
	if err != nil {
		return nil, err
	}
	return &Invocation{Spec: spec, Args: args, Text: "/talos " + strings.Join(toks, " ")}, nil
}

func (g *Grammar) match(toks []string) (CommandSpec, bool) {
	for _, s := range g.specs {
		words := strings.Fields(s.Name)
		if len(words) > len(toks) {
			continue
		}
		ok := true
		for i, w := range words {
			if !strings.EqualFold(toks[i], w) {
				ok = false
				break
			}
		}
		if ok {
			return s, true
		}
	}
	return CommandSpec{}, false
}

// unknown is the error for a line that names no command. It teaches: a
// first word that starts several commands ("upgrade staging …") names
// them with their usage, and a typo ("helth") gets the nearest command;
// only a word near nothing gets the whole list.
func (g *Grammar) unknown(toks []string) error {
	var starts, seconds, examples []string
	for _, s := range g.Specs() {
		if w := strings.Fields(s.Name); len(w) > 1 && strings.EqualFold(w[0], toks[0]) {
			starts = append(starts, "/talos "+s.Name)
			seconds = append(seconds, w[1])
			if s.GetExample() != "" {
				examples = append(examples, s.GetExample())
			}
		}
	}
	if len(starts) > 0 {
		got := toks[0]
		if len(toks) > 1 {
			// "upgrade tlaos" is a typo of one of them.
			if best := config.Closest(toks[1], seconds); best != "" && len(toks[1]) > 2 {
				return g.didYouMean(toks[0]+" "+toks[1], strings.ToLower(toks[0])+" "+best)
			}
			got += " " + toks[1]
		}
		eg := ""
		if len(examples) > 0 {
			eg = " (e.g. " + strings.Join(examples, "; ") + ")"
		}
		return &UsageError{Msg: fmt.Sprintf("unknown command %s; did you mean %s%s? Try /talos help %s.",
			chat.Echo(got), strings.Join(starts, " or "), eg, strings.ToLower(toks[0]))}
	}
	var names []string
	for _, s := range g.Specs() {
		names = append(names, s.Name)
	}
	// A word of one or two letters is near too much to guess from.
	if best := config.Closest(toks[0], names); best != "" && len(toks[0]) > 2 {
		return g.didYouMean(toks[0], best)
	}
	return &UsageError{Msg: fmt.Sprintf("unknown command %s. %s", chat.Echo(toks[0]), g.CommandList())}
}

func (g *Grammar) didYouMean(got, name string) error {
	s, _ := g.Lookup(name)
	return &UsageError{Msg: fmt.Sprintf("unknown command %s; did you mean /talos %s? Try /talos help %s.", chat.Echo(got), name, name),
		Usage: Usage(s.Command)}
}

// CommandList names every known command, for usage errors and help.
func (g *Grammar) CommandList() string {
	names := make([]string, 0, len(g.specs))
	for _, s := range g.Specs() {
		names = append(names, s.Name)
	}
	return "Commands: " + strings.Join(names, ", ") + ". Try /talos help <command>."
}

func bindArgs(spec CommandSpec, toks []string) (map[string]string, error) {
	usage := Usage(spec.Command)
	args := map[string]string{}
	var positional []*lifecyclev1.Arg
	flags := map[string]*lifecyclev1.Arg{}
	for _, a := range spec.GetArgs() {
		if a.GetFlag() {
			flags[a.GetName()] = a
		} else {
			positional = append(positional, a)
		}
	}
	var pos []string
	for i := 0; i < len(toks); i++ {
		t := toks[i]
		if !strings.HasPrefix(t, "--") || t == "--" {
			pos = append(pos, t)
			continue
		}
		name, val, hasVal := strings.Cut(t[2:], "=")
		a, ok := flags[name]
		if !ok {
			return nil, &UsageError{Msg: fmt.Sprintf("unknown flag --%s for %q%s", chat.Clip(name), spec.Name, flagHint(flags)), Usage: usage}
		}
		if _, dup := args[name]; dup {
			return nil, &UsageError{Msg: fmt.Sprintf("flag --%s given twice", name), Usage: usage}
		}
		switch {
		case a.GetBoolean() && hasVal:
			if val != "true" && val != "false" {
				return nil, &UsageError{Msg: fmt.Sprintf("flag --%s takes no value (got %s)", name, chat.Echo(val)), Usage: usage}
			}
			args[name] = val
		case a.GetBoolean():
			args[name] = "true"
		case hasVal:
			if val == "" {
				return nil, &UsageError{Msg: fmt.Sprintf("flag --%s needs a value", name), Usage: usage}
			}
			args[name] = val
		default:
			if i+1 >= len(toks) || strings.HasPrefix(toks[i+1], "--") {
				return nil, &UsageError{Msg: fmt.Sprintf("flag --%s needs a value", name), Usage: usage}
			}
			i++
			args[name] = toks[i]
		}
	}
	if spec.Rest && len(positional) > 0 && len(pos) > len(positional) {
		last := len(positional) - 1
		pos = append(pos[:last], strings.Join(pos[last:], " "))
	}
	if len(pos) > len(positional) {
		return nil, &UsageError{Msg: fmt.Sprintf("too many arguments: %s is not expected", chat.Echo(pos[len(positional)])), Usage: usage}
	}
	for i, a := range positional {
		if i < len(pos) {
			args[a.GetName()] = pos[i]
			continue
		}
		if a.GetRequired() {
			return nil, &UsageError{Msg: fmt.Sprintf("missing <%s>", a.GetName()), Usage: usage}
		}
	}
	for _, a := range spec.GetArgs() {
		if _, ok := args[a.GetName()]; !ok && a.GetDefaultValue() != "" {
			args[a.GetName()] = a.GetDefaultValue()
		}
		if a.GetFlag() && a.GetRequired() && args[a.GetName()] == "" {
			return nil, &UsageError{Msg: fmt.Sprintf("flag --%s is required", a.GetName()), Usage: usage}
		}
	}
	return args, nil
}

func flagHint(flags map[string]*lifecyclev1.Arg) string {
	if len(flags) == 0 {
		return " (it takes no flags)"
	}
	names := make([]string, 0, len(flags))
	for n := range flags {
		names = append(names, "--"+n)
	}
	sort.Strings(names)
	return " (flags: " + strings.Join(names, ", ") + ")"
}

// Usage renders a command's usage line, e.g.
// `/talos upgrade talos <version> [cluster] [--nodes VALUE]`.
func Usage(c *lifecyclev1.Command) string {
	parts := []string{"/talos", c.GetName()}
	for _, a := range c.GetArgs() {
		if a.GetFlag() {
			continue
		}
		if a.GetRequired() {
			parts = append(parts, "<"+a.GetName()+">")
		} else {
			parts = append(parts, "["+a.GetName()+"]")
		}
	}
	for _, a := range c.GetArgs() {
		if !a.GetFlag() {
			continue
		}
		f := "--" + a.GetName()
		if !a.GetBoolean() {
			f += " " + strings.ToUpper(a.GetName())
		}
		if a.GetRequired() {
			parts = append(parts, f)
		} else {
			parts = append(parts, "["+f+"]")
		}
	}
	return strings.Join(parts, " ")
}

// Tokenize splits a line like a POSIX shell would for words: whitespace
// separates, single quotes are literal, double quotes allow \" and \\, and a
// backslash outside quotes escapes the next character. Slack and Discord send
// typographic quotes from phones, so “ ” and ‘ ’ count as quotes too.
func Tokenize(s string) ([]string, error) {
	s = strings.NewReplacer("“", `"`, "”", `"`, "‘", "'", "’", "'").Replace(s)
	var (
		out   []string
		cur   strings.Builder
		inTok bool
	)
	rs := []rune(s)
	for i := 0; i < len(rs); i++ {
		r := rs[i]
		switch {
		case r == '\'':
			inTok = true
			j := i + 1
			for j < len(rs) && rs[j] != '\'' {
				cur.WriteRune(rs[j])
				j++
			}
			if j >= len(rs) {
				return nil, errors.New("unterminated single quote")
			}
			i = j
		case r == '"':
			inTok = true
			j := i + 1
			for ; j < len(rs) && rs[j] != '"'; j++ {
				if rs[j] == '\\' && j+1 < len(rs) && (rs[j+1] == '"' || rs[j+1] == '\\') {
					j++
				}
				cur.WriteRune(rs[j])
			}
			if j >= len(rs) {
				return nil, errors.New("unterminated double quote")
			}
			i = j
		case r == '\\':
			if i+1 >= len(rs) {
				return nil, errors.New("trailing backslash")
			}
			inTok = true
			i++
			cur.WriteRune(rs[i])
		case r == ' ' || r == '\t' || r == '\n' || r == '\r' || r == '\u00a0':
			if inTok {
				out = append(out, cur.String())
				cur.Reset()
				inTok = false
			}
		default:
			inTok = true
			cur.WriteRune(r)
		}
	}
	if inTok {
		out = append(out, cur.String())
	}
	return out, nil
}
