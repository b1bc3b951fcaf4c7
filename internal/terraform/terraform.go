// Package terraform runs OpenTofu or Terraform for the bot through
// terraform-exec: it reads a root's outputs (the cluster's client
// configurations and declared values, ADR 002) and plans a root to guard
// against replacing cluster secrets or node VMs (rule R5).
//
// Every run works in a private 0700 directory that is removed when the run
// ends: TF_DATA_DIR (so runs never share or touch the root's .terraform),
// the plan file, and the variables file. Outputs, sensitive or not, are
// returned in memory only and never written anywhere by this package.
package terraform

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/hashicorp/terraform-exec/tfexec"
)

// ErrBinaryNotFound is wrapped by errors for a missing tofu/terraform binary.
var ErrBinaryNotFound = errors.New("terraform binary not found")

// Config says where a root is and which binary plans it.
type Config struct {
	// Root is the Terraform root directory (where `tofu plan` would be run).
	Root string
	// Binary is "tofu", "terraform", or an absolute path. Empty means tofu,
	// else terraform, whichever is found first on PATH.
	Binary string
	// ConfigKey names this setting in the bot's configuration, for error
	// messages, e.g. "clusters[0].credentials.terraform". Errors about the
	// binary name ConfigKey+".binary".
	ConfigKey string
	// Env is the environment for the binary (nil: os.Environ()). Variables
	// that terraform-exec manages itself are dropped; TF_VAR_* values are
	// passed through a 0600 variables file in the run directory instead,
	// because terraform-exec refuses them in the environment.
	Env []string
	// TempDir is the parent of the private run directories (default os.TempDir()).
	TempDir string
}

// Runner runs one root. It holds no secrets and may be reused.
type Runner struct {
	cfg  Config
	bin  string
	env  map[string]string
	vars map[string]string
}

// New checks the root and finds the binary. A missing binary is an error
// that names the configuration key to fix.
func New(cfg Config) (*Runner, error) {
	if cfg.ConfigKey == "" {
		cfg.ConfigKey = "credentials.terraform"
	}
	if cfg.Root == "" {
		return nil, fmt.Errorf("%s.root is empty: set it to the Terraform root directory", cfg.ConfigKey)
	}
	if st, err := os.Stat(cfg.Root); err != nil || !st.IsDir() {
		return nil, fmt.Errorf("%s.root: %s is not a directory; set it to the Terraform root that holds the Talos configuration", cfg.ConfigKey, cfg.Root)
	}
	environ := cfg.Env
	if environ == nil {
		environ = os.Environ()
	}
	env, vars := splitEnv(environ)
	if f := env["TF_CLI_CONFIG_FILE"]; f != "" {
		// Terraform only warns about a missing CLI config, but the warning
		// lands in `version` output and breaks terraform-exec's parsing with
		// an unreadable error: say what is wrong instead.
		if _, err := os.Stat(f); err != nil {
			return nil, fmt.Errorf("TF_CLI_CONFIG_FILE=%s: %w; create the file or unset the variable in talosbot's environment", f, err)
		}
	}
	bin, err := FindBinary(cfg.Binary, cfg.ConfigKey+".binary", env["PATH"])
	if err != nil {
		return nil, err
	}
	return &Runner{cfg: cfg, bin: bin, env: env, vars: vars}, nil
}

// Binary is the absolute path of the binary in use.
func (r *Runner) Binary() string { return r.bin }

// Root is the root directory.
func (r *Runner) Root() string { return r.cfg.Root }

// FindBinary resolves binary ("tofu", "terraform", an absolute path, or ""
// for tofu-then-terraform) against path (a PATH value). key names the
// configuration field in the error.
func FindBinary(binary, key, path string) (string, error) {
	switch {
	case filepath.IsAbs(binary):
		if err := executable(binary); err != nil {
			return "", fmt.Errorf("%s: %s: %w (%w); install OpenTofu there or set %s to tofu, terraform or another absolute path",
				key, binary, ErrBinaryNotFound, err, key)
		}
		return binary, nil
	case binary == "" || binary == "tofu" || binary == "terraform":
	default:
		return "", fmt.Errorf("%s: %q is not tofu, terraform or an absolute path; set %s to one of those", key, binary, key)
	}
	names := []string{binary}
	if binary == "" {
		names = []string{"tofu", "terraform"}
	}
	for _, n := range names {
		for _, dir := range filepath.SplitList(path) {
			if dir == "" {
				continue
			}
			p := filepath.Join(dir, n)
			if executable(p) == nil {
				return p, nil
			}
		}
	}
	return "", fmt.Errorf("%s: %w: %s is not on PATH (%s); install OpenTofu (tofu is preferred, terraform is accepted) or set %s to the binary's absolute path",
		key, ErrBinaryNotFound, strings.Join(names, " or "), path, key)
}

func executable(p string) error {
	st, err := os.Stat(p)
	if err != nil {
		return err
	}
	if st.IsDir() || st.Mode().Perm()&0o111 == 0 {
		return errors.New("not an executable file")
	}
	return nil
}

// splitEnv turns KEY=VALUE lines into the environment terraform-exec
// accepts and the TF_VAR_ values it does not.
func splitEnv(environ []string) (env, vars map[string]string) {
	env, vars = map[string]string{}, map[string]string{}
	for _, kv := range environ {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			continue
		}
		if name, isVar := strings.CutPrefix(k, "TF_VAR_"); isVar {
			if name != "" {
				vars[name] = v
			}
			continue
		}
		env[k] = v
	}
	tfexec.CleanEnv(env)
	// terraform-exec owns these; TF_DATA_DIR is set per run.
	delete(env, "TF_DATA_DIR")
	delete(env, "TF_WORKSPACE")
	env["CHECKPOINT_DISABLE"] = "1"
	return env, vars
}

// run does one piece of work in a new private directory: TF_DATA_DIR is
// <dir>/data, `init` runs first, and the whole directory is removed at the
// end whatever happened (a failed removal is an error: it may hold a plan).
func (r *Runner) run(ctx context.Context, work func(tf *tfexec.Terraform, dir string) error) (err error) {
	dir, err := os.MkdirTemp(r.cfg.TempDir, "talosbot-tf-")
	if err != nil {
		return fmt.Errorf("create private Terraform run directory: %w", err)
	}
	defer func() {
		if rmErr := os.RemoveAll(dir); rmErr != nil { // rule:R23-removed
			err = errors.Join(err, fmt.Errorf("remove Terraform run directory %s (remove it by hand: it may hold a plan): %w", dir, rmErr))
		}
	}()
	if err := os.Chmod(dir, 0o700); err != nil { // rule:R23-private
		return fmt.Errorf("restrict Terraform run directory: %w", err)
	}
	tf, err := tfexec.NewTerraform(r.cfg.Root, r.bin)
	if err != nil {
		return fmt.Errorf("%s: %w", r.cfg.ConfigKey, err)
	}
	env := make(map[string]string, len(r.env)+1)
	for k, v := range r.env {
		env[k] = v
	}
	env["TF_DATA_DIR"] = filepath.Join(dir, "data")
	if err := tf.SetEnv(env); err != nil {
		return fmt.Errorf("terraform environment: %w", err)
	}
	if err := tf.Init(ctx, tfexec.Upgrade(false)); err != nil {
		return fmt.Errorf("%s init in %s: %w (check %s.root and that providers are available offline, e.g. TF_PLUGIN_CACHE_DIR)",
			r.name(), r.cfg.Root, err, r.cfg.ConfigKey)
	}
	return work(tf, dir)
}

func (r *Runner) name() string { return filepath.Base(r.bin) }

// Output is one root output, held in memory only.
type Output struct {
	Sensitive bool
	// Value is the output's JSON value.
	Value json.RawMessage
}

// Text is the value as `tofu output -raw` prints it: strings unquoted,
// numbers and bools as JSON; lists, maps and null are errors.
func (o Output) Text() (string, error) {
	dec := json.NewDecoder(bytes.NewReader(o.Value))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return "", errors.New("output is not valid JSON")
	}
	// Never echo the value in an error: it may be sensitive.
	switch x := v.(type) {
	case string:
		return x, nil
	case json.Number:
		return x.String(), nil
	case bool:
		return strconv.FormatBool(x), nil
	case nil:
		return "", errors.New("output is null")
	default:
		return "", errors.New("output is a list or map, not a string")
	}
}

// Outputs maps output names to values.
type Outputs map[string]Output

// Names lists the output names, sorted (safe to log: no values).
func (o Outputs) Names() []string {
	out := make([]string, 0, len(o))
	for k := range o {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// Outputs reads every output of the root's current state. It needs the
// state backend but nothing in the cluster, so it works while the cluster
// is down (R24).
func (r *Runner) Outputs(ctx context.Context) (Outputs, error) {
	var out Outputs
	err := r.run(ctx, func(tf *tfexec.Terraform, _ string) error {
		metas, err := tf.Output(ctx)
		if err != nil {
			return fmt.Errorf("%s output in %s: %w", r.name(), r.cfg.Root, err)
		}
		out = make(Outputs, len(metas))
		for k, m := range metas {
			out[k] = Output{Sensitive: m.Sensitive, Value: m.Value}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// writeVarFile writes the TF_VAR_ values as a 0600 JSON variables file. A
// value that is itself a JSON list or object is passed as such (as
// Terraform parses complex TF_VAR_ values); anything else is a string.
func (r *Runner) writeVarFile(dir string) (string, error) {
	if len(r.vars) == 0 {
		return "", nil
	}
	vals := make(map[string]json.RawMessage, len(r.vars))
	for k, v := range r.vars {
		t := strings.TrimSpace(v)
		if (strings.HasPrefix(t, "[") || strings.HasPrefix(t, "{")) && json.Valid([]byte(t)) {
			vals[k] = json.RawMessage(t)
			continue
		}
		b, _ := json.Marshal(v)
		vals[k] = b
	}
	data, err := json.Marshal(vals)
	if err != nil {
		return "", fmt.Errorf("encode TF_VAR_ variables: %w", err)
	}
	p := filepath.Join(dir, "env.tfvars.json")
	if err := os.WriteFile(p, data, 0o600); err != nil {
		return "", fmt.Errorf("write variables file: %w", err)
	}
	return p, nil
}
