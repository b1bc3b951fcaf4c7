package gitbump

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/go-git/go-billy/v5/memfs"
	git "github.com/go-git/go-git/v5"
	gitconfig "github.com/go-git/go-git/v5/config"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/plumbing/transport"
	githttp "github.com/go-git/go-git/v5/plumbing/transport/http"
	gitssh "github.com/go-git/go-git/v5/plumbing/transport/ssh"
	"github.com/go-git/go-git/v5/storage/memory"
	"golang.org/x/crypto/ssh/knownhosts"

	"github.com/talosbot/talosbot/bot/engine"
	"github.com/talosbot/talosbot/config"
	lifecyclev1 "github.com/talosbot/talosbot/plugins/sdk/proto/lifecycle/v1"
	"github.com/talosbot/talosbot/state"
)

// Bucket is the kv bucket holding one record per prepared change, keyed by
// operation id.
const Bucket = "gitbump"

// Change is one prepared version bump.
type Change struct {
	OpID     string `json:"op_id"`
	Cluster  string `json:"cluster"`
	File     string `json:"file"`
	Variable string `json:"variable"`
	From     string `json:"from"`
	To       string `json:"to"`
	Branch   string `json:"branch"`
	Commit   string `json:"commit"`
	PullURL  string `json:"pull_url,omitempty"`
	// Reverts is the operation whose change this one reverts.
	Reverts string `json:"reverts,omitempty"`
	// Merged is set once the base branch was seen declaring To.
	Merged bool      `json:"merged,omitempty"`
	At     time.Time `json:"at"`
}

// Options configure a Bumper.
type Options struct {
	Config *config.GitFollowup
	Store  *state.Store
	Clock  func() time.Time
	Logger *slog.Logger
	// HTTP is the client for the forge API (default: 30 s timeout).
	HTTP *http.Client
}

// Bumper implements engine.RunHook for the Git follow-up.
type Bumper struct {
	o Options

	// notes caches a GitFollowups answer that could not reach the remote:
	// every plugin request asks, and an unreachable remote must not slow
	// each of them down. Answers that reached it are not cached, so a
	// merge shows at the next request.
	mu    sync.Mutex
	notes map[string]cachedNotes
}

type cachedNotes struct {
	at    time.Time
	notes []*lifecyclev1.GitFollowup
}

// notesTTL is how long a merge check is reused.
const notesTTL = time.Minute

var (
	_ engine.RunHook          = (*Bumper)(nil)
	_ engine.FollowupEvidence = (*Bumper)(nil)
)

// New returns a Bumper.
func New(o Options) (*Bumper, error) {
	if o.Config == nil || o.Store == nil {
		return nil, errors.New("gitbump: Config and Store are required")
	}
	if o.Clock == nil {
		o.Clock = time.Now
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.HTTP == nil {
		o.HTTP = &http.Client{Timeout: 30 * time.Second}
	}
	return &Bumper{o: o, notes: map[string]cachedNotes{}}, nil
}

// RunStarting does nothing: the change is made only after success.
func (*Bumper) RunStarting(context.Context, *state.Operation) ([]string, error) { return nil, nil }

// RunProgress does nothing.
func (*Bumper) RunProgress(context.Context, *state.Operation) {}

// RunEnded prepares the change for a succeeded operation that made declared
// variables true. Any other ending (failed, cancelled, abandoned) prepares
// nothing (R18). A run that made a variable untrue (a rollback, R19) gets
// the revert of the bump prepared for it instead.
func (b *Bumper) RunEnded(ctx context.Context, op *state.Operation, out engine.RunOutput) []string {
	lines := b.reverts(ctx, op, out.Invalidated)
	if op.State != state.StateSucceeded || len(out.Declared) == 0 {
		return lines
	}
	vars := make([]string, 0, len(out.Declared))
	for k := range out.Declared {
		vars = append(vars, k)
	}
	sort.Strings(vars)
	for _, v := range vars {
		ch, err := b.Prepare(ctx, op, v, out.Declared[v])
		switch {
		case err != nil:
			b.audit(ctx, op, "git follow-up failed", "failed", map[string]string{"variable": v, "to": out.Declared[v], "error": err.Error()})
			lines = append(lines, fmt.Sprintf("⚠️ Terraform follow-up not prepared: %v. Change %s = %q in %s by hand (R18).", err, v, out.Declared[v], b.o.Config.FileFor(op.Cluster)))
		case ch == nil:
			lines = append(lines, fmt.Sprintf("📝 Terraform: %s in %s is already %q on %s; no change to prepare.", v, b.o.Config.FileFor(op.Cluster), out.Declared[v], b.o.Config.Base))
		default:
			lines = append(lines, fmt.Sprintf("📝 Terraform change pushed: branch %s sets %s %q → %q in %s (commit %s).%s", ch.Branch, v, ch.From, ch.To, ch.File, short(ch.Commit), pullText(ch)))
		}
	}
	return lines
}

func pullText(ch *Change) string {
	if ch.PullURL == "" {
		return ""
	}
	return " Pull request: " + ch.PullURL
}

// reverts undoes the newest bump of each invalidated variable: a revert
// branch when the bump was merged, a note to close it when it was not.
func (b *Bumper) reverts(ctx context.Context, op *state.Operation, vars []string) []string {
	var lines []string
	for _, v := range vars {
		prev, err := b.latest(ctx, op.Cluster, v)
		if err != nil || prev == nil || prev.Reverts != "" {
			continue // nothing of ours to revert
		}
		branch := fmt.Sprintf("%srevert-%s-%s-%s-%s", b.o.Config.BranchPrefix, op.Cluster, strings.ReplaceAll(v, "_", "-"), prev.From, op.ID)
		msg := func(cur string) string {
			return fmt.Sprintf("Revert %s: %s %s → %s\n\ntalosbot operation %s (%s), requested by %s, made %s untrue: not every node of %s runs %s (R19).\nThis reverts branch %s (operation %s).\n",
				op.Cluster, v, cur, prev.From, op.ID, orNone(op.Text), op.Requester, v, op.Cluster, prev.To, prev.Branch, prev.OpID)
		}
		ch, cur, err := b.change(ctx, op, v, prev.From, prev.To, branch, msg)
		switch {
		case err != nil:
			b.audit(ctx, op, "git revert failed", "failed", map[string]string{"variable": v, "reverts": prev.Branch, "error": err.Error()})
			lines = append(lines, fmt.Sprintf("⚠️ Terraform revert not prepared: %v. Set %s back to %q in %s before the next apply (R19).", err, v, prev.From, prev.File))
		case ch == nil:
			// main still declares the old value: the bump was never merged.
			rec := &Change{OpID: op.ID, Cluster: op.Cluster, File: prev.File, Variable: v, From: cur, To: cur, Reverts: prev.OpID, At: b.o.Clock().UTC()}
			if err := b.save(ctx, rec); err != nil {
				b.o.Logger.Error("record revert", "op", op.ID, "err", err)
			}
			b.audit(ctx, op, "git revert not needed", "ok", map[string]string{"variable": v, "reverts": prev.Branch})
			lines = append(lines, fmt.Sprintf("↩️ Terraform: branch %s (%s → %q, operation %s) is not merged: close it unmerged; %s on %s is still %q (R19).%s",
				prev.Branch, v, prev.To, prev.OpID, v, b.o.Config.Base, cur, pullText(prev)))
		default:
			ch.Reverts = prev.OpID
			if err := b.save(ctx, ch); err != nil {
				b.o.Logger.Error("record revert", "op", op.ID, "err", err)
			}
			lines = append(lines, fmt.Sprintf("↩️ Terraform revert pushed: branch %s sets %s back to %q (reverts branch %s of operation %s); merge it before the next apply (R19).%s",
				ch.Branch, v, ch.To, prev.Branch, prev.OpID, pullText(ch)))
		}
	}
	return lines
}

// GitFollowups tells the plugins, for each variable of the cluster, the
// newest branch prepared and whether it was merged into the base yet, as
// typed evidence (Settings.git_followups; the drift report and the plan
// guard print it).
func (b *Bumper) GitFollowups(ctx context.Context, cluster string) []*lifecyclev1.GitFollowup {
	now := b.o.Clock()
	b.mu.Lock()
	c, ok := b.notes[cluster]
	b.mu.Unlock()
	if ok && now.Sub(c.at) < notesTTL {
		return c.notes
	}
	notes, unreachable := b.requestNotes(ctx, cluster)
	b.mu.Lock()
	if unreachable {
		b.notes[cluster] = cachedNotes{at: now, notes: notes}
	} else {
		delete(b.notes, cluster)
	}
	b.mu.Unlock()
	return notes
}

// forget drops the cached notes of a cluster (its changes changed).
func (b *Bumper) forget(cluster string) {
	b.mu.Lock()
	delete(b.notes, cluster)
	b.mu.Unlock()
}

func (b *Bumper) requestNotes(ctx context.Context, cluster string) (notes []*lifecyclev1.GitFollowup, unreachable bool) {
	all, err := b.Changes(ctx, cluster)
	if err != nil || len(all) == 0 {
		return nil, false
	}
	seen := map[string]bool{}
	var newest []Change
	for _, ch := range all {
		if !seen[ch.Variable] {
			seen[ch.Variable] = true
			if ch.Branch != "" {
				newest = append(newest, ch)
			}
		}
	}
	if len(newest) == 0 {
		return nil, false
	}
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	for i := range newest {
		ch := &newest[i]
		f := &lifecyclev1.GitFollowup{Variable: ch.Variable, Value: ch.To, Branch: ch.Branch, OperationId: ch.OpID,
			Base: b.o.Config.Base, PullRequestUrl: ch.PullURL}
		merged, open, err := b.status(ctx, ch)
		switch {
		case err != nil:
			unreachable = true
			f.State, f.Error = lifecyclev1.GitFollowupState_GIT_FOLLOWUP_STATE_UNCHECKED, err.Error()
		case merged:
			f.State = lifecyclev1.GitFollowupState_GIT_FOLLOWUP_STATE_MERGED
		case open:
			f.State = lifecyclev1.GitFollowupState_GIT_FOLLOWUP_STATE_OPEN
		default:
			f.State = lifecyclev1.GitFollowupState_GIT_FOLLOWUP_STATE_DELETED
		}
		notes = append(notes, f)
	}
	return notes, unreachable
}

// status reads the base branch (merged: it declares ch.To) and, if not
// merged, whether ch's branch still exists on the remote.
func (b *Bumper) status(ctx context.Context, ch *Change) (merged, open bool, err error) {
	if ch.Merged {
		return true, false, nil
	}
	g := b.o.Config
	auth, err := b.auth()
	if err != nil {
		return false, false, err
	}
	repo, err := git.CloneContext(ctx, memory.NewStorage(), memfs.New(), &git.CloneOptions{
		URL: g.Remote, Auth: auth, ReferenceName: plumbing.NewBranchReferenceName(g.Base), SingleBranch: true, Depth: 1,
	})
	if err != nil {
		return false, false, fmt.Errorf("clone %s: %w", g.Remote, err)
	}
	wt, err := repo.Worktree()
	if err != nil {
		return false, false, err
	}
	if src, err := readFile(wt, ch.File); err == nil {
		if _, cur, err := EditVariable(ch.File, src, ch.Variable, ch.To); err == nil && cur == ch.To {
			ch.Merged = true
			_ = b.save(ctx, ch)
			return true, false, nil
		}
	}
	remote, err := repo.Remote("origin")
	if err != nil {
		return false, false, err
	}
	refs, err := remote.ListContext(ctx, &git.ListOptions{Auth: auth})
	if err != nil {
		return false, false, fmt.Errorf("list %s: %w", g.Remote, err)
	}
	for _, r := range refs {
		if r.Name() == plumbing.NewBranchReferenceName(ch.Branch) {
			return false, true, nil
		}
	}
	return false, false, nil
}

// latest returns the newest change of a cluster's variable.
func (b *Bumper) latest(ctx context.Context, cluster, variable string) (*Change, error) {
	all, err := b.Changes(ctx, cluster)
	if err != nil {
		return nil, err
	}
	for i := range all {
		if all[i].Variable == variable {
			return &all[i], nil
		}
	}
	return nil, nil
}

// Prepare makes and pushes the change; it returns nil, nil when the base
// branch already declares value.
func (b *Bumper) Prepare(ctx context.Context, op *state.Operation, variable, value string) (*Change, error) {
	branch := fmt.Sprintf("%s%s-%s-%s-%s", b.o.Config.BranchPrefix, op.Cluster, strings.ReplaceAll(variable, "_", "-"), value, op.ID)
	ch, _, err := b.change(ctx, op, variable, value, "", branch, func(old string) string {
		return message(op, variable, old, value, b.o.Config.FileFor(op.Cluster))
	})
	if err != nil || ch == nil {
		return nil, err
	}
	b.audit(ctx, op, "git follow-up pushed", "ok", map[string]string{"variable": variable, "from": ch.From, "to": value, "branch": ch.Branch, "commit": ch.Commit, "remote": b.o.Config.Remote})
	return ch, b.save(ctx, ch)
}

// change clones the base branch, sets variable to value on a new branch,
// commits and pushes it, and opens the pull request. It returns nil and the
// current value when the base already declares value, and refuses when
// expect is set and the base declares neither expect nor value.
func (b *Bumper) change(ctx context.Context, op *state.Operation, variable, value, expect, branch string, msg func(old string) string) (*Change, string, error) {
	g := b.o.Config
	auth, err := b.auth()
	if err != nil {
		return nil, "", err
	}
	// The clone lives in memory: no checkout or credential outlives the call.
	repo, err := git.CloneContext(ctx, memory.NewStorage(), memfs.New(), &git.CloneOptions{
		URL: g.Remote, Auth: auth, ReferenceName: plumbing.NewBranchReferenceName(g.Base), SingleBranch: true,
	})
	if err != nil {
		return nil, "", fmt.Errorf("clone %s (branch %s): %w", g.Remote, g.Base, err)
	}
	wt, err := repo.Worktree()
	if err != nil {
		return nil, "", err
	}
	file := g.FileFor(op.Cluster)
	src, err := readFile(wt, file)
	if err != nil {
		return nil, "", fmt.Errorf("read %s on %s: %w", file, g.Base, err)
	}
	edited, old, err := EditVariable(file, src, variable, value)
	if err != nil {
		return nil, "", err
	}
	if old == value {
		return nil, old, nil
	}
	if expect != "" && old != expect {
		return nil, old, fmt.Errorf("%s on %s declares %s = %q, not %q: someone changed it since; check it by hand", file, g.Base, variable, old, expect)
	}
	if err := wt.Checkout(&git.CheckoutOptions{Branch: plumbing.NewBranchReferenceName(branch), Create: true}); err != nil {
		return nil, old, fmt.Errorf("create branch %s: %w", branch, err)
	}
	if err := writeFile(wt, file, edited); err != nil {
		return nil, old, err
	}
	if _, err := wt.Add(file); err != nil {
		return nil, old, err
	}
	now := b.o.Clock().UTC()
	sig := &object.Signature{Name: g.AuthorName, Email: g.AuthorEmail, When: now}
	hash, err := wt.Commit(msg(old), &git.CommitOptions{Author: sig, Committer: sig})
	if err != nil {
		return nil, old, fmt.Errorf("commit: %w", err)
	}
	ref := gitconfig.RefSpec("refs/heads/" + branch + ":refs/heads/" + branch)
	if err := repo.PushContext(ctx, &git.PushOptions{RemoteName: "origin", RefSpecs: []gitconfig.RefSpec{ref}, Auth: auth}); err != nil {
		return nil, old, fmt.Errorf("push %s to %s: %w", branch, g.Remote, err)
	}
	ch := &Change{OpID: op.ID, Cluster: op.Cluster, File: file, Variable: variable, From: old, To: value, Branch: branch, Commit: hash.String(), At: now}
	if g.PullRequest != nil {
		url, err := b.openPull(ctx, ch, msg(old))
		if err != nil {
			// The branch is pushed; only the pull request is missing.
			b.audit(ctx, op, "pull request failed", "failed", map[string]string{"branch": branch, "error": err.Error()})
			if serr := b.save(ctx, ch); serr != nil {
				return ch, old, serr
			}
			return ch, old, fmt.Errorf("branch %s is pushed, but the pull request failed: %w", branch, err)
		}
		ch.PullURL = url
		b.audit(ctx, op, "pull request opened", "ok", map[string]string{"branch": branch, "url": url})
	}
	return ch, old, nil
}

func message(op *state.Operation, variable, old, value, file string) string {
	var nodes []string
	seen := map[string]bool{}
	for _, s := range op.Steps {
		if s.Node != "" && !seen[s.Node] && (s.Status == "ok" || s.Status == "skipped") {
			seen[s.Node] = true
			nodes = append(nodes, s.Node)
		}
	}
	sort.Strings(nodes)
	var b strings.Builder
	fmt.Fprintf(&b, "%s: %s %s → %s\n\n", op.Cluster, variable, orNone(old), value)
	fmt.Fprintf(&b, "talosbot operation %s (%s), requested by %s, succeeded at %s.\n", op.ID, orNone(op.Text), op.Requester, op.EndedAt.UTC().Format(time.RFC3339))
	fmt.Fprintf(&b, "Verified before this change (R18): every node of %s runs %s.\n", op.Cluster, value)
	if len(nodes) > 0 {
		fmt.Fprintf(&b, "Nodes: %s\n", strings.Join(nodes, ", "))
	}
	fmt.Fprintf(&b, "\nFile: %s. Run tofu plan before applying: stop if it replaces talos_machine_secrets or any VM (R5).\n", file)
	return b.String()
}

func orNone(s string) string {
	if s == "" {
		return "(none)"
	}
	return s
}

func short(h string) string {
	if len(h) > 12 {
		return h[:12]
	}
	return h
}

// auth builds the transport credentials from their references. They are
// given to go-git per call and never written into the remote URL.
func (b *Bumper) auth() (transport.AuthMethod, error) {
	g := b.o.Config
	ep, err := transport.NewEndpoint(g.Remote)
	if err != nil {
		return nil, fmt.Errorf("git_followup.remote: %w", err)
	}
	switch ep.Protocol {
	case "ssh":
		key, err := g.SSHKey.Resolve()
		if err != nil {
			return nil, fmt.Errorf("git_followup.ssh_key: %w", err)
		}
		var pass string
		if !g.SSHKeyPassphrase.Empty() {
			p, err := g.SSHKeyPassphrase.Resolve()
			if err != nil {
				return nil, fmt.Errorf("git_followup.ssh_key_passphrase: %w", err)
			}
			pass = strings.TrimSpace(string(p))
		}
		user := ep.User
		if user == "" {
			user = "git"
		}
		pk, err := gitssh.NewPublicKeys(user, key, pass)
		if err != nil {
			return nil, fmt.Errorf("git_followup.ssh_key: %w", err)
		}
		cb, err := knownhosts.New(g.KnownHosts)
		if err != nil {
			return nil, fmt.Errorf("git_followup.known_hosts: %w", err)
		}
		pk.HostKeyCallback = cb
		return pk, nil
	case "http", "https":
		tok, err := g.Token.Resolve()
		if err != nil {
			return nil, fmt.Errorf("git_followup.token: %w", err)
		}
		return &githttp.BasicAuth{Username: g.Username, Password: strings.TrimSpace(string(tok))}, nil
	}
	return nil, nil // file: the local git transport needs none
}

// openPull opens the pull request through the forge API. GitHub
// (POST /repos/{owner}/{repo}/pulls) and Gitea/Forgejo
// (POST /api/v1/repos/{owner}/{repo}/pulls) take the same body and both
// answer with the pull request's html_url.
func (b *Bumper) openPull(ctx context.Context, ch *Change, text string) (string, error) {
	pr := b.o.Config.PullRequest
	tok, err := pr.Token.Resolve()
	if err != nil {
		return "", fmt.Errorf("git_followup.pull_request.token: %w", err)
	}
	body, _ := json.Marshal(map[string]any{
		"title": strings.SplitN(text, "\n", 2)[0] + " (talosbot " + ch.OpID + ")",
		"head":  ch.Branch,
		"base":  b.o.Config.Base,
		"body":  text,
	})
	url := strings.TrimSuffix(pr.APIURL, "/") + "/repos/" + pr.Repository + "/pulls"
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(string(body)))
	if err != nil {
		return "", err
	}
	req.Header.Set("Content-Type", "application/json")
	switch pr.Forge {
	case "github":
		req.Header.Set("Accept", "application/vnd.github+json")
		req.Header.Set("X-GitHub-Api-Version", "2022-11-28")
		req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(tok)))
	default:
		req.Header.Set("Accept", "application/json")
		req.Header.Set("Authorization", "token "+strings.TrimSpace(string(tok)))
	}
	resp, err := b.o.HTTP.Do(req)
	if err != nil {
		return "", fmt.Errorf("POST %s: %w", url, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode != http.StatusCreated {
		var e struct {
			Message string `json:"message"`
		}
		_ = json.Unmarshal(raw, &e)
		return "", fmt.Errorf("POST %s: HTTP %d: %s", url, resp.StatusCode, orNone(e.Message))
	}
	var out struct {
		HTMLURL string `json:"html_url"`
		Number  int    `json:"number"`
	}
	if err := json.Unmarshal(raw, &out); err != nil || out.HTMLURL == "" {
		return "", fmt.Errorf("POST %s: the answer has no html_url", url)
	}
	return out.HTMLURL, nil
}

// Changes lists the prepared changes of a cluster, newest first.
func (b *Bumper) Changes(ctx context.Context, cluster string) ([]Change, error) {
	var out []Change
	err := b.o.Store.View(ctx, func(tx *state.Tx) error {
		return tx.ForEachKV(Bucket, func(_ string, v []byte) error {
			var c Change
			if err := json.Unmarshal(v, &c); err != nil {
				return err
			}
			if cluster == "" || c.Cluster == cluster {
				out = append(out, c)
			}
			return nil
		})
	})
	sort.Slice(out, func(i, j int) bool { return out[i].At.After(out[j].At) })
	return out, err
}

func (b *Bumper) save(ctx context.Context, ch *Change) error {
	b.forget(ch.Cluster)
	raw, err := json.Marshal(ch)
	if err != nil {
		return err
	}
	return b.o.Store.Update(ctx, func(tx *state.Tx) error { return tx.PutKV(Bucket, ch.OpID+"/"+ch.Variable, raw) })
}

func (b *Bumper) audit(ctx context.Context, op *state.Operation, action, result string, detail map[string]string) {
	if _, err := b.o.Store.AppendAudit(ctx, state.AuditEvent{Time: b.o.Clock().UTC(), Actor: "system", Action: action, Cluster: op.Cluster,
		OpID: op.ID, Command: op.Command, Result: result, Detail: detail}); err != nil {
		b.o.Logger.Error("audit git follow-up", "op", op.ID, "err", err)
	}
}

func readFile(wt *git.Worktree, name string) ([]byte, error) {
	f, err := wt.Filesystem.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(f)
}

func writeFile(wt *git.Worktree, name string, data []byte) error {
	f, err := wt.Filesystem.OpenFile(name, os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}
