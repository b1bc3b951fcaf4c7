package catalog

import (
	_ "embed"
	"fmt"
	"strings"
)

//go:embed settings.txt
var settingsTxt string

// Setting is one built-in's own setting (settings.txt): the key of its
// section plugins.Plugin, and the path it had before it moved out of the
// core, if it did.
type Setting struct {
	Plugin, Key, MovedFrom string
}

// Path is where the setting lives now: plugins.PLUGIN.KEY.
func (s Setting) Path() string { return "plugins." + s.Plugin + "." + s.Key }

// Settings parses settings.txt.
func Settings() ([]Setting, error) {
	var out []Setting
	for i, line := range strings.Split(settingsTxt, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Fields(line)
		if len(f) < 2 || len(f) > 3 {
			return nil, fmt.Errorf("plugins/catalog/settings.txt:%d: want \"PLUGIN KEY [OLD-PATH]\", got %q", i+1, line)
		}
		s := Setting{Plugin: f[0], Key: f[1]}
		if len(f) == 3 {
			s.MovedFrom = f[2]
		}
		out = append(out, s)
	}
	return out, nil
}

// MovedKeys maps each old path of a moved setting to the settings it
// became (one, or the same key of several plugins).
func MovedKeys() (map[string][]Setting, error) {
	all, err := Settings()
	if err != nil {
		return nil, err
	}
	out := map[string][]Setting{}
	for _, s := range all {
		if s.MovedFrom != "" {
			out[s.MovedFrom] = append(out[s.MovedFrom], s)
		}
	}
	return out, nil
}

// PerCluster reports whether the old path was a key of each cluster
// (clusters[].…): its new value is a list of cluster names.
func (s Setting) PerCluster() bool { return strings.HasPrefix(s.MovedFrom, "clusters[].") }
