package main

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"sync"

	"github.com/talosbot/talosbot/config"
	"github.com/talosbot/talosbot/plugins/catalog"
	"github.com/talosbot/talosbot/plugins/host"
)

// checkPluginSections asks the plugins to validate their own sections
// (plugins.NAME), which the core never reads: every external plugin, and
// every built-in that has a section (a built-in without one runs on its
// defaults, which plugins/builtin's TestBuiltInsAcceptNoSection proves
// valid, so config check starts no built-in for a config that configures
// none). A section no plugin owns is an error, as an unknown key is. The
// plugins' problems come back with their paths inside the section, prefixed
// here with plugins.NAME.
func checkPluginSections(ctx context.Context, c *config.Config, m *host.Manager) []config.FieldError {
	names := m.Names()
	var errs []config.FieldError
	for _, s := range c.Plugins.PluginSectionNames() {
		if !slices.Contains(names, s) {
			errs = append(errs, config.FieldError{Path: "plugins." + s, Msg: unknownPluginSection(s, names)})
		}
	}
	external := map[string]bool{}
	for _, e := range c.Plugins.External {
		external[e.Name] = true
	}
	var (
		mu sync.Mutex
		wg sync.WaitGroup
	)
	clusters := c.ClusterNames()
	for _, name := range names {
		section, err := c.Plugins.PluginSection(name)
		if err != nil {
			continue // the document's own check reports it (validatePluginSections)
		}
		if section == nil && !external[name] {
			continue
		}
		wg.Go(func() {
			problems, err := m.ValidateConfig(ctx, name, section, clusters)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, config.FieldError{Path: "plugins." + name, Msg: fmt.Sprintf("the plugin could not check its section: %v", err)})
				return
			}
			for _, p := range problems {
				path := "plugins." + name
				if p.GetPath() != "" {
					path += "." + p.GetPath()
				}
				errs = append(errs, config.FieldError{Path: path, Msg: p.GetMessage()})
			}
		})
	}
	wg.Wait()
	slices.SortStableFunc(errs, func(a, b config.FieldError) int { return strings.Compare(a.Path, b.Path) })
	return errs
}

// unknownPluginSection explains a section under plugins: that no plugin
// owns: a typo of a plugin's name or of one of the keys plugins: has itself.
func unknownPluginSection(name string, plugins []string) string {
	candidates := append([]string{"external", "pass_env"}, plugins...)
	if best := config.Closest(name, candidates); best != "" {
		return fmt.Sprintf("no plugin is named %q; did you mean %q?", name, best)
	}
	return fmt.Sprintf("no plugin is named %q (plugins: %s; add an external plugin under plugins.external first)", name, strings.Join(plugins, ", "))
}

// movedKeys rewrites the document's "unknown key" error of each setting that
// moved out of the core into a built-in's section (plugins/catalog's
// settings.txt) into how to move it. Old configs are refused rather than
// read in their old place: reading them would keep the setting in the core
// for another release, and a refused key is seen at the upgrade's config
// check, where a silently re-read one would not be (docs/CONFIG.md).
func movedKeys(errs []config.FieldError) ([]config.FieldError, error) {
	moved, err := catalog.MovedKeys()
	if err != nil {
		return errs, err
	}
	for i, fe := range errs {
		ss, ok := moved[clusterIndex.ReplaceAllString(fe.Path, "clusters[].")]
		if !ok || !strings.HasPrefix(fe.Msg, "unknown key") {
			continue
		}
		var paths, owners, sections []string
		for _, s := range ss {
			value := "VALUE"
			if s.PerCluster() {
				value = "[CLUSTER, ...]" // the clusters it was set for
			}
			paths, owners = append(paths, s.Path()), append(owners, s.Plugin)
			sections = append(sections, fmt.Sprintf("%s: {%s: %s}", s.Plugin, s.Key, value))
		}
		owner := "plugin owns"
		if len(owners) > 1 {
			owner = "plugins own"
		}
		errs[i].Msg = fmt.Sprintf("moved to %s (the %s %s it now): delete it here and write it under plugins: as `plugins: {%s}`",
			strings.Join(paths, " and "), strings.Join(owners, " and the "), owner, strings.Join(sections, ", "))
	}
	return errs, nil
}

// clusterIndex matches the cluster of a path, clusters[0]. or
// clusters[name]., which settings.txt writes as clusters[].
var clusterIndex = regexp.MustCompile(`^clusters\[[^\]]*\]\.`)
