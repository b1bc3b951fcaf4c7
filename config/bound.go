package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"strconv"
	"syscall"

	"go.yaml.in/yaml/v3"
)

// Bounds on a configuration document, checked before anything follows an
// alias: a few kilobytes of nested aliases ("billion laughs") expand to
// billions of values, and every walk that follows them (the unknown-key check,
// the decoder) would run for as long as that takes.
const (
	// MaxConfigSize is the largest configuration file read (1 MiB; a large
	// real one is a few tens of kilobytes).
	MaxConfigSize = 1 << 20
	// MaxAliases is the most aliases (*name) a document may use.
	MaxAliases = 100
	// MaxExpandedValues is the most values (mappings, sequences, scalars) the
	// document may hold once every alias is replaced by what it names.
	MaxExpandedValues = 100_000
	// MaxDepth is the deepest nesting of mappings and sequences.
	MaxDepth = 64
)

// ReadFile reads a configuration file of at most MaxConfigSize bytes.
func ReadFile(path string) ([]byte, error) {
	// O_NONBLOCK: opening a FIFO would otherwise wait for a writer before
	// the Stat below could refuse it, and config check would hang.
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, fmt.Errorf("read config: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("read config: %w", err)
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("read config %s: not a regular file; give the path of the YAML file", path)
	}
	data, err := io.ReadAll(io.LimitReader(f, MaxConfigSize+1))
	if err != nil {
		return nil, fmt.Errorf("read config: %w", err)
	}
	if len(data) > MaxConfigSize {
		return nil, fmt.Errorf("read config %s: larger than %d bytes (the config size limit); is it the right file?", path, MaxConfigSize)
	}
	return data, nil
}

// parseDocument parses data into a node tree, refusing what the bounds
// above refuse and a second document: yaml.Unmarshal reads only the first,
// so whatever follows a "---" would be silently ignored.
func parseDocument(data []byte) (*yaml.Node, error) {
	if len(data) > MaxConfigSize {
		return nil, fmt.Errorf("the document is larger than %d bytes (the config size limit)", MaxConfigSize)
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return &yaml.Node{Kind: yaml.DocumentNode}, nil // an empty file
		}
		return nil, syntaxError(data, err)
	}
	var next yaml.Node
	switch err := dec.Decode(&next); {
	case err == nil:
		return nil, fmt.Errorf("line %d: a second YAML document (after ---); talosbot reads exactly one document per file: merge it into the first or remove the ---", next.Line)
	case !errors.Is(err, io.EOF):
		return nil, fmt.Errorf("after the first document: %s", yamlMessage(err))
	}
	b := &budget{size: map[*yaml.Node]int{}, active: map[*yaml.Node]bool{}}
	if _, err := b.walk(&doc, 0); err != nil {
		return nil, err
	}
	return &doc, nil
}

// budget measures the document as the decoder will see it, aliases
// replaced, without replacing them: the expanded size of each node is
// computed once (size), so the walk is linear in the file, however much
// the aliases multiply.
type budget struct {
	aliases int
	size    map[*yaml.Node]int  // expanded size of each node already measured
	active  map[*yaml.Node]bool // nodes being measured (an alias to one is a cycle)
}

func (b *budget) walk(n *yaml.Node, depth int) (int, error) {
	if s, ok := b.size[n]; ok {
		return s, nil
	}
	if depth > MaxDepth {
		return 0, fmt.Errorf("line %d: nested more than %d levels deep (the nesting limit); flatten the document", n.Line, MaxDepth)
	}
	if b.active[n] {
		return 0, fmt.Errorf("line %d: an alias refers to the anchor that contains it; write the value out", n.Line)
	}
	b.active[n] = true
	defer delete(b.active, n)
	total := 1
	children := n.Content
	if n.Kind == yaml.AliasNode {
		if b.aliases++; b.aliases > MaxAliases {
			return 0, fmt.Errorf("line %d: more than %d aliases (the alias limit); write the values out instead of using *aliases", n.Line, MaxAliases)
		}
		if n.Alias == nil {
			return 0, fmt.Errorf("line %d: an alias names no anchor", n.Line)
		}
		children = []*yaml.Node{n.Alias}
	}
	for _, c := range children {
		s, err := b.walk(c, depth+1)
		if err != nil {
			return 0, err
		}
		if total += s; total > MaxExpandedValues {
			return 0, fmt.Errorf("line %d: the aliases expand the document to more than %d values (the alias limit, which stops alias bombs); write the values out instead of using *aliases", n.Line, MaxExpandedValues)
		}
	}
	b.size[n] = total
	return total, nil
}

var syntaxRE = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)

// syntaxError turns yaml.v3's "yaml: line N: msg" into "line L: msg" (which
// Decode reads as the error's line) with L the line that broke the
// document. yaml.v3 reports a parser error at the line where the enclosing
// block starts, counted from 0 — a mis-indented key on line 4 of a list
// that starts on line 2 is "line 1" — and a scanner error one line early.
// The shortest prefix of the document that fails the same way ends at the
// line that broke it. The scan starts at the line yaml.v3 names (the
// problem is never above its enclosing block) and is bounded, so a huge
// file costs at most maxSyntaxScan parses; past that, yaml.v3's line stands.
func syntaxError(data []byte, err error) error {
	sub := syntaxRE.FindStringSubmatch(yamlMessage(err))
	if sub == nil {
		return errors.New(yamlMessage(err))
	}
	line, _ := strconv.Atoi(sub[1])
	msg := sub[2]
	lines := bytes.SplitAfter(data, []byte("\n"))
	for k := max(line, 1); k <= len(lines) && k < line+maxSyntaxScan; k++ {
		var n yaml.Node
		perr := yaml.Unmarshal(bytes.Join(lines[:k], nil), &n)
		if perr == nil {
			continue
		}
		if s := syntaxRE.FindStringSubmatch(perr.Error()); s != nil && s[2] == msg {
			line = k
			break
		}
	}
	return fmt.Errorf("line %d: %s", line, msg)
}

// maxSyntaxScan bounds syntaxError's search for the line of a syntax error.
const maxSyntaxScan = 500
