package credentials_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/talosbot/talosbot/bot/credentials"
	"github.com/talosbot/talosbot/config"
	"github.com/talosbot/talosbot/internal/terraform"
	"github.com/talosbot/talosbot/internal/terraform/tftest"
)

func tfCluster(name, root, binary string) config.Cluster {
	return config.Cluster{Name: name, Environment: config.EnvStaging,
		Credentials: config.Credentials{Source: "terraform", Terraform: &config.Terraform{Root: root, Binary: binary}}}
}

func TestTerraformCredentialsFromOutputs(t *testing.T) {
	bin := tftest.Binary(t)
	root := tftest.Root(t, bin, map[string]string{"talosconfig": "tc-secret-51d2", "talos_version": "v1.12.6"})
	tf := filepath.Join(t.TempDir(), "tofu")
	if err := os.Symlink(bin, tf); err != nil {
		t.Fatal(err)
	}
	files := filepath.Join(t.TempDir(), "talosconfig")
	if err := os.WriteFile(files, []byte("file-tc"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := &config.Config{Clusters: []config.Cluster{
		{Name: "prod", Credentials: config.Credentials{Source: "files", Talosconfig: config.Ref("file:" + files)}},
		tfCluster("staging", root, "tofu"),
	}}
	cfg.ApplyDefaults() // fills the default output names
	tmp := t.TempDir()
	src := credentials.SourceCredentials{Config: cfg, TempDir: tmp,
		Env: []string{"PATH=" + filepath.Dir(tf), "HOME=" + os.Getenv("HOME")}}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	c, err := src.Resolve(ctx, cfg.Cluster("staging"))
	if err != nil {
		t.Fatal(err)
	}
	if string(c.Talosconfig) != "tc-secret-51d2" || !strings.Contains(string(c.Kubeconfig), "fixture-kubeconfig-secret") {
		t.Fatalf("credentials not read from the outputs")
	}
	want := map[string]string{
		"schematic_id":             "376567988ad370138ad8b2698212367b8edcb69b5fd68c80be1f2ec7d603b4ba",
		"longhorn_installer_image": "factory.talos.dev/nocloud-installer/613e1592b2da41ae5e265e8789429f22e121aab91cb4deb6bc3c0b6262961245:v1.12.6",
		"talos_version":            "v1.12.6",
		"kubernetes_version":       "v1.35.2",
	}
	if len(c.Declared) != len(want) {
		t.Fatalf("declared = %v", c.Declared)
	}
	for k, v := range want {
		if c.Declared[k] != v {
			t.Errorf("declared[%s] = %q, want %q", k, c.Declared[k], v)
		}
	}
	if ents, _ := os.ReadDir(tmp); len(ents) != 0 {
		t.Fatalf("Terraform run left %d entries in the temp dir", len(ents))
	}

	// The same source still serves file-based clusters.
	if c, err := src.Resolve(ctx, cfg.Cluster("prod")); err != nil || string(c.Talosconfig) != "file-tc" {
		t.Fatalf("files source: %v", err)
	}

	// A renamed output that does not exist names the key to fix.
	cfg.Clusters[1].Credentials.Terraform.Outputs["talosconfig"] = "cluster_talosconfig"
	_, err = src.Resolve(ctx, cfg.Cluster("staging"))
	if err == nil || !strings.Contains(err.Error(), "clusters[1].credentials.terraform.outputs.talosconfig") || strings.Contains(err.Error(), "tc-secret") {
		t.Fatalf("missing output: %v", err)
	}
	cfg.Clusters[1].Credentials.Terraform.Outputs["talosconfig"] = "talosconfig"

	// A declared value mapped to a sensitive output is refused: declared
	// values reach chat and the audit trail.
	cfg.Clusters[1].Credentials.Terraform.Outputs["talos_version"] = "talos_kubeconfig"
	_, err = src.Resolve(ctx, cfg.Cluster("staging"))
	if err == nil || !strings.Contains(err.Error(), "is sensitive") || strings.Contains(err.Error(), "fixture-kubeconfig-secret") {
		t.Fatalf("sensitive declared: %v", err)
	}
}

func TestTerraformCredentialsMissingBinary(t *testing.T) {
	cfg := &config.Config{Clusters: []config.Cluster{
		{Name: "prod", Credentials: config.Credentials{Source: "files", Talosconfig: config.Ref("env:NOPE")}},
		tfCluster("staging", t.TempDir(), ""),
	}}
	cfg.ApplyDefaults()
	src := credentials.SourceCredentials{Config: cfg, Env: []string{"PATH=" + t.TempDir()}}
	_, err := src.Resolve(context.Background(), cfg.Cluster("staging"))
	if !errors.Is(err, terraform.ErrBinaryNotFound) || !strings.Contains(err.Error(), "clusters[1].credentials.terraform.binary") {
		t.Fatalf("err = %v", err)
	}
}

func TestSourceCredentialsUnknownSource(t *testing.T) {
	cl := &config.Cluster{Name: "x", Credentials: config.Credentials{Source: "vault"}}
	_, err := credentials.SourceCredentials{}.Resolve(context.Background(), cl)
	if err == nil || !strings.Contains(err.Error(), `clusters[x].credentials.source: "vault"`) {
		t.Fatalf("err = %v", err)
	}
}

func TestTerraformSettings(t *testing.T) {
	cl := tfCluster("a", "/srv/tf", "tofu")
	cfg := &config.Config{Clusters: []config.Cluster{cl}}
	got := credentials.TerraformSettings(cfg, &cfg.Clusters[0])
	if got.GetRoot() != "/srv/tf" || got.GetBinary() != "tofu" || got.GetConfigKey() != "clusters[0].credentials.terraform" {
		t.Fatalf("terraform = %v", got)
	}
	if credentials.TerraformSettings(cfg, &config.Cluster{Name: "b"}) != nil {
		t.Fatal("no root: no terraform settings")
	}
}
