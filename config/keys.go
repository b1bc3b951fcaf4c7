package config

import (
	"fmt"
	"maps"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// keyCheck walks the YAML document against the Config type. It reports every
// unknown key with its path and the closest valid key (a misspelled key is
// otherwise silently ignored, and an ignored policy key can widen access),
// and it remembers the path of every line so that decode errors, which
// yaml.v3 reports by line, can be given a path too.
//
// An alias is followed to its anchor at most once for each type it is used
// as (seen): the anchor's keys are checked against that type, and a
// document whose aliases multiply (a "billion laughs") costs no more than
// its text.
type keyCheck struct {
	errs  []FieldError
	lines map[int]string // line → path of the value on that line
	paths map[string]int // path of each written key → its line
	seen  map[aliasUse]bool
}

type aliasUse struct {
	n *yaml.Node
	t reflect.Type
}

func checkKeys(doc *yaml.Node) ([]FieldError, *keyCheck) {
	k := &keyCheck{lines: map[int]string{}, paths: map[string]int{}, seen: map[aliasUse]bool{}}
	if doc.Kind == yaml.DocumentNode && len(doc.Content) == 1 {
		doc = doc.Content[0]
	}
	k.walk(doc, reflect.TypeOf(Config{}), "")
	return k.errs, k
}

var unmarshalerType = reflect.TypeOf((*yaml.Unmarshaler)(nil)).Elem()

func (k *keyCheck) walk(n *yaml.Node, t reflect.Type, path string) {
	if n.Kind == yaml.AliasNode {
		if n.Alias == nil || k.seen[aliasUse{n.Alias, t}] {
			return
		}
		k.seen[aliasUse{n.Alias, t}] = true
		n = n.Alias
	}
	if _, seen := k.lines[n.Line]; !seen && path != "" {
		k.lines[n.Line] = path
	}
	if _, seen := k.paths[path]; !seen && path != "" {
		k.paths[path] = n.Line
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t == rawNodeType {
		k.walkRaw(n, path) // a plugin's section: lines only, its plugin checks the keys
		return
	}
	if reflect.PointerTo(t).Implements(unmarshalerType) {
		return // a scalar with its own parser (Duration)
	}
	switch t.Kind() {
	case reflect.Struct:
		if n.Kind != yaml.MappingNode {
			return // yaml.v3 reports the type mismatch
		}
		fields := yamlFields(t)
		for i := 0; i+1 < len(n.Content); i += 2 {
			key, val := n.Content[i], n.Content[i+1]
			p := joinPath(path, key.Value)
			k.lines[key.Line] = p
			k.paths[p] = key.Line
			ft, ok := fields[key.Value]
			if rest, inline := fields[inlineMapKey]; !ok && inline {
				ft, ok = rest, true // a key of an inline map: any name
			}
			if !ok {
				k.errs = append(k.errs, FieldError{Path: p, Msg: unknownKey(key.Value, fields)})
				continue
			}
			k.walk(val, ft, p)
		}
	case reflect.Map:
		if n.Kind != yaml.MappingNode {
			return
		}
		for i := 0; i+1 < len(n.Content); i += 2 {
			key, val := n.Content[i], n.Content[i+1]
			p := joinPath(path, key.Value)
			k.lines[key.Line] = p
			k.paths[p] = key.Line
			k.walk(val, t.Elem(), p)
		}
	case reflect.Slice:
		if n.Kind != yaml.SequenceNode {
			return
		}
		for i, item := range n.Content {
			k.walk(item, t.Elem(), fmt.Sprintf("%s[%d]", path, i))
		}
	}
}

func joinPath(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// yamlFields maps the yaml key of each field of struct type t to its type.
func yamlFields(t reflect.Type) map[string]reflect.Type {
	out := map[string]reflect.Type{}
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		name, opts, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if name == "-" {
			continue
		}
		if slices.Contains(strings.Split(opts, ","), "inline") {
			ft := f.Type
			if ft.Kind() == reflect.Map {
				out[inlineMapKey] = ft.Elem()
				continue
			}
			for ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			if ft.Kind() == reflect.Struct {
				maps.Copy(out, yamlFields(ft))
			}
			continue
		}
		if name == "" {
			name = strings.ToLower(f.Name)
		}
		out[name] = f.Type
	}
	return out
}

func unknownKey(key string, fields map[string]reflect.Type) string {
	names := make([]string, 0, len(fields))
	for n := range fields {
		if n != inlineMapKey {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	if best := Closest(key, names); best != "" {
		return fmt.Sprintf("unknown key %q; did you mean %q?", key, best)
	}
	return fmt.Sprintf("unknown key %q; valid keys here: %s", key, strings.Join(names, ", "))
}

// Closest returns the candidate nearest to s by edit distance, or "" when
// none is near enough to be a plausible typo.
func Closest(s string, candidates []string) string {
	best, bestD := "", -1
	for _, c := range candidates {
		d := editDistance(strings.ToLower(s), strings.ToLower(c))
		if bestD < 0 || d < bestD {
			best, bestD = c, d
		}
	}
	if bestD < 0 || bestD > max(2, len(s)/3) {
		return ""
	}
	return best
}

// editDistance is the Levenshtein distance of a and b (bytes).
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

var lineRE = regexp.MustCompile(`^line (\d+): (.*)$`)

// decodeErrors turns yaml.v3's "line N: msg" errors into FieldErrors with
// the path that line belongs to.
func decodeErrors(msgs []string, lines map[int]string) []FieldError {
	out := make([]FieldError, 0, len(msgs))
	for _, m := range msgs {
		fe := FieldError{Path: "(document)", Msg: m}
		if sub := lineRE.FindStringSubmatch(m); sub != nil {
			n, _ := strconv.Atoi(sub[1])
			if p, ok := lines[n]; ok {
				fe = FieldError{Path: p, Msg: fmt.Sprintf("%s (line %d)", sub[2], n), Line: n}
			}
		}
		out = append(out, fe)
	}
	return out
}
