// Package builtin is the catalogue of plugins compiled into the
// talosbot-plugins binary. The bot's host launches each as
// `talosbot-plugins plugin NAME`, a subprocess of the bot, so a crashing
// plugin never takes the bot down. The bot itself never imports this package
// (it would link client-go, machinery and etcd into the bot): it reads the
// manifests as data from plugins/catalog, generated from ManifestsJSON.
package builtin

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"sort"

	"google.golang.org/protobuf/encoding/protojson"

	"github.com/talosbot/talosbot/plugins/certinfo"
	"github.com/talosbot/talosbot/plugins/drift"
	"github.com/talosbot/talosbot/plugins/etcdops"
	"github.com/talosbot/talosbot/plugins/gates"
	"github.com/talosbot/talosbot/plugins/healthgate"
	"github.com/talosbot/talosbot/plugins/k8supgrade"
	"github.com/talosbot/talosbot/plugins/noderemove"
	"github.com/talosbot/talosbot/plugins/recover"
	"github.com/talosbot/talosbot/plugins/releaseinfo"
	"github.com/talosbot/talosbot/plugins/rollback"
	"github.com/talosbot/talosbot/plugins/sdk"
	"github.com/talosbot/talosbot/plugins/snapshot"
	"github.com/talosbot/talosbot/plugins/talosupgrade"
	"github.com/talosbot/talosbot/plugins/tfguard"
	"github.com/talosbot/talosbot/plugins/uncordon"
	"github.com/talosbot/talosbot/plugins/waitmember"
)

// catalogue returns the constructors by name. It is a function so that the
// catalogue is immutable.
func catalogue() map[string]func() sdk.Plugin {
	return map[string]func() sdk.Plugin{
		healthgate.Name:   healthgate.New,
		k8supgrade.Name:   k8supgrade.New,
		snapshot.Name:     snapshot.New,
		talosupgrade.Name: talosupgrade.New,
		rollback.Name:     rollback.New,
		noderemove.Name:   noderemove.New,
		tfguard.Name:      tfguard.New,
		drift.Name:        drift.New,
		gates.Name:        gates.New,
		waitmember.Name:   waitmember.New,
		releaseinfo.Name:  releaseinfo.New,
		recover.Name:      recover.New,
		uncordon.Name:     uncordon.New,
		etcdops.Name:      etcdops.New,
		certinfo.Name:     certinfo.New,
	}
}

// Names lists the built-in plugins.
func Names() []string {
	var out []string
	for n := range catalogue() {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// New returns a new instance of the named plugin.
func New(name string) (sdk.Plugin, bool) {
	f, ok := catalogue()[name]
	if !ok {
		return nil, false
	}
	return f(), true
}

// ManifestsJSON returns every built-in plugin's manifest, in name order, as
// the indented JSON array that plugins/catalog embeds. The version field is
// left out (the release version is stamped at link time, and the catalogue
// takes the bot's); the rest is byte-for-byte stable (protojson's
// deliberately varying whitespace is normalised), so a staleness test can
// compare it with the committed file.
func ManifestsJSON(ctx context.Context) ([]byte, error) {
	var raw []json.RawMessage
	for _, name := range Names() {
		p, _ := New(name)
		m, err := p.Describe(ctx)
		if err != nil {
			return nil, fmt.Errorf("describe built-in plugin %q: %w", name, err)
		}
		if m.Name != name {
			return nil, fmt.Errorf("built-in plugin %q describes itself as %q", name, m.Name)
		}
		w := sdk.ManifestToWire(m)
		w.Version = ""
		b, err := protojson.MarshalOptions{UseProtoNames: true}.Marshal(w)
		if err != nil {
			return nil, fmt.Errorf("encode the manifest of %q: %w", name, err)
		}
		raw = append(raw, b)
	}
	compact, err := json.Marshal(raw)
	if err != nil {
		return nil, err
	}
	var out bytes.Buffer
	if err := json.Indent(&out, compact, "", "  "); err != nil {
		return nil, err
	}
	out.WriteByte('\n')
	return out.Bytes(), nil
}
