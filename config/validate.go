package config

import (
	"crypto/ed25519"
	"encoding/hex"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"time"
)

// FieldError is one problem, located by its path in the document.
type FieldError struct {
	Path string
	Msg  string
	// Line is the line of the key in the file, when it is written there.
	Line int
}

func (e FieldError) String() string { return e.Path + ": " + e.Msg }

// Errors is every problem found in a configuration.
type Errors struct {
	// File is the configuration file, when the document came from one.
	File string
	List []FieldError
}

func (e *Errors) Error() string {
	lines := make([]string, 0, len(e.List)+1)
	lines = append(lines, fmt.Sprintf("config has %d error(s):", len(e.List)))
	for _, fe := range e.List {
		where := ""
		switch {
		case e.File != "" && fe.Line > 0:
			where = fmt.Sprintf("%s:%d: ", e.File, fe.Line)
		case fe.Line > 0:
			where = fmt.Sprintf("line %d: ", fe.Line)
		}
		lines = append(lines, "  "+where+fe.String())
	}
	return strings.Join(lines, "\n")
}

var releaseRE = regexp.MustCompile(`^v\d+\.\d+\.\d+$`)

// nodeNameRE is a node name: the characters a snapshot name may hold
// (internal/snapname), at most a hostname's length.
var nodeNameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,252}$`)

var nameRE = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$`)

// Validate returns every problem in the configuration (after defaults).
func (c *Config) Validate() []FieldError {
	var errs []FieldError
	add := func(path, format string, args ...any) {
		errs = append(errs, FieldError{Path: path, Msg: fmt.Sprintf(format, args...)})
	}
	if _, _, err := net.SplitHostPort(c.Listen); err != nil {
		add("listen", "%q is not host:port (e.g. 127.0.0.1:8080)", c.Listen)
	}
	if len(c.Clusters) == 0 {
		add("clusters", "at least one cluster is required")
	}
	seen := map[string]bool{}
	for i, cl := range c.Clusters {
		p := fmt.Sprintf("clusters[%d]", i)
		switch {
		case cl.Name == "":
			add(p+".name", "is required")
		case !nameRE.MatchString(cl.Name):
			add(p+".name", "%q must be lower-case letters, digits and dashes", cl.Name)
		case seen[cl.Name]:
			add(p+".name", "%q is used by another cluster", cl.Name)
		}
		seen[cl.Name] = true
		if cl.Environment != EnvStaging && cl.Environment != EnvProduction {
			add(p+".environment", "%q must be %q or %q", cl.Environment, EnvStaging, EnvProduction)
		}
		if len(cl.Endpoints) == 0 {
			add(p+".endpoints", "at least one Talos endpoint is required")
		}
		for j, ep := range cl.Endpoints {
			if !validEndpoint(ep) {
				add(fmt.Sprintf("%s.endpoints[%d]", p, j), "%q is not an IP address or host[:port]", ep)
			}
		}
		errs = append(errs, validateNodes(p, cl.Nodes)...)
		errs = append(errs, validateCredentials(p+".credentials", cl.Credentials)...)
	}
	errs = append(errs, c.validatePolicy()...)
	errs = append(errs, c.Releases.validate()...)
	errs = append(errs, c.Certificates.validate()...)
	if c.Timeouts.Gate <= 0 || c.Timeouts.GateAfter <= 0 || c.Timeouts.Health <= 0 || c.Timeouts.Node <= 0 || c.Timeouts.Run <= 0 || c.Timeouts.Status <= 0 {
		add("timeouts", "gate, gate_after, health, node, run and status timeouts must be positive")
	} else {
		errs = append(errs, c.Timeouts.validateGate()...)
	}
	errs = append(errs, c.Snapshots.validate(c)...)
	if s := c.Chat.Slack; s != nil {
		if s.Mode != "" && s.Mode != "socket" && s.Mode != "http" {
			add("chat.slack.mode", "%q must be socket or http", s.Mode)
		}
		if s.BotToken.Empty() {
			add("chat.slack.bot_token", "is required (e.g. env:SLACK_BOT_TOKEN)")
		}
		if (s.Mode == "" || s.Mode == "socket") && s.AppToken.Empty() {
			add("chat.slack.app_token", "is required in socket mode (e.g. env:SLACK_APP_TOKEN)")
		}
		if s.Mode == "http" && s.SigningSecret.Empty() {
			add("chat.slack.signing_secret", "is required in http mode (e.g. env:SLACK_SIGNING_SECRET)")
		}
		if s.APIURL != "" && !validURL(s.APIURL) {
			add("chat.slack.api_url", "%q is not an http(s) URL", s.APIURL)
		}
		checkRefs(&errs, "chat.slack", map[string]Ref{"app_token": s.AppToken, "bot_token": s.BotToken, "signing_secret": s.SigningSecret})
	}
	if d := c.Chat.Discord; d != nil {
		if d.Token.Empty() {
			add("chat.discord.token", "is required (e.g. env:DISCORD_BOT_TOKEN)")
		}
		if d.ApplicationID == "" {
			add("chat.discord.application_id", "is required")
		}
		if d.PublicKey != "" {
			// The same rule as the adapter's (discord.New), so that serve
			// never refuses a key config check accepted.
			if k, err := hex.DecodeString(d.PublicKey); err != nil || len(k) != ed25519.PublicKeySize {
				add("chat.discord.public_key", "must be the application's 64-hex-digit Ed25519 public key (Developer Portal → General Information)")
			}
		}
		if d.APIURL != "" && !validURL(d.APIURL) {
			add("chat.discord.api_url", "%q is not an http(s) URL", d.APIURL)
		}
		checkRefs(&errs, "chat.discord", map[string]Ref{"token": d.Token})
	}
	if w := c.Chat.Web; w != nil {
		errs = append(errs, w.validate()...)
	}
	checkRefs(&errs, "alerts", map[string]Ref{"token": c.Alerts.Token})
	checkRefs(&errs, "audit", map[string]Ref{"token": c.Audit.Token})
	for i, r := range c.Alerts.Rules {
		p := fmt.Sprintf("alerts.rules[%d]", i)
		if r.Name == "" {
			add(p+".name", "is required")
		}
		if len(r.Match)+len(r.MatchRE) == 0 {
			add(p, "needs at least one matcher in match or match_re")
		}
		for k, v := range r.MatchRE {
			if _, err := regexp.Compile("^(?:" + v + ")$"); err != nil {
				add(p+".match_re."+k, "%q is not a valid regular expression: %v", v, err)
			}
		}
		for j, cmd := range r.Commands {
			if !strings.HasPrefix(cmd, "/talos ") {
				add(fmt.Sprintf("%s.commands[%d]", p, j), "%q must start with /talos", cmd)
			}
		}
	}
	errs = append(errs, c.validateFollowups()...)
	errs = append(errs, c.validateAlertPause()...)
	errs = append(errs, c.validateEscalation()...)
	errs = append(errs, c.validateMaintenanceSchedule()...)
	errs = append(errs, c.validatePassEnv()...)
	errs = append(errs, c.validatePluginSections()...)
	for i, pl := range c.Plugins.External {
		p := fmt.Sprintf("plugins.external[%d]", i)
		if pl.Name == "" || pl.Path == "" {
			add(p, "name and path are required")
		}
		if len(pl.SHA256) != 64 || strings.Trim(strings.ToLower(pl.SHA256), "0123456789abcdef") != "" {
			add(p+".sha256", "must be the 64-character hex sha256 of the plugin binary (sha256sum PATH)")
		}
	}
	return errs
}

func validateNodes(p string, nodes []Node) []FieldError {
	var errs []FieldError
	add := func(path, format string, args ...any) {
		errs = append(errs, FieldError{Path: path, Msg: fmt.Sprintf(format, args...)})
	}
	if len(nodes) == 0 {
		add(p+".nodes", "at least one node is required")
	}
	names, addrs, cps := map[string]bool{}, map[string]bool{}, 0
	for j, n := range nodes {
		np := fmt.Sprintf("%s.nodes[%d]", p, j)
		if n.Name == "" {
			add(np+".name", "is required")
		} else if !nodeNameRE.MatchString(n.Name) {
			// The name is part of every snapshot's file and object name:
			// a '/' or ".." would put the file outside the snapshot
			// directory, and a space or other character would make a
			// snapshot that listing, retention and recover never see.
			add(np+".name", "%q is not a node name: use letters, digits, '.', '-' and '_', starting with a letter or digit (the node's hostname, e.g. cp-1)", n.Name)
		} else if names[n.Name] {
			add(np+".name", "%q is used by another node", n.Name)
		}
		names[n.Name] = true
		if _, err := netip.ParseAddr(n.Address); err != nil {
			add(np+".address", "%q is not an IP address", n.Address)
		} else if addrs[n.Address] {
			add(np+".address", "%q is used by another node", n.Address)
		}
		addrs[n.Address] = true
		switch n.Role {
		case RoleControlPlane:
			cps++
		case RoleWorker:
		default:
			add(np+".role", "%q must be %q or %q", n.Role, RoleControlPlane, RoleWorker)
		}
		if n.Host == "" {
			add(np+".host", "is required (the Proxmox host the node runs on)")
		}
		if n.Platform == "metal" || strings.Contains(n.Platform, "/") {
			add(np+".platform", "%q is not an Image Factory cloud platform name such as nocloud", n.Platform)
		}
		if n.InstallerClass != "default" && n.InstallerClass != "longhorn" {
			add(np+".installer_class", "%q must be default or longhorn", n.InstallerClass)
		}
	}
	if len(nodes) > 0 && cps == 0 {
		add(p+".nodes", "at least one node must have role controlplane")
	}
	return errs
}

func validateCredentials(p string, cr Credentials) []FieldError {
	var errs []FieldError
	add := func(path, format string, args ...any) {
		errs = append(errs, FieldError{Path: path, Msg: fmt.Sprintf(format, args...)})
	}
	switch cr.Source {
	case "files":
		if cr.Talosconfig.Empty() {
			add(p+".talosconfig", "is required with source files (e.g. file:/etc/talosbot/talosconfig)")
		}
		checkRefs(&errs, p, map[string]Ref{"talosconfig": cr.Talosconfig, "kubeconfig": cr.Kubeconfig})
	case "terraform":
		if cr.Terraform == nil || cr.Terraform.Root == "" {
			add(p+".terraform.root", "is required with source terraform (the Terraform root directory)")
		} else if msg := checkRoot(cr.Terraform.Root); msg != "" {
			add(p+".terraform.root", "%s", msg)
		}
		if cr.Terraform != nil && cr.Terraform.Binary != "tofu" && cr.Terraform.Binary != "terraform" && !strings.HasPrefix(cr.Terraform.Binary, "/") {
			add(p+".terraform.binary", "%q must be tofu, terraform or an absolute path", cr.Terraform.Binary)
		}
	default:
		add(p+".source", "%q must be files or terraform", cr.Source)
	}
	return errs
}

// checkRoot says what is wrong with a Terraform root, or "". The root is an
// absolute path (it is documented as one, and a relative one would depend
// on serve's working directory), and it names its directory directly: a
// ".." segment can climb out of where it seems to point (/srv/tf/../../etc
// is /etc).
func checkRoot(root string) string {
	if !strings.HasPrefix(root, "/") {
		return fmt.Sprintf("%q must be an absolute path to the Terraform root directory (e.g. /srv/homelab/terraform)", root)
	}
	if slices.Contains(strings.Split(root, "/"), "..") {
		return fmt.Sprintf("%q must not contain .. segments; write the directory itself (%s)", root, filepath.Clean(root))
	}
	return ""
}

func validateWindow(p string, w Window) []FieldError {
	var errs []FieldError
	days := map[string]bool{"mon": true, "tue": true, "wed": true, "thu": true, "fri": true, "sat": true, "sun": true}
	if len(w.Days) == 0 {
		errs = append(errs, FieldError{Path: p + ".days", Msg: "at least one weekday is required (mon … sun)"})
	}
	for i, d := range w.Days {
		if !days[strings.ToLower(d)] {
			errs = append(errs, FieldError{Path: fmt.Sprintf("%s.days[%d]", p, i), Msg: fmt.Sprintf("%q is not a weekday (mon … sun)", d)})
		}
	}
	for _, f := range []struct{ k, v string }{{"start", w.Start}, {"end", w.End}} {
		if _, err := time.Parse("15:04", f.v); err != nil {
			errs = append(errs, FieldError{Path: p + "." + f.k, Msg: fmt.Sprintf("%q is not a time like 22:00", f.v)})
		}
	}
	if _, err := time.LoadLocation(w.Timezone); err != nil || w.Timezone == "" {
		errs = append(errs, FieldError{Path: p + ".timezone", Msg: fmt.Sprintf("%q is not an IANA timezone like Europe/Berlin", w.Timezone)})
	}
	return errs
}

func checkRefs(errs *[]FieldError, p string, refs map[string]Ref) {
	keys := make([]string, 0, len(refs))
	for k := range refs {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if r := refs[k]; !r.Empty() {
			if msg := r.Check(); msg != "" {
				*errs = append(*errs, FieldError{Path: p + "." + k, Msg: msg})
			}
		}
	}
}

func validURL(s string) bool {
	u, err := url.Parse(s)
	return err == nil && (u.Scheme == "http" || u.Scheme == "https") && u.Host != ""
}

func validEndpoint(ep string) bool {
	host := ep
	if h, _, err := net.SplitHostPort(ep); err == nil {
		host = h
	}
	if _, err := netip.ParseAddr(host); err == nil {
		return true
	}
	return regexp.MustCompile(`^[a-zA-Z0-9]([a-zA-Z0-9.-]*[a-zA-Z0-9])?$`).MatchString(host) && strings.Contains(host, ".")
}

// validate checks the console's users: each has a name and their own token
// reference. A shared token (the old chat.web.token) is refused, since the
// token is what says who is asking.
func (w *Web) validate() []FieldError {
	var errs []FieldError
	add := func(path, format string, args ...any) {
		errs = append(errs, FieldError{Path: path, Msg: fmt.Sprintf(format, args...)})
	}
	if !w.Token.Empty() {
		add("chat.web.token", "a console token shared by everyone lets whoever holds it act as any user; give each user their own: chat.web.users: [{name: alice, token: env:ALICE_CONSOLE_TOKEN}]")
	}
	if w.Enabled && len(w.Users) == 0 {
		add("chat.web.users", "the console is enabled but has no users; list each with their own token: [{name: alice, token: env:ALICE_CONSOLE_TOKEN}]")
	}
	names, refs := map[string]bool{}, map[Ref]string{}
	for i, u := range w.Users {
		p := fmt.Sprintf("chat.web.users[%d]", i)
		switch {
		case u.Name == "":
			add(p+".name", "is required (the user id policy lists, e.g. alice)")
		case strings.ContainsAny(u.Name, " \t\n:"):
			add(p+".name", "%q must not contain spaces or colons", u.Name)
		case names[u.Name]:
			add(p+".name", "%q is listed twice", u.Name)
		}
		names[u.Name] = true
		switch {
		case u.Token.Empty():
			add(p+".token", "is required: each user's own token, by reference (e.g. env:ALICE_CONSOLE_TOKEN)")
		case refs[u.Token] != "":
			add(p+".token", "is the same reference as %s's; each user needs their own token", refs[u.Token])
		default:
			if msg := u.Token.Check(); msg != "" {
				add(p+".token", "%s", msg)
			}
			refs[u.Token] = u.Name
		}
	}
	return errs
}

// validateGate checks the health gate's waits against each other: a wait
// after a node shorter than one gate run could never see a run finish, and
// no wait may outlast the operation that holds it.
func (t Timeouts) validateGate() []FieldError {
	var errs []FieldError
	if t.GateAfter < t.Gate {
		errs = append(errs, FieldError{Path: "timeouts.gate_after", Msg: fmt.Sprintf(
			"%s is shorter than one gate run (timeouts.gate %s): raise timeouts.gate_after or lower timeouts.gate", t.GateAfter.D(), t.Gate.D())})
	}
	for _, w := range []struct {
		key string
		d   Duration
	}{{"gate", t.Gate}, {"gate_after", t.GateAfter}, {"health", t.Health}} {
		if w.d > t.Run {
			errs = append(errs, FieldError{Path: "timeouts." + w.key, Msg: fmt.Sprintf(
				"%s is longer than an operation may run (timeouts.run %s): lower it or raise timeouts.run", w.d.D(), t.Run.D())})
		}
	}
	return errs
}
