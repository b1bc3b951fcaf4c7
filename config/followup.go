package config

import (
	"fmt"
	"net/url"
	"path"
	"regexp"
	"strings"
	"time"
)

// This file holds the settings of the work that follows a disruptive
// operation around its run: Alertmanager silences while it runs and the
// Terraform version bump as a Git change after it succeeded. Both are off
// while their section is absent.

// Silences configures the Alertmanager silence held while a disruptive
// operation runs (package bot/silence).
type Silences struct {
	// URL is Alertmanager's base URL (the API is URL/api/v2).
	URL string `yaml:"alertmanager_url"`
	// Token is sent as "Authorization: Bearer TOKEN"; or Username and
	// Password for basic auth. Both are optional (an Alertmanager behind
	// no proxy needs none).
	Token    Ref    `yaml:"token,omitempty"`
	Username string `yaml:"username,omitempty"`
	Password Ref    `yaml:"password,omitempty"`
	// ClusterLabel is the alert label naming the cluster (default: alerts.cluster_label).
	ClusterLabel string `yaml:"cluster_label,omitempty"`
	// NodeLabel, when set, narrows the silence to the operation's nodes
	// (a regex matcher on this label, e.g. "node" or "instance").
	NodeLabel string `yaml:"node_label,omitempty"`
	// Duration is how long a silence lasts from its creation or last
	// extension; it is extended while the operation runs (default 30m).
	Duration Duration `yaml:"duration,omitempty"`
	// RequireIn lists environments where a disruptive operation refuses to
	// start without its silence. Elsewhere it runs with a warning.
	RequireIn []string `yaml:"require_in,omitempty"`
}

// DefaultSilenceDuration is the length of a silence before its first extension.
const DefaultSilenceDuration = 30 * time.Minute

// Required reports whether env needs a silence before a disruptive run.
func (s *Silences) Required(env string) bool {
	for _, e := range s.RequireIn {
		if e == env {
			return true
		}
	}
	return false
}

// GitFollowup configures the Terraform version bump prepared as a Git
// change after an operation that changed a declared version succeeded
// (package bot/gitbump).
type GitFollowup struct {
	// Remote is the repository: ssh://git@host/org/infra.git,
	// git@host:org/infra.git, https://host/org/infra.git or (tests, a
	// mirror on the same host) file:///path. It never holds credentials.
	Remote string `yaml:"remote"`
	// Base is the branch the change starts from and the pull request
	// targets (default main).
	Base string `yaml:"base,omitempty"`
	// File is the variables file inside the repository (default
	// terraform/variables_talos.tf). Files overrides it per cluster.
	File  string            `yaml:"file,omitempty"`
	Files map[string]string `yaml:"files,omitempty"`
	// BranchPrefix starts every branch name (default talosbot/).
	BranchPrefix string `yaml:"branch_prefix,omitempty"`
	AuthorName   string `yaml:"author_name,omitempty"`
	AuthorEmail  string `yaml:"author_email,omitempty"`
	// SSH: a private key (and its passphrase) by reference, and the
	// known_hosts file that pins the server's key (required with ssh).
	SSHKey           Ref    `yaml:"ssh_key,omitempty"`
	SSHKeyPassphrase Ref    `yaml:"ssh_key_passphrase,omitempty"`
	KnownHosts       string `yaml:"known_hosts,omitempty"`
	// HTTPS: a username (default "git") and a token by reference.
	Username string `yaml:"username,omitempty"`
	Token    Ref    `yaml:"token,omitempty"`
	// PullRequest, when set, opens a pull request through the forge's API.
	PullRequest *PullRequest `yaml:"pull_request,omitempty"`
}

// PullRequest configures the forge API call that opens the pull request.
type PullRequest struct {
	// Forge is "github" or "gitea" (Forgejo speaks the Gitea API).
	Forge string `yaml:"forge"`
	// APIURL: https://api.github.com for GitHub, https://HOST/api/v1 for Gitea.
	APIURL string `yaml:"api_url"`
	// Repository is "owner/name".
	Repository string `yaml:"repository"`
	Token      Ref    `yaml:"token"`
}

// Defaults of the Git follow-up.
const (
	DefaultGitBase         = "main"
	DefaultGitFile         = "terraform/variables_talos.tf"
	DefaultGitBranchPrefix = "talosbot/"
)

// FileFor returns the variables file for cluster.
func (g *GitFollowup) FileFor(cluster string) string {
	if f := g.Files[cluster]; f != "" {
		return f
	}
	return g.File
}

func (c *Config) applyFollowupDefaults() {
	if s := c.Silences; s != nil {
		if s.ClusterLabel == "" {
			s.ClusterLabel = c.Alerts.ClusterLabel
		}
		if s.Duration == 0 {
			s.Duration = Duration(DefaultSilenceDuration)
		}
	}
	if g := c.Git; g != nil {
		if g.Base == "" {
			g.Base = DefaultGitBase
		}
		if g.File == "" {
			g.File = DefaultGitFile
		}
		if g.BranchPrefix == "" {
			g.BranchPrefix = DefaultGitBranchPrefix
		}
		if g.AuthorName == "" {
			g.AuthorName = "talosbot"
		}
		if g.AuthorEmail == "" {
			g.AuthorEmail = "talosbot@localhost"
		}
		if g.Username == "" {
			g.Username = "git"
		}
	}
}

var labelRE = regexp.MustCompile(`^[a-zA-Z_][a-zA-Z0-9_]*$`)

// scpRemoteRE is git's scp-like syntax: user@host:path.
var scpRemoteRE = regexp.MustCompile(`^[A-Za-z0-9._-]+@[A-Za-z0-9.-]+:[^/].*$`)

func (c *Config) validateFollowups() []FieldError {
	var errs []FieldError
	add := func(p, format string, args ...any) {
		errs = append(errs, FieldError{Path: p, Msg: fmt.Sprintf(format, args...)})
	}
	if s := c.Silences; s != nil {
		if u, err := url.Parse(s.URL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			add("silences.alertmanager_url", "%q is not an http(s) URL (e.g. http://alertmanager:9093)", s.URL)
		} else if u.User != nil {
			add("silences.alertmanager_url", "must not hold credentials: use silences.token, or silences.username and silences.password")
		}
		if !labelRE.MatchString(s.ClusterLabel) {
			add("silences.cluster_label", "%q is not a Prometheus label name", s.ClusterLabel)
		}
		if s.NodeLabel != "" && !labelRE.MatchString(s.NodeLabel) {
			add("silences.node_label", "%q is not a Prometheus label name", s.NodeLabel)
		}
		if s.Duration.D() < time.Minute {
			add("silences.duration", "must be at least 1m (it is extended while the operation runs)")
		}
		if !s.Token.Empty() && !s.Password.Empty() {
			add("silences", "set token (bearer) or username and password (basic auth), not both")
		}
		if (s.Username == "") != s.Password.Empty() {
			add("silences.password", "username and password go together")
		}
		for i, e := range s.RequireIn {
			if e != EnvStaging && e != EnvProduction {
				add(fmt.Sprintf("silences.require_in[%d]", i), "%q is not an environment (staging or production)", e)
			}
		}
		checkRefs(&errs, "silences", map[string]Ref{"token": s.Token, "password": s.Password})
	}
	if g := c.Git; g != nil {
		errs = append(errs, g.validate()...)
	}
	return errs
}

func (g *GitFollowup) validate() []FieldError {
	var errs []FieldError
	add := func(p, format string, args ...any) {
		errs = append(errs, FieldError{Path: "git_followup" + p, Msg: fmt.Sprintf(format, args...)})
	}
	kind := ""
	if u, err := url.Parse(g.Remote); err == nil && u.Scheme != "" {
		kind = u.Scheme
		// ssh://git@host names the ssh user; anything else in the
		// userinfo (a password, or a token as an https user) is a secret.
		if _, hasPass := u.User.Password(); hasPass || (u.User != nil && kind != "ssh") {
			add(".remote", "must not hold credentials: use git_followup.token (https) or git_followup.ssh_key (ssh)")
		}
	} else if scpRemoteRE.MatchString(g.Remote) {
		kind = "ssh"
	}
	switch kind {
	case "ssh":
		if g.SSHKey.Empty() {
			add(".ssh_key", "is required for an ssh remote (e.g. file:/etc/talosbot/deploy_key)")
		}
		if g.KnownHosts == "" || !strings.HasPrefix(g.KnownHosts, "/") {
			add(".known_hosts", "an absolute path to a known_hosts file is required for an ssh remote: the server's key is pinned, never trusted on first use")
		}
	case "https", "http":
		if g.Token.Empty() {
			add(".token", "is required for an http(s) remote (e.g. env:TALOSBOT_GIT_TOKEN)")
		}
	case "file":
	default:
		add(".remote", "%q is not a Git remote (use ssh://git@host/org/repo.git, git@host:org/repo.git or https://host/org/repo.git)", g.Remote)
	}
	for name, f := range map[string]string{"file": g.File} {
		if msg := repoPathProblem(f); msg != "" {
			add("."+name, "%s", msg)
		}
	}
	for cl, f := range g.Files {
		if msg := repoPathProblem(f); msg != "" {
			add(".files."+cl, "%s", msg)
		}
	}
	if strings.ContainsAny(g.BranchPrefix, " ~^:?*[\\") || strings.Contains(g.BranchPrefix, "..") {
		add(".branch_prefix", "%q is not valid in a Git branch name", g.BranchPrefix)
	}
	checkRefs(&errs, "git_followup", map[string]Ref{"ssh_key": g.SSHKey, "ssh_key_passphrase": g.SSHKeyPassphrase, "token": g.Token})
	if pr := g.PullRequest; pr != nil {
		if pr.Forge != "github" && pr.Forge != "gitea" {
			add(".pull_request.forge", "%q is not supported (github or gitea; Forgejo uses gitea)", pr.Forge)
		}
		if u, err := url.Parse(pr.APIURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			add(".pull_request.api_url", "%q is not an http(s) URL (https://api.github.com, or https://HOST/api/v1 for Gitea)", pr.APIURL)
		}
		if parts := strings.Split(pr.Repository, "/"); len(parts) != 2 || parts[0] == "" || parts[1] == "" {
			add(".pull_request.repository", "%q must be owner/name", pr.Repository)
		}
		if pr.Token.Empty() {
			add(".pull_request.token", "is required (e.g. env:TALOSBOT_FORGE_TOKEN)")
		}
		checkRefs(&errs, "git_followup.pull_request", map[string]Ref{"token": pr.Token})
	}
	return errs
}

func repoPathProblem(p string) string {
	if p == "" || strings.HasPrefix(p, "/") || path.Clean(p) != p || strings.HasPrefix(p, "../") || p == ".." {
		return fmt.Sprintf("%q must be a clean path inside the repository (e.g. terraform/variables_talos.tf)", p)
	}
	return ""
}
