// Package credentials resolves a cluster's client configurations when an
// operation needs them: from file:/env: references or from Terraform outputs
// (ADR 002). Values live only in the returned Credentials, for one plugin
// call; nothing here caches or logs them.
package credentials

import (
	"context"
	"fmt"
	"sort"

	"github.com/talosbot/talosbot/config"
	"github.com/talosbot/talosbot/internal/terraform"
	lifecyclev1 "github.com/talosbot/talosbot/plugins/sdk/proto/lifecycle/v1"
)

// Credentials are a cluster's client configurations plus its declared
// (non-secret) values, held in memory for one plugin call.
type Credentials struct {
	Talosconfig []byte
	Kubeconfig  []byte
	Declared    map[string]string
}

// SourceCredentials resolves each cluster's credentials from the source its
// configuration names: "files" (FileCredentials) or "terraform"
// (TerraformCredentials). It is the engine.CredentialSource talosbot serve uses.
type SourceCredentials struct {
	// Config locates a cluster's index for error messages
	// ("clusters[1].credentials.terraform.binary"); nil names it by cluster name.
	Config *config.Config
	// Env is the environment of the Terraform binary (nil: the bot's own).
	Env []string
	// TempDir is where Terraform's private run directories go (default os.TempDir()).
	TempDir string
}

// Resolve dispatches on cl.Credentials.Source.
func (s SourceCredentials) Resolve(ctx context.Context, cl *config.Cluster) (*Credentials, error) {
	switch cl.Credentials.Source {
	case "files":
		return FileCredentials{}.Resolve(ctx, cl)
	case "terraform":
		return TerraformCredentials(s).Resolve(ctx, cl)
	default:
		return nil, fmt.Errorf("%s.credentials.source: %q is not supported; use files or terraform", clusterKey(s.Config, cl), cl.Credentials.Source)
	}
}

// FileCredentials resolves credentials given as file:/env: references
// (credentials.source "files").
type FileCredentials struct{}

// Resolve reads the cluster's talosconfig and (optional) kubeconfig.
func (FileCredentials) Resolve(_ context.Context, cl *config.Cluster) (*Credentials, error) {
	if cl.Credentials.Source != "files" {
		return nil, fmt.Errorf("cluster %s: credentials.source %q is not supported by FileCredentials; use SourceCredentials", cl.Name, cl.Credentials.Source)
	}
	tc, err := cl.Credentials.Talosconfig.Resolve()
	if err != nil {
		return nil, fmt.Errorf("clusters[%s].credentials.talosconfig: %w", cl.Name, err)
	}
	c := &Credentials{Talosconfig: tc}
	if !cl.Credentials.Kubeconfig.Empty() {
		if c.Kubeconfig, err = cl.Credentials.Kubeconfig.Resolve(); err != nil {
			return nil, fmt.Errorf("clusters[%s].credentials.kubeconfig: %w", cl.Name, err)
		}
	}
	return c, nil
}

// TerraformCredentials reads the cluster's Terraform outputs (ADR 002:
// Terraform is the source of truth for talosconfig and kubeconfig) each time
// an operation needs them. The values live only in the returned Credentials,
// which the engine holds for one plugin call (R23). Reading outputs needs the
// state backend, not the cluster, so it works while the cluster is down (R24).
type TerraformCredentials struct {
	Config  *config.Config
	Env     []string
	TempDir string
}

// Output keys of config.Terraform.Outputs that are credentials; every other
// key is a declared (non-secret) value.
const (
	outputTalosconfig = "talosconfig"
	outputKubeconfig  = "kubeconfig"
)

// Resolve runs `tofu output -json` in the cluster's root and maps the
// configured outputs: talosconfig (required) and kubeconfig (optional) to
// credentials, the others (schematic_id, longhorn_installer_image,
// talos_version, kubernetes_version and any added key) to Declared.
func (t TerraformCredentials) Resolve(ctx context.Context, cl *config.Cluster) (*Credentials, error) {
	key := clusterKey(t.Config, cl) + ".credentials.terraform"
	tf := cl.Credentials.Terraform
	if cl.Credentials.Source != "terraform" || tf == nil {
		return nil, fmt.Errorf("%s: not configured; set credentials.source: terraform and %s.root", key, key)
	}
	r, err := terraform.New(terraform.Config{Root: tf.Root, Binary: tf.Binary, ConfigKey: key, Env: t.Env, TempDir: t.TempDir})
	if err != nil {
		return nil, err
	}
	outs, err := r.Outputs(ctx)
	if err != nil {
		return nil, fmt.Errorf("cluster %s: read Terraform outputs: %w", cl.Name, err)
	}
	names := tf.Outputs
	if names == nil {
		names = config.DefaultTerraformOutputs()
	}
	text := func(k string, required bool) (string, bool, error) {
		name := names[k]
		if name == "" {
			name = config.DefaultTerraformOutputs()[k]
		}
		o, ok := outs[name]
		if !ok {
			if required {
				return "", false, fmt.Errorf("%s.outputs.%s: the root %s has no output %q (it has: %v); add the output or set %s.outputs.%s to its name",
					key, k, tf.Root, name, outs.Names(), key, k)
			}
			return "", false, nil
		}
		v, err := o.Text()
		if err != nil {
			return "", false, fmt.Errorf("%s.outputs.%s: output %q: %w; it must be a string", key, k, name, err)
		}
		if o.Sensitive && k != outputTalosconfig && k != outputKubeconfig {
			return "", false, fmt.Errorf("%s.outputs.%s: output %q is sensitive, but declared values are shown in chat and the audit trail; map %s to a non-sensitive output", key, k, name, k)
		}
		return v, true, nil
	}
	tc, _, err := text(outputTalosconfig, true)
	if err != nil {
		return nil, err
	}
	c := &Credentials{Talosconfig: []byte(tc), Declared: map[string]string{}}
	if kc, ok, err := text(outputKubeconfig, false); err != nil {
		return nil, err
	} else if ok {
		c.Kubeconfig = []byte(kc)
	}
	keys := make([]string, 0, len(names))
	for k := range names {
		if k != outputTalosconfig && k != outputKubeconfig {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	for _, k := range keys {
		v, ok, err := text(k, false)
		if err != nil {
			return nil, err
		}
		if ok {
			c.Declared[k] = v
		}
	}
	return c, nil
}

// TerraformSettings is Evidence.terraform for cl: where the Terraform
// plugins (tf plan, drift) and the R5 plan guard find the cluster's root. It
// is nil for a cluster without a Terraform root.
func TerraformSettings(cfg *config.Config, cl *config.Cluster) *lifecyclev1.Terraform {
	tf := cl.Credentials.Terraform
	if tf == nil || tf.Root == "" {
		return nil
	}
	return &lifecyclev1.Terraform{
		Root: tf.Root, Binary: tf.Binary,
		ConfigKey: clusterKey(cfg, cl) + ".credentials.terraform",
	}
}

// clusterKey is the cluster's path in the configuration: clusters[N] when
// cfg has it, clusters[name] otherwise.
func clusterKey(cfg *config.Config, cl *config.Cluster) string {
	if cfg != nil {
		for i := range cfg.Clusters {
			if cfg.Clusters[i].Name == cl.Name {
				return fmt.Sprintf("clusters[%d]", i)
			}
		}
	}
	return fmt.Sprintf("clusters[%s]", cl.Name)
}
