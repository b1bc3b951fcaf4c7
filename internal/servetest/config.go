package servetest

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/talosbot/talosbot/sim"
)

// Config is the serve config of one e2e test. Its zero value (with Dir and
// one Cluster) is a whole, valid config, so a test states only what differs
// from it; Bot writes it and returns the bot that runs it.
type Config struct {
	// Dir holds the data (Dir/data), the config file (Dir/talosbot.yaml)
	// and each cluster's talosconfig and kubeconfig (0600).
	Dir string
	// Listen is the console's address; "" picks a free loopback port.
	Listen string
	// SnapshotDir adds snapshot_dir: Dir/snapshots.
	SnapshotDir bool
	Clusters    []Cluster
	// Releases is the releases block (YAML); "" is
	// {talos: [v1.12.6, v1.13.9, v1.14.0, v1.14.1], kubernetes: [1.35.2, 1.36.3]}: only a known
	// release is an upgrade target (docs/RELEASES.md).
	Releases string
	// Timeouts is the timeouts block (YAML); "" leaves the defaults.
	Timeouts string
	// Policy is the policy block (YAML); "" lets every operator ("*") run
	// everything on each cluster's environment, and (production needs
	// approvers) makes every user a production approver.
	Policy string
	// Users are the console users (chat.web), each signing in with their own
	// token; nil is alice alone.
	Users []string
	// Chat is more of the chat block (e.g. "  slack: {...}\n"), written
	// as it is after the console's web line.
	Chat string
	// Extra is more top-level YAML, written as it is (e.g. a plugins block).
	Extra string
}

// Cluster is one cluster of a Config.
type Cluster struct {
	// Name defaults to "staging"; Environment defaults to Name.
	Name, Environment string
	// Channels defaults to [ops].
	Channels []string
	// Sim gives the nodes (with their platform and installer class), the
	// control planes as endpoints, and the talosconfig.
	Sim *sim.Cluster
	// Nodes, Endpoints and Talosconfig describe a cluster without a sim;
	// each node is a YAML flow map, e.g. {name: cp-1, address: ...}.
	Nodes, Endpoints []string
	Talosconfig      []byte
	// Kubeconfig adds credentials.kubeconfig.
	Kubeconfig []byte
	// Schematic is declared.schematic_id; "" is sim.DefaultSchematic with a
	// Sim, none without.
	Schematic string
	// Declared is more of the declared block, e.g. "talos_version: v1.11.3".
	Declared string
}

// Bot writes the config to Dir/talosbot.yaml and returns the (not yet
// started) bot that serves it from bin, with a fresh token for each user.
func (c Config) Bot(t testing.TB, bin string) *Bot {
	t.Helper()
	if c.Listen == "" {
		c.Listen = FreeAddr(t)
	}
	if c.Users == nil {
		c.Users = []string{"alice"}
	}
	path := filepath.Join(c.Dir, "talosbot.yaml")
	if err := os.WriteFile(path, []byte(c.yaml(t)), 0o600); err != nil {
		t.Fatal(err)
	}
	return &Bot{T: t, Bin: bin, Config: path, Addr: c.Listen, Tokens: NewTokens(t, c.Users...)}
}

// yaml renders the config and writes the clusters' credential files.
func (c Config) yaml(t testing.TB) string {
	t.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, "data_dir: %s\nlisten: %s\n", filepath.Join(c.Dir, "data"), c.Listen)
	if c.SnapshotDir {
		fmt.Fprintf(&b, "snapshot_dir: %s\n", filepath.Join(c.Dir, "snapshots"))
	}
	b.WriteString("clusters:\n")
	var envs []string
	for _, cl := range c.Clusters {
		b.WriteString(cl.yaml(t, c.Dir))
		if !slices.Contains(envs, cl.environment()) {
			envs = append(envs, cl.environment())
		}
	}
	releases := c.Releases
	if releases == "" {
		releases = "{talos: [v1.12.6, v1.13.9, v1.14.0, v1.14.1], kubernetes: [1.35.2, 1.36.3]}"
	}
	fmt.Fprintf(&b, "releases: %s\n", releases)
	if c.Timeouts != "" {
		fmt.Fprintf(&b, "timeouts: %s\n", c.Timeouts)
	}
	policy := c.Policy
	if policy == "" {
		var open []string
		for _, env := range envs {
			if env == "production" {
				open = append(open, env+`: {operators: ["*"], approvers: [`+strings.Join(c.Users, ", ")+`]}`)
				continue
			}
			open = append(open, env+`: {operators: ["*"]}`)
		}
		policy = "{" + strings.Join(open, ", ") + "}"
	}
	fmt.Fprintf(&b, "policy: %s\n", policy)
	var users []string
	for _, u := range c.Users {
		users = append(users, fmt.Sprintf("{name: %s, token: env:%s}", u, TokenEnv(u)))
	}
	fmt.Fprintf(&b, "chat:\n  web: {enabled: true, users: [%s]}\n", strings.Join(users, ", "))
	b.WriteString(c.Chat)
	b.WriteString(c.Extra)
	return b.String()
}

func (cl Cluster) name() string {
	if cl.Name == "" {
		return "staging"
	}
	return cl.Name
}

func (cl Cluster) environment() string {
	if cl.Environment == "" {
		return cl.name()
	}
	return cl.Environment
}

func (cl Cluster) yaml(t testing.TB, dir string) string {
	t.Helper()
	nodes, endpoints, talosconfig, schematic := cl.Nodes, cl.Endpoints, cl.Talosconfig, cl.Schematic
	if cl.Sim != nil {
		nodes, endpoints = nil, nil
		for _, n := range cl.Sim.Nodes() {
			class := n.InstallerClass
			if class == "" {
				class = "default"
			}
			nodes = append(nodes, fmt.Sprintf("{name: %s, address: %s, role: %s, host: %s, platform: %s, installer_class: %s}", n.Name, n.IP, n.Role, n.Host, n.Platform, class))
			if n.Role == sim.RoleControlPlane {
				endpoints = append(endpoints, n.IP)
			}
		}
		talosconfig = cl.Sim.Talosconfig()
		if schematic == "" {
			schematic = sim.DefaultSchematic
		}
	}
	channels := cl.Channels
	if channels == nil {
		channels = []string{"ops"}
	}
	write := func(kind string, data []byte) string {
		p := filepath.Join(dir, cl.name()+"."+kind)
		if err := os.WriteFile(p, data, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	creds := fmt.Sprintf(`source: files, talosconfig: "file:%s"`, write("talosconfig", talosconfig))
	if cl.Kubeconfig != nil {
		creds += fmt.Sprintf(`, kubeconfig: "file:%s"`, write("kubeconfig", cl.Kubeconfig))
	}
	var b strings.Builder
	fmt.Fprintf(&b, "  - name: %s\n    environment: %s\n    channels: [%s]\n    endpoints: [%s]\n    nodes:\n",
		cl.name(), cl.environment(), strings.Join(channels, ", "), strings.Join(endpoints, ", "))
	for _, n := range nodes {
		fmt.Fprintf(&b, "      - %s\n", n)
	}
	fmt.Fprintf(&b, "    credentials: {%s}\n", creds)
	var declared []string
	if schematic != "" {
		declared = append(declared, "schematic_id: "+schematic)
	}
	if cl.Declared != "" {
		declared = append(declared, cl.Declared)
	}
	if len(declared) > 0 {
		fmt.Fprintf(&b, "    declared: {%s}\n", strings.Join(declared, ", "))
	}
	return b.String()
}
