package config

import (
	"encoding/json"
	"fmt"
	"math"
	"reflect"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"
)

// A plugin's configuration is its own section, plugins.NAME, of any shape.
// The core never reads it: it converts the section to JSON and hands it to
// the plugin, which decodes it strictly (sdk.DecodeConfig) in its
// ValidateConfig, called by `config check` and serve, and in every request.
// A setting that must differ per cluster is keyed by cluster name inside the
// plugin's section (the plugin gets the cluster names to check the keys);
// there is no generic per-cluster override, so that each plugin decides.
// docs/CONFIG.md.

// inlineMapKey marks an inline map in yamlFields: any key not a field is its.
const inlineMapKey = "\x00inline"

var rawNodeType = reflect.TypeFor[yaml.Node]()

// walkRaw records the line of every key inside a plugin's section, so that
// the plugin's problems, which name paths, get their lines.
func (k *keyCheck) walkRaw(n *yaml.Node, path string) {
	if n.Kind == yaml.AliasNode {
		return // the anchor's lines are recorded where it is written
	}
	switch n.Kind {
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			key, val := n.Content[i], n.Content[i+1]
			p := joinPath(path, key.Value)
			k.lines[key.Line] = p
			k.paths[p] = key.Line
			k.walkRaw(val, p)
		}
	case yaml.SequenceNode:
		for i, item := range n.Content {
			p := fmt.Sprintf("%s[%d]", path, i)
			if _, seen := k.paths[p]; !seen {
				k.paths[p] = item.Line
			}
			k.walkRaw(item, p)
		}
	}
}

// reservedPluginKeys are the keys of plugins: that are the core's own; no
// plugin may be named so, or its section could not be written.
var reservedPluginKeys = []string{"external", "pass_env"}

// PluginSectionNames lists the plugins that have a section, sorted.
func (p Plugins) PluginSectionNames() []string {
	names := make([]string, 0, len(p.Sections))
	for n := range p.Sections {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// PluginSection returns the named plugin's section as JSON, or nil when the
// config has none. The error says why the YAML has no JSON form (a key that
// is not a string, a non-finite number); validatePluginSections reports it.
func (p Plugins) PluginSection(name string) ([]byte, error) {
	n, ok := p.Sections[name]
	if !ok {
		return nil, nil
	}
	var v any
	if err := n.Decode(&v); err != nil {
		return nil, fmt.Errorf("%s", yamlMessage(err))
	}
	v, err := jsonable(v, "")
	if err != nil {
		return nil, err
	}
	return json.Marshal(v)
}

// jsonable turns a decoded YAML value into one encoding/json can write:
// maps must have string keys and numbers must be finite.
func jsonable(v any, path string) (any, error) {
	switch t := v.(type) {
	case map[string]any:
		for k, e := range t {
			c, err := jsonable(e, joinPath(path, k))
			if err != nil {
				return nil, err
			}
			t[k] = c
		}
		return t, nil
	case map[any]any:
		out := make(map[string]any, len(t))
		for k, e := range t {
			ks, ok := k.(string)
			if !ok {
				return nil, fmt.Errorf("%s: the key %v is not a string; plugin sections take string keys", path, k)
			}
			c, err := jsonable(e, joinPath(path, ks))
			if err != nil {
				return nil, err
			}
			out[ks] = c
		}
		return out, nil
	case []any:
		for i, e := range t {
			c, err := jsonable(e, fmt.Sprintf("%s[%d]", path, i))
			if err != nil {
				return nil, err
			}
			t[i] = c
		}
		return t, nil
	case float64:
		if math.IsInf(t, 0) || math.IsNaN(t) {
			return nil, fmt.Errorf("%s: %v is not a finite number", path, t)
		}
	}
	return v, nil
}

// validatePluginSections checks what the core can about the sections: that
// each has a JSON form and that no section takes a reserved name. Which
// plugin a name belongs to, and what its section may hold, is for the
// plugins to say (`config check` asks them).
func (c *Config) validatePluginSections() []FieldError {
	var errs []FieldError
	for i, ext := range c.Plugins.External {
		if slices.Contains(reservedPluginKeys, ext.Name) {
			errs = append(errs, FieldError{Path: fmt.Sprintf("plugins.external[%d].name", i), Msg: fmt.Sprintf("%q is a key of plugins: itself, so its section could not be written; rename the plugin", ext.Name)})
		}
	}
	for _, name := range c.Plugins.PluginSectionNames() {
		p := "plugins." + name
		if strings.TrimSpace(name) == "" {
			errs = append(errs, FieldError{Path: p, Msg: "is not a plugin name"})
			continue
		}
		if _, err := c.Plugins.PluginSection(name); err != nil {
			msg := err.Error()
			sub, rest, found := strings.Cut(msg, ": ")
			if found && sub != "" && !strings.HasPrefix(sub, "line ") {
				errs = append(errs, FieldError{Path: p + "." + sub, Msg: rest})
				continue
			}
			errs = append(errs, FieldError{Path: p, Msg: strings.TrimPrefix(msg, ": ")})
		}
	}
	return errs
}
