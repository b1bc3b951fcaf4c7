// Package config loads and validates talosbot's YAML configuration.
//
// Secrets are never written inline: every secret field is a Ref ("env:NAME" or
// "file:/path") that is resolved only when it is needed and never printed.
// Validate reports every problem at once, each with its path in the document,
// so that `talosbot config check` can list them all.
package config

import (
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// Environments a cluster can belong to.
const (
	EnvStaging    = "staging"
	EnvProduction = "production"
)

// Node roles.
const (
	RoleControlPlane = "controlplane"
	RoleWorker       = "worker"
)

// Config is the whole configuration document.
type Config struct {
	DataDir     string              `yaml:"data_dir"`
	SnapshotDir string              `yaml:"snapshot_dir"`
	Listen      string              `yaml:"listen"`
	Clusters    []Cluster           `yaml:"clusters"`
	Policy      map[string]Policy   `yaml:"policy"`
	Groups      map[string][]string `yaml:"groups"`
	Releases    Releases            `yaml:"releases"`
	Timeouts    Timeouts            `yaml:"timeouts"`
	Snapshots   SnapshotRetention   `yaml:"snapshots"`
	Chat        Chat                `yaml:"chat"`
	Alerts      Alerts              `yaml:"alerts"`
	Audit       AuditSettings       `yaml:"audit"`
	Plugins     Plugins             `yaml:"plugins"`
	// Silences and Git are the work around disruptive runs (followup.go).
	Silences *Silences    `yaml:"silences,omitempty"`
	Git      *GitFollowup `yaml:"git_followup,omitempty"`
	// AlertPause pauses a roll on firing alerts (alertpause.go).
	AlertPause AlertPause `yaml:"alert_pause,omitempty"`
	// Escalation speaks up about late steps (escalation.go).
	Escalation Escalation `yaml:"escalation,omitempty"`
	// MaintenanceSchedule runs maintenance commands in the window (maintenance.go).
	MaintenanceSchedule map[string]string `yaml:"maintenance_schedule,omitempty"`
	// Certificates is the daily certificate-expiry check (certs.go).
	Certificates Certificates `yaml:"certificates,omitempty"`

	// lines maps the path of each written key to its line (Locate).
	lines map[string]int
}

// Cluster is one Talos cluster the bot manages.
type Cluster struct {
	Name        string `yaml:"name"`
	Environment string `yaml:"environment"`
	// Channels are the chat channels bound to this cluster; a command in one of
	// them may omit the cluster name when exactly one cluster is bound there.
	Channels           []string          `yaml:"channels,omitempty"`
	Endpoints          []string          `yaml:"endpoints"`
	KubernetesEndpoint string            `yaml:"kubernetes_endpoint,omitempty"`
	Nodes              []Node            `yaml:"nodes"`
	Credentials        Credentials       `yaml:"credentials"`
	Declared           map[string]string `yaml:"declared,omitempty"`
}

// Node is one inventory entry (Terraform's talos_nodes).
type Node struct {
	Name           string `yaml:"name"`
	Address        string `yaml:"address"`
	Role           string `yaml:"role"`
	Host           string `yaml:"host"`
	Platform       string `yaml:"platform"`
	InstallerClass string `yaml:"installer_class"`
}

// Credentials says where talosconfig and kubeconfig come from.
type Credentials struct {
	// Source is "files" or "terraform".
	Source      string     `yaml:"source"`
	Talosconfig Ref        `yaml:"talosconfig"`
	Kubeconfig  Ref        `yaml:"kubeconfig,omitempty"`
	Terraform   *Terraform `yaml:"terraform,omitempty"`
}

// Terraform names the root whose outputs hold the credentials (ADR 002).
type Terraform struct {
	Root    string            `yaml:"root"`
	Binary  string            `yaml:"binary"`
	Outputs map[string]string `yaml:"outputs"`
	// PlanBeforeUpgrade runs the R5 plan guard as the first step of every
	// Talos and Kubernetes upgrade of this cluster.
	PlanBeforeUpgrade bool `yaml:"plan_before_upgrade,omitempty"`
}

// Policy is the per-environment approval and safety policy.
type Policy struct {
	// Approval lists the disruptive commands that need approval in staging
	// ("*": all of them). In production every disruptive command needs
	// approval whatever this says; see NoApproval.
	Approval *[]string `yaml:"approval_commands"`
	// NoApproval is the only way to let a disruptive production command run
	// without approval: it names the command ("*": every command, for a solo
	// setup). An empty or missing list exempts nothing, so a typo that
	// empties it never widens access.
	NoApproval        []string `yaml:"no_approval_commands"`
	Approvers         []string `yaml:"approvers"`
	MinApprovals      int      `yaml:"min_approvals"`
	AllowSelfApproval bool     `yaml:"allow_self_approval"`
	Expiry            Duration `yaml:"expiry"`
	Operators         []string `yaml:"operators"`
	Viewers           []string `yaml:"viewers"`
	PromotionMaxAge   Duration `yaml:"promotion_max_age"`
	Windows           []Window `yaml:"maintenance_windows"`
}

// Window is a maintenance window: weekdays, a time range and a timezone.
type Window struct {
	Days     []string `yaml:"days"`
	Start    string   `yaml:"start"`
	End      string   `yaml:"end"`
	Timezone string   `yaml:"timezone"`
}

// Releases says where the known releases come from (docs/RELEASES.md):
// Image Factory when FactoryURL is set (cached in the store), else or when
// it cannot be reached and nothing is cached, the Talos list here. They
// feed the latest-patch rule (R10), multi-hop plans and new-release
// notices (releases.go has the defaults and checks).
type Releases struct {
	Talos []string `yaml:"talos"`
	// Kubernetes lists the Kubernetes patch releases that upgrades may
	// target ("1.36.3"); machinery's compatibility says which of them a
	// Talos version supports.
	Kubernetes []string `yaml:"kubernetes,omitempty"`
	// FactoryURL is the Image Factory to read Talos versions from
	// (https://factory.talos.dev); empty: the configured list only.
	FactoryURL string `yaml:"factory_url,omitempty"`
	// Refresh is how old the cached factory list may be before it is read
	// again (default 6h).
	Refresh Duration `yaml:"refresh,omitempty"`
	// ListedOnly makes Talos a list of the only versions upgrades may
	// target or pass through; newer factory versions are still reported.
	ListedOnly bool `yaml:"listed_only,omitempty"`
	// NoticeSchedule is the cron schedule of the new-release check
	// (default daily at 09:00, "off" to disable).
	NoticeSchedule string `yaml:"notice_schedule,omitempty"`
}

// Timeouts bound the long-running parts of operations.
type Timeouts struct {
	// Gate bounds one health-gate run, which is also the gate before a node
	// (default 1m).
	Gate Duration `yaml:"gate"`
	// GateAfter is how long the gate after a node (between nodes, the
	// closing gate, after a rollback or removal, on resume) is re-run until
	// it passes (default 10m).
	GateAfter Duration `yaml:"gate_after"`
	// Health is how long `/talos health` re-runs the gate until it passes
	// (default 2m).
	Health Duration `yaml:"health"`
	Node   Duration `yaml:"node"`
	Run    Duration `yaml:"run"`
	// Status bounds each status provider's answer to `/talos status` (the
	// Talos and Kubernetes versions read from the cluster), so that status
	// answers fast when a cluster is down (default 5s).
	Status Duration `yaml:"status"`
}

// Chat configures the chat adapters.
type Chat struct {
	Slack   *Slack   `yaml:"slack"`
	Discord *Discord `yaml:"discord"`
	Web     *Web     `yaml:"web"`
}

// Slack adapter settings.
type Slack struct {
	Mode          string `yaml:"mode"` // socket (default) or http
	AppToken      Ref    `yaml:"app_token"`
	BotToken      Ref    `yaml:"bot_token"`
	SigningSecret Ref    `yaml:"signing_secret"`
	// APIURL replaces https://slack.com/api/ (an egress proxy or a test double).
	APIURL string `yaml:"api_url,omitempty"`
}

// Discord adapter settings.
type Discord struct {
	Token         Ref    `yaml:"token"`
	ApplicationID string `yaml:"application_id"`
	PublicKey     string `yaml:"public_key"`
	GuildID       string `yaml:"guild_id"`
	Channel       string `yaml:"channel"`
	// APIURL replaces https://discord.com/ for REST and gateway discovery
	// (an egress proxy or a test double).
	APIURL string `yaml:"api_url,omitempty"`
}

// Web is the local console; in serve it is off unless enabled, and each
// user signs in with their own token, which alone says who they are.
type Web struct {
	Enabled bool      `yaml:"enabled"`
	Users   []WebUser `yaml:"users,omitempty"`
	// Token was one console token shared by every user. It is refused:
	// whoever held it could act as anyone.
	Token Ref `yaml:"token,omitempty"`
}

// WebUser is one console user: the name policy knows them by (e.g. in
// policy.*.operators) and a reference to their own token.
type WebUser struct {
	Name  string `yaml:"name"`
	Token Ref    `yaml:"token"`
}

// Alerts configures the Alertmanager webhook receiver.
type Alerts struct {
	Token        Ref         `yaml:"token"`
	ClusterLabel string      `yaml:"cluster_label"`
	Rules        []AlertRule `yaml:"rules"`
}

// AlertRule maps alert matchers to a runbook suggestion.
type AlertRule struct {
	Name     string            `yaml:"name"`
	Match    map[string]string `yaml:"match"`
	MatchRE  map[string]string `yaml:"match_re"`
	Text     string            `yaml:"text"`
	Runbook  string            `yaml:"runbook"`
	Commands []string          `yaml:"commands"`
}

// AuditSettings controls the audit API and log retention.
type AuditSettings struct {
	Token        Ref      `yaml:"token"`
	LogRetention Duration `yaml:"log_retention"`
}

// Plugins lists external plugins and holds every plugin's own section.
type Plugins struct {
	External []ExternalPlugin `yaml:"external"`
	// PassEnv names extra environment variables plugin processes receive
	// (e.g. TF_CLI_CONFIG_FILE, GOOGLE_APPLICATION_CREDENTIALS, TF_VAR_*
	// for the Terraform root). Everything else is withheld from plugins.
	PassEnv []string `yaml:"pass_env,omitempty"`
	// Sections are the plugins' own sections, plugins.NAME, kept unread:
	// the core knows no plugin setting; the plugin decodes and validates
	// its section (plugins.go).
	Sections map[string]yaml.Node `yaml:",inline"`
}

// ExternalPlugin is a plugin binary verified by its sha256 before every launch.
type ExternalPlugin struct {
	Name   string `yaml:"name"`
	Path   string `yaml:"path"`
	SHA256 string `yaml:"sha256"`
}

// Load reads, defaults and validates a configuration file. A validation
// failure returns *Errors listing every problem.
func Load(path string) (*Config, error) {
	data, err := ReadFile(path)
	if err != nil {
		return nil, err
	}
	c, err := Parse(data)
	var ce *Errors
	if errors.As(err, &ce) {
		ce.File = path
	}
	return c, err
}

// Parse decodes, defaults and validates a configuration document. Every
// problem is reported, each with its path: unknown keys (with the closest
// valid key), values of the wrong type and failed validations.
func Parse(data []byte) (*Config, error) {
	c, errs := Decode(data)
	if len(errs) > 0 {
		return nil, &Errors{List: errs}
	}
	return c, nil
}

// Decode is Parse that also returns the (defaulted, possibly invalid)
// configuration next to its problems, so that `config check` can run the
// checks that need more than the document (the command catalogue) and list
// their errors too. c is nil only when the document is not YAML at all, or
// is refused before it is decoded (size, aliases, nesting, a second
// document).
func Decode(data []byte) (c *Config, errs []FieldError) {
	doc, err := parseDocument(data)
	if err != nil {
		fe := FieldError{Path: "(document)", Msg: err.Error()}
		if sub := lineRE.FindStringSubmatch(fe.Msg); sub != nil {
			fe.Line, _ = strconv.Atoi(sub[1])
			fe.Msg = sub[2]
		}
		return nil, []FieldError{fe}
	}
	c = &Config{}
	if len(doc.Content) > 0 {
		keyErrs, k := checkKeys(doc)
		c.lines = k.paths
		errs = append(errs, keyErrs...)
		if err := doc.Decode(c); err != nil {
			var te *yaml.TypeError
			if !errors.As(err, &te) {
				return nil, append(errs, FieldError{Path: "(document)", Msg: yamlMessage(err)})
			}
			errs = append(errs, decodeErrors(te.Errors, k.lines)...)
		}
		errs = append(errs, c.explicitZeros()...)
	}
	c.ApplyDefaults()
	errs = append(errs, c.Validate()...)
	c.Locate(errs)
	return c, errs
}

// explicitZeros reports the values whose zero would otherwise be replaced by
// a default: a written `min_approvals: 0` silently becoming 1 hides that the
// file says something else than what runs.
func (c *Config) explicitZeros() []FieldError {
	var errs []FieldError
	for _, env := range sortedKeys(c.Policy) {
		p := "policy." + env + ".min_approvals"
		if _, written := c.lines[p]; written && c.Policy[env].MinApprovals == 0 {
			errs = append(errs, FieldError{Path: p, Msg: "is 0, but every approval needs at least 1 approver: set 1 or more (or remove the key for the default of 1; exempt commands with no_approval_commands)"})
		}
	}
	return errs
}

// Locate fills in the line of each error whose path names a key the
// document has (the line of that key, or of its nearest written parent).
func (c *Config) Locate(errs []FieldError) {
	if c == nil {
		return
	}
	for i := range errs {
		if errs[i].Line != 0 {
			continue
		}
		for p := errs[i].Path; p != ""; p = parentPath(p) {
			if l, ok := c.lines[p]; ok {
				errs[i].Line = l
				break
			}
		}
	}
}

// parentPath drops the last element of a path: a.b[2].c → a.b[2] → a.b → a.
func parentPath(p string) string {
	if i := strings.LastIndexAny(p, ".["); i > 0 {
		return p[:i]
	}
	return ""
}

func yamlMessage(err error) string {
	var te *yaml.TypeError
	if errors.As(err, &te) {
		return strings.Join(te.Errors, "; ")
	}
	return err.Error()
}

// Defaults used when a field is left empty.
const (
	DefaultListen          = "127.0.0.1:8080"
	DefaultGateTimeout     = time.Minute
	DefaultGateAfter       = 10 * time.Minute
	DefaultHealthWait      = 2 * time.Minute
	DefaultStatusTimeout   = 5 * time.Second
	DefaultNodeTimeout     = 20 * time.Minute
	DefaultRunTimeout      = 4 * time.Hour
	DefaultExpiry          = 30 * time.Minute
	DefaultPromotionMaxAge = 14 * 24 * time.Hour
	DefaultClusterLabel    = "cluster"
)

// ApplyDefaults fills empty fields with their documented defaults.
func (c *Config) ApplyDefaults() {
	if c.DataDir == "" {
		c.DataDir = "/var/lib/talosbot"
	}
	if c.SnapshotDir == "" {
		c.SnapshotDir = c.DataDir + "/snapshots"
	}
	if c.Listen == "" {
		c.Listen = DefaultListen
	}
	if c.Timeouts.Gate == 0 {
		c.Timeouts.Gate = Duration(DefaultGateTimeout)
	}
	if c.Timeouts.GateAfter == 0 {
		c.Timeouts.GateAfter = Duration(DefaultGateAfter)
	}
	if c.Timeouts.Health == 0 {
		c.Timeouts.Health = Duration(DefaultHealthWait)
	}
	if c.Timeouts.Node == 0 {
		c.Timeouts.Node = Duration(DefaultNodeTimeout)
	}
	if c.Timeouts.Run == 0 {
		c.Timeouts.Run = Duration(DefaultRunTimeout)
	}
	if c.Timeouts.Status == 0 {
		c.Timeouts.Status = Duration(DefaultStatusTimeout)
	}
	c.Snapshots.applyDefaults(c.Clusters)
	c.Releases.applyDefaults()
	c.Certificates.applyDefaults()
	if c.Alerts.ClusterLabel == "" {
		c.Alerts.ClusterLabel = DefaultClusterLabel
	}
	c.applyFollowupDefaults()
	c.applyAlertPauseDefaults()
	c.applyEscalationDefaults()
	if c.Policy == nil {
		c.Policy = map[string]Policy{}
	}
	for _, env := range []string{EnvStaging, EnvProduction} {
		p := c.Policy[env]
		if p.MinApprovals == 0 {
			p.MinApprovals = 1
		}
		if p.Expiry == 0 {
			p.Expiry = Duration(DefaultExpiry)
		}
		if p.PromotionMaxAge == 0 {
			p.PromotionMaxAge = Duration(DefaultPromotionMaxAge)
		}
		c.Policy[env] = p
	}
	for i := range c.Clusters {
		cl := &c.Clusters[i]
		if cl.Credentials.Source == "" {
			cl.Credentials.Source = "files"
		}
		if tf := cl.Credentials.Terraform; tf != nil {
			if tf.Binary == "" {
				tf.Binary = "tofu"
			}
			if tf.Outputs == nil {
				tf.Outputs = map[string]string{}
			}
			for k, v := range DefaultTerraformOutputs() {
				if tf.Outputs[k] == "" {
					tf.Outputs[k] = v
				}
			}
		}
		for j := range cl.Nodes {
			n := &cl.Nodes[j]
			if n.Platform == "" {
				n.Platform = "nocloud"
			}
			if n.InstallerClass == "" {
				n.InstallerClass = "default"
			}
		}
	}
}

// DefaultTerraformOutputs maps each credential or declared value to its
// Terraform output name (ADR 002 names).
func DefaultTerraformOutputs() map[string]string {
	return map[string]string{
		"talosconfig":              "talosconfig",
		"kubeconfig":               "talos_kubeconfig",
		"schematic_id":             "talos_image_factory_schematic_id",
		"longhorn_installer_image": "talos_longhorn_installer_image",
		"talos_version":            "talos_version",
		"kubernetes_version":       "talos_kubernetes_version",
	}
}

// Cluster returns the named cluster, or nil.
func (c *Config) Cluster(name string) *Cluster {
	for i := range c.Clusters {
		if c.Clusters[i].Name == name {
			return &c.Clusters[i]
		}
	}
	return nil
}

// ClusterNames lists the configured cluster names in config order.
func (c *Config) ClusterNames() []string {
	out := make([]string, 0, len(c.Clusters))
	for _, cl := range c.Clusters {
		out = append(out, cl.Name)
	}
	return out
}

// ClustersHint follows "unknown cluster X": the nearest cluster name when X
// looks like a typo of one, then every cluster, e.g.
// `did you mean "staging"? clusters: staging, production`.
func (c *Config) ClustersHint(name string) string {
	names := c.ClusterNames()
	list := "clusters: " + strings.Join(names, ", ")
	if best := Closest(name, names); best != "" {
		return fmt.Sprintf("did you mean %q? %s", best, list)
	}
	return list
}

// ControlPlanes returns the cluster's control-plane nodes in inventory order.
func (cl *Cluster) ControlPlanes() []Node {
	var out []Node
	for _, n := range cl.Nodes {
		if n.Role == RoleControlPlane {
			out = append(out, n)
		}
	}
	return out
}

// Duration is a time.Duration that reads "30m", "14d" or "2h30m" from YAML.
type Duration time.Duration

// D returns the value as a time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

// UnmarshalYAML accepts Go durations plus a "d" (day) suffix. A bad value is
// returned as a *yaml.TypeError so that decoding goes on and every error in
// the file is reported.
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode {
		return &yaml.TypeError{Errors: []string{fmt.Sprintf("line %d: a duration is a single value such as 30s, 20m, 4h or 14d", n.Line)}}
	}
	v, err := ParseDuration(n.Value)
	if err != nil {
		return &yaml.TypeError{Errors: []string{fmt.Sprintf("line %d: %v", n.Line, err)}}
	}
	*d = Duration(v)
	return nil
}

// MarshalYAML writes the duration in Go syntax.
func (d Duration) MarshalYAML() (any, error) { return time.Duration(d).String(), nil }

// MaxDuration bounds every duration talosbot reads (config values, --since,
// audit filters): ten years. Longer values are typos, and without a bound a
// day count such as 213504d overflows time.Duration and wraps around to a few
// minutes.
const MaxDuration = 3650 * 24 * time.Hour

// ParseDuration parses a Go duration or a whole number of days ("14d"). It
// refuses negative values and values above MaxDuration.
func ParseDuration(s string) (time.Duration, error) {
	s = strings.TrimSpace(s)
	tooLong := fmt.Errorf("%q is longer than the maximum of 3650d (ten years)", s)
	if n := len(s); n > 1 && s[n-1] == 'd' {
		if days, err := strconv.ParseUint(s[:n-1], 10, 64); err == nil {
			if days > uint64(MaxDuration/(24*time.Hour)) {
				return 0, tooLong
			}
			return time.Duration(days) * 24 * time.Hour, nil
		} else if errors.Is(err, strconv.ErrRange) {
			return 0, tooLong
		}
	}
	if strings.HasPrefix(s, "-") {
		return 0, fmt.Errorf("%q is negative; durations are how long (e.g. 30s, 20m, 4h or 14d)", s)
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		if strings.Contains(err.Error(), "invalid duration") && durationRE.MatchString(s) {
			return 0, tooLong // time.ParseDuration overflowed
		}
		return 0, fmt.Errorf("%q is not a duration (use e.g. 30s, 20m, 4h or 14d)", s)
	}
	if v > MaxDuration {
		return 0, tooLong
	}
	return v, nil
}

var durationRE = regexp.MustCompile(`^(\d+(\.\d*)?(ns|us|µs|ms|s|m|h))+$`)
