package servetest

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/talosbot/talosbot/config"
	"github.com/talosbot/talosbot/sim"
)

// TestConfigIsValid: the builder's config with a sim cluster and a cluster
// without one is a config serve accepts, with the sim's nodes and control
// planes, the defaults the tests rely on, what the test set instead, and
// credential files only its owner reads.
func TestConfigIsValid(t *testing.T) {
	dir := t.TempDir()
	c, err := sim.Start(t.Context(), sim.Options{Dir: filepath.Join(dir, "sim"), Name: "staging", ControlPlanes: 1, Workers: 1, RebootDelay: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	b := Config{Dir: dir, SnapshotDir: true, Users: []string{"alice", "bob"}, Timeouts: "{gate: 8s}", Clusters: []Cluster{
		{Sim: c, Declared: "talos_version: v1.12.6"},
		{Name: "production", Nodes: []string{"{name: cp-1, address: 127.0.0.2, role: controlplane, host: pve1}"}, Endpoints: []string{"127.0.0.2"},
			Talosconfig: []byte("context: x\n"), Kubeconfig: []byte("apiVersion: v1\n")},
	}}.Bot(t, "talosbot")
	cfg, err := config.Load(b.Config)
	if err != nil {
		t.Fatalf("the builder's config is invalid: %v", err)
	}
	if len(cfg.Clusters) != 2 {
		t.Fatalf("%d clusters", len(cfg.Clusters))
	}
	st := cfg.Clusters[0]
	if st.Name != "staging" || st.Environment != "staging" || !slices.Equal(st.Channels, []string{"ops"}) || len(st.Nodes) != 2 ||
		!slices.Equal(st.Endpoints, []string{c.Nodes()[0].IP}) || st.Declared["schematic_id"] != sim.DefaultSchematic || st.Declared["talos_version"] != "v1.12.6" {
		t.Errorf("staging: %+v", st)
	}
	if n := st.Nodes[1]; n.Name != "worker-1" || n.Platform != c.Nodes()[1].Platform || n.InstallerClass == "" {
		t.Errorf("worker-1: %+v", n)
	}
	if p := cfg.Clusters[1]; p.Environment != "production" || len(p.Declared) != 0 || p.Credentials.Kubeconfig.Empty() {
		t.Errorf("production: %+v", p)
	}
	for _, env := range []string{"staging", "production"} {
		if ops := cfg.Policy[env].Operators; !slices.Equal(ops, []string{"*"}) {
			t.Errorf("policy %s: operators %v", env, ops)
		}
	}
	if cfg.SnapshotDir != filepath.Join(dir, "snapshots") || cfg.DataDir != filepath.Join(dir, "data") || cfg.Listen != b.Addr || len(cfg.Chat.Web.Users) != 2 {
		t.Errorf("config: %+v", cfg)
	}
	if len(b.Tokens) != 2 || b.Tokens["bob"] == "" {
		t.Errorf("tokens for %v", b.Tokens)
	}
	// The tokens pass the start-up secret checks serve runs (length, all
	// different), resolved from the environment Bot.Start gives serve.
	for _, kv := range b.TokenEnv() {
		k, v, _ := strings.Cut(kv, "=")
		t.Setenv(k, v)
	}
	if _, errs := cfg.ResolveSecrets(); len(errs) > 0 {
		t.Errorf("serve would refuse the builder's tokens: %v", errs)
	}
	for _, f := range []string{"staging.talosconfig", "production.talosconfig", "production.kubeconfig", "talosbot.yaml"} {
		fi, err := os.Stat(filepath.Join(dir, f))
		if err != nil || fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: %v %v", f, fi, err)
		}
	}
	raw, _ := os.ReadFile(b.Config)
	if strings.Contains(string(raw), "context:") {
		t.Errorf("a talosconfig's content is in the config file")
	}
}
