// Package catalog is the built-in plugins as data: their names and manifests,
// embedded in the bot from manifests.json without linking any plugin code.
//
// Why data and not a call: the bot builds its grammar from the manifests at
// start-up, and `talosbot config check` validates commands against them. If
// the bot imported the plugins to ask them (as it once did), every process
// would link and initialise client-go, Talos machinery and the etcd server,
// idle or not. Asking the talosbot-plugins binary at start-up instead would
// start a large process on every bot start and make `config check` depend on
// a second executable. So the manifests are generated at build time from the
// plugins themselves (go generate, below), committed, and checked for
// staleness by a test in plugins/builtin; when a built-in process starts, the
// host compares its live manifest with this one and refuses a plugin binary
// from another build.
package catalog

//go:generate go run ../../cmd/talosbot-plugins manifests -o manifests.json

import (
	"bytes"
	"context"
	_ "embed"
	"encoding/json"
	"fmt"
	"slices"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/talosbot/talosbot/internal/version"
	lifecyclev1 "github.com/talosbot/talosbot/plugins/sdk/proto/lifecycle/v1"
)

//go:embed manifests.json
var manifestsJSON []byte

// JSON returns a copy of the embedded manifests.json.
func JSON() []byte { return bytes.Clone(manifestsJSON) }

// Catalogue is the parsed set of built-in manifests. It is immutable: every
// accessor returns copies.
type Catalogue struct {
	names     []string
	manifests map[string]*lifecyclev1.Manifest
}

// Load parses the embedded manifests.
func Load() (*Catalogue, error) { return Parse(manifestsJSON) }

// Parse reads a manifests.json document: a JSON array of lifecycle.v1
// Manifest messages (proto field names), one per plugin. Each manifest gets
// this binary's version (internal/version): built-ins are released together
// with the bot, and the host's check of a started built-in then also catches
// a talosbot-plugins binary from another release.
func Parse(doc []byte) (*Catalogue, error) {
	var raw []json.RawMessage
	if err := json.Unmarshal(doc, &raw); err != nil {
		return nil, fmt.Errorf("built-in plugin catalogue: %w", err)
	}
	c := &Catalogue{manifests: map[string]*lifecyclev1.Manifest{}}
	for i, r := range raw {
		m := &lifecyclev1.Manifest{}
		if err := protojson.Unmarshal(r, m); err != nil {
			return nil, fmt.Errorf("built-in plugin catalogue: manifest %d: %w", i, err)
		}
		if m.GetName() == "" {
			return nil, fmt.Errorf("built-in plugin catalogue: manifest %d has no name", i)
		}
		if _, dup := c.manifests[m.GetName()]; dup {
			return nil, fmt.Errorf("built-in plugin catalogue: plugin %q is listed twice", m.GetName())
		}
		m.Version = version.Version
		c.manifests[m.GetName()] = m
		c.names = append(c.names, m.GetName())
	}
	slices.Sort(c.names)
	return c, nil
}

// Names lists the built-in plugins in name order.
func (c *Catalogue) Names() []string { return slices.Clone(c.names) }

// Manifest returns a copy of the named plugin's manifest.
func (c *Catalogue) Manifest(name string) (*lifecyclev1.Manifest, bool) {
	m, ok := c.manifests[name]
	if !ok {
		return nil, false
	}
	return proto.CloneOf(m), true
}

// Manifests returns copies of every manifest, in name order.
func (c *Catalogue) Manifests() []*lifecyclev1.Manifest {
	out := make([]*lifecyclev1.Manifest, 0, len(c.names))
	for _, n := range c.names {
		out = append(out, proto.CloneOf(c.manifests[n]))
	}
	return out
}

// Describe returns the named plugin's manifest; its signature is that of
// plugins/host Options.Describe.
func (c *Catalogue) Describe(_ context.Context, name string) (*lifecyclev1.Manifest, error) {
	m, ok := c.Manifest(name)
	if !ok {
		return nil, fmt.Errorf("no built-in plugin %q; built-in plugins: %v", name, c.names)
	}
	return m, nil
}
