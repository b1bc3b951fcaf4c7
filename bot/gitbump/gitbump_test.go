package gitbump_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/cgi"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/talosbot/talosbot/bot/engine"
	"github.com/talosbot/talosbot/bot/gitbump"
	"github.com/talosbot/talosbot/config"
	lifecyclev1 "github.com/talosbot/talosbot/plugins/sdk/proto/lifecycle/v1"
	"github.com/talosbot/talosbot/state"
)

const variablesTF = `# Talos versions (ADR 002)
variable "talos_version" {
  type    = string
  default = "v1.12.6"
}

variable "talos_kubernetes_version" {
  type    = string
  default = "v1.35.2"
}
`

func gitCmd(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", append([]string{"-c", "user.name=seed", "-c", "user.email=seed@example.test", "-c", "init.defaultBranch=main"}, args...)...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "HOME="+dir)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// bareRemote makes a bare repository with main holding the variables file,
// the way an infrastructure repository looks.
func bareRemote(t *testing.T) (bare string) {
	t.Helper()
	if _, err := exec.LookPath("git"); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("git CLI is missing: apt-get install git")
		}
		t.Skip("git CLI is missing (apt-get install git)")
	}
	root := t.TempDir()
	bare = filepath.Join(root, "infra.git")
	gitCmd(t, root, "init", "--bare", "-b", "main", bare)
	seed := filepath.Join(root, "seed")
	gitCmd(t, root, "clone", bare, seed)
	if err := os.MkdirAll(filepath.Join(seed, "terraform"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(seed, "terraform", "variables_talos.tf"), []byte(variablesTF), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(seed, "README.md"), []byte("infra\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	gitCmd(t, seed, "add", ".")
	gitCmd(t, seed, "commit", "-m", "seed")
	gitCmd(t, seed, "push", "origin", "main")
	return bare
}

func openStore(t *testing.T) *state.Store {
	t.Helper()
	st, err := state.Open(filepath.Join(t.TempDir(), "talosbot.db"), state.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	return st
}

func gitConfig(t *testing.T, remote string, mutate func(*config.GitFollowup)) *config.GitFollowup {
	t.Helper()
	g := &config.GitFollowup{Remote: remote}
	if mutate != nil {
		mutate(g)
	}
	c := &config.Config{Git: g}
	c.ApplyDefaults()
	return c.Git
}

func succeededOp() *state.Operation {
	return &state.Operation{ID: "op123abc", Cluster: "staging", Environment: "staging", Command: "upgrade talos", Text: "/talos upgrade talos v1.13.9 staging",
		Requester: "alice", State: state.StateSucceeded, Disruptive: true, Attempts: 1, EndedAt: time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC),
		Steps: []state.Step{{ID: "node/worker-1", Node: "worker-1", Status: "ok"}, {ID: "node/cp-1", Node: "cp-1", Status: "ok"}, {ID: "verify", Status: "ok"}}}
}

func branches(t *testing.T, bare string) []string {
	out := strings.Fields(gitCmd(t, bare, "for-each-ref", "--format=%(refname:short)", "refs/heads/"))
	return out
}

// TestBumpAfterSuccessChangesOneLine: a succeeded operation that made
// talos_version true pushes a new branch whose only change from main is
// that one line, with a message naming the operation, nodes and version.
func TestBumpAfterSuccessChangesOneLine(t *testing.T) {
	bare := bareRemote(t)
	st := openStore(t)
	b, err := gitbump.New(gitbump.Options{Config: gitConfig(t, "file://"+bare, nil), Store: st})
	if err != nil {
		t.Fatal(err)
	}
	op := succeededOp()
	lines := b.RunEnded(context.Background(), op, engine.RunOutput{Declared: map[string]string{"talos_version": "v1.13.9"}})
	if len(lines) != 1 || !strings.Contains(lines[0], "branch talosbot/staging-talos-version-v1.13.9-op123abc") {
		t.Fatalf("lines: %q", lines)
	}
	br := "talosbot/staging-talos-version-v1.13.9-op123abc"
	if got := branches(t, bare); strings.Join(got, " ") != "main "+br {
		t.Fatalf("remote branches: %v", got)
	}
	if ns := strings.TrimSpace(gitCmd(t, bare, "diff", "--numstat", "main", br)); ns != "1\t1\tterraform/variables_talos.tf" {
		t.Fatalf("diff --numstat main %s = %q, want one line changed in the variables file", br, ns)
	}
	diff := gitCmd(t, bare, "diff", "-U0", "main", br)
	if !strings.Contains(diff, "-  default = \"v1.12.6\"\n+  default = \"v1.13.9\"\n") {
		t.Fatalf("diff:\n%s", diff)
	}
	if got := gitCmd(t, bare, "show", br+":terraform/variables_talos.tf"); got != strings.Replace(variablesTF, "v1.12.6", "v1.13.9", 1) {
		t.Fatalf("file on the branch:\n%s", got)
	}
	msg := gitCmd(t, bare, "log", "-1", "--format=%an <%ae>%n%B", br)
	for _, want := range []string{"talosbot <talosbot@localhost>", "staging: talos_version v1.12.6 → v1.13.9", "operation op123abc", "requested by alice", "Nodes: cp-1, worker-1", "every node of staging runs v1.13.9"} {
		if !strings.Contains(msg, want) {
			t.Errorf("commit message lacks %q:\n%s", want, msg)
		}
	}
	changes, err := b.Changes(context.Background(), "staging")
	if err != nil || len(changes) != 1 || changes[0].Branch != br || changes[0].From != "v1.12.6" {
		t.Fatalf("changes %+v %v", changes, err)
	}
	// The same version again: nothing to prepare once main declares it is
	// checked against main, which still says v1.12.6 until the merge, so
	// a second success makes its own branch.
	gitCmd(t, bare, "update-ref", "refs/heads/main", br)
	lines = b.RunEnded(context.Background(), &state.Operation{ID: "op2", Cluster: "staging", State: state.StateSucceeded, Disruptive: true, Attempts: 1},
		engine.RunOutput{Declared: map[string]string{"talos_version": "v1.13.9"}})
	if len(lines) != 1 || !strings.Contains(lines[0], "already \"v1.13.9\"") {
		t.Fatalf("after the merge: %q", lines)
	}
	if got := branches(t, bare); len(got) != 2 {
		t.Fatalf("a second branch was pushed for a version main already declares: %v", got)
	}
}

// TestNoBumpUnlessSucceeded: failed, cancelled and rolled-back operations
// push nothing, even when the plugin's output names a version.
func TestNoBumpUnlessSucceeded(t *testing.T) {
	bare := bareRemote(t)
	b, err := gitbump.New(gitbump.Options{Config: gitConfig(t, "file://"+bare, nil), Store: openStore(t)})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []state.OpState{state.StateFailed, state.StateCancelled} {
		op := succeededOp()
		op.State = s
		if lines := b.RunEnded(context.Background(), op, engine.RunOutput{Declared: map[string]string{"talos_version": "v1.13.9"}}); len(lines) != 0 {
			t.Fatalf("%s: %q", s, lines)
		}
	}
	// A succeeded operation that declared nothing (a rollback, a snapshot).
	if lines := b.RunEnded(context.Background(), succeededOp(), engine.RunOutput{}); len(lines) != 0 {
		t.Fatalf("no declared change: %q", lines)
	}
	if got := branches(t, bare); len(got) != 1 {
		t.Fatalf("remote branches: %v", got)
	}
}

// TestPushRefusedIsReportedAndChangesNothing: a remote whose pre-receive
// hook refuses the push: the reason reaches the result line and the audit,
// no branch exists and no change is recorded.
func TestPushRefusedIsReportedAndChangesNothing(t *testing.T) {
	bare := bareRemote(t)
	hook := filepath.Join(bare, "hooks", "pre-receive")
	if err := os.WriteFile(hook, []byte("#!/bin/sh\necho 'branch protection: pushes need a signed-off commit' >&2\nexit 1\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	st := openStore(t)
	b, err := gitbump.New(gitbump.Options{Config: gitConfig(t, "file://"+bare, nil), Store: st})
	if err != nil {
		t.Fatal(err)
	}
	before := gitCmd(t, bare, "for-each-ref")
	lines := b.RunEnded(context.Background(), succeededOp(), engine.RunOutput{Declared: map[string]string{"talos_version": "v1.13.9"}})
	if len(lines) != 1 || !strings.Contains(lines[0], "not prepared") || !strings.Contains(lines[0], "pre-receive hook declined") {
		t.Fatalf("lines: %q", lines)
	}
	if after := gitCmd(t, bare, "for-each-ref"); after != before {
		t.Fatalf("refs changed:\n%s\n→\n%s", before, after)
	}
	if ch, _ := b.Changes(context.Background(), ""); len(ch) != 0 {
		t.Fatalf("a refused push was recorded: %+v", ch)
	}
	recs, err := st.QueryAudit(context.Background(), state.AuditQuery{})
	if err != nil || len(recs) != 1 || recs[0].Action != "git follow-up failed" || !strings.Contains(recs[0].Detail["error"], "pre-receive hook declined") {
		t.Fatalf("audit: %+v %v", recs, err)
	}
}

// gitHTTP serves bare repositories under root through git's own
// http-backend (smart HTTP), behind basic auth with password token.
func gitHTTP(t *testing.T, root, token string) *httptest.Server {
	t.Helper()
	execPath := strings.TrimSpace(gitCmd(t, root, "--exec-path"))
	backend := &cgi.Handler{Path: filepath.Join(execPath, "git-http-backend"), Env: []string{"GIT_PROJECT_ROOT=" + root, "GIT_HTTP_EXPORT_ALL=1"}}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		user, pass, ok := r.BasicAuth()
		if !ok || pass != token {
			w.Header().Set("WWW-Authenticate", `Basic realm="git"`)
			http.Error(w, "authentication required", http.StatusUnauthorized)
			return
		}
		r.Header.Set("Remote-User", user)
		backend.Env = append(backend.Env[:2], "REMOTE_USER="+user)
		backend.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv
}

// TestHTTPSCredentialsStayOut: over smart HTTP with a token (by reference),
// the push works, and the token appears in no commit, no log line, no
// remote config and nothing the store keeps.
func TestHTTPSCredentialsStayOut(t *testing.T) {
	bare := bareRemote(t)
	const token = "ghp_SECRETtoken0123456789"
	t.Setenv("TB_GIT_TOKEN", token)
	srv := gitHTTP(t, filepath.Dir(bare), token)
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	st := openStore(t)
	remote := srv.URL + "/infra.git"
	b, err := gitbump.New(gitbump.Options{Config: gitConfig(t, remote, func(g *config.GitFollowup) { g.Token = "env:TB_GIT_TOKEN"; g.Username = "talosbot" }), Store: st, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	lines := b.RunEnded(context.Background(), succeededOp(), engine.RunOutput{Declared: map[string]string{"talos_version": "v1.13.9"}})
	if len(lines) != 1 || !strings.Contains(lines[0], "pushed") {
		t.Fatalf("lines: %q", lines)
	}
	// A wrong token is refused by the server and reported without the token.
	t.Setenv("TB_GIT_TOKEN", "wrong-token-value")
	op := succeededOp()
	op.ID = "op456"
	lines2 := b.RunEnded(context.Background(), op, engine.RunOutput{Declared: map[string]string{"talos_version": "v1.13.9"}})
	if len(lines2) != 1 || !strings.Contains(lines2[0], "not prepared") || !strings.Contains(lines2[0], "authentication") {
		t.Fatalf("wrong token: %q", lines2)
	}
	var everything strings.Builder
	everything.WriteString(strings.Join(append(lines, lines2...), "\n"))
	everything.WriteString(logs.String())
	everything.WriteString(gitCmd(t, bare, "log", "--all", "--format=%an %ae %cn %ce %B"))
	cfg, _ := os.ReadFile(filepath.Join(bare, "config"))
	everything.Write(cfg)
	_ = st.View(context.Background(), func(tx *state.Tx) error {
		return tx.ForEachKV(gitbump.Bucket, func(_ string, v []byte) error { everything.Write(v); return nil })
	})
	recs, _ := st.QueryAudit(context.Background(), state.AuditQuery{})
	raw, _ := json.Marshal(recs)
	everything.Write(raw)
	for _, secret := range []string{token, "wrong-token-value"} {
		if strings.Contains(everything.String(), secret) {
			t.Fatalf("the token %q leaked into lines, logs, commits, remote config, store or audit", secret)
		}
	}
	if !strings.Contains(string(raw), remote) {
		t.Fatalf("audit does not name the remote %s: %s", remote, raw)
	}
}

// forge is a fake of the pull-request endpoint of GitHub
// (POST /repos/{owner}/{repo}/pulls) and Gitea (POST
// /api/v1/repos/{owner}/{repo}/pulls), following their documented
// request and 201 response bodies.
type forge struct {
	mu     sync.Mutex
	auth   []string
	bodies []map[string]any
	paths  []string
}

func (f *forge) handler(prefix, htmlBase string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		raw, _ := io.ReadAll(r.Body)
		var body map[string]any
		if r.Method != http.MethodPost || r.URL.Path != prefix+"/repos/ops/infra/pulls" || json.Unmarshal(raw, &body) != nil {
			w.WriteHeader(http.StatusNotFound)
			_, _ = w.Write([]byte(`{"message":"Not Found"}`))
			return
		}
		f.mu.Lock()
		f.auth, f.bodies, f.paths = append(f.auth, r.Header.Get("Authorization")), append(f.bodies, body), append(f.paths, r.URL.Path)
		f.mu.Unlock()
		for _, k := range []string{"title", "head", "base", "body"} {
			if s, _ := body[k].(string); s == "" {
				w.WriteHeader(http.StatusUnprocessableEntity)
				_, _ = w.Write([]byte(`{"message":"Validation Failed","errors":[{"field":"` + k + `","code":"missing_field"}]}`))
				return
			}
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		_ = json.NewEncoder(w).Encode(map[string]any{"id": 1, "number": 7, "state": "open", "title": body["title"],
			"html_url": htmlBase + "/ops/infra/pull/7", "head": map[string]any{"ref": body["head"]}, "base": map[string]any{"ref": body["base"]}})
	})
}

func TestPullRequestGitHubAndGitea(t *testing.T) {
	for _, c := range []struct{ forge, prefix, auth string }{{"github", "", "Bearer forge-token"}, {"gitea", "/api/v1", "token forge-token"}} {
		t.Run(c.forge, func(t *testing.T) {
			bare := bareRemote(t)
			f := &forge{}
			srv := httptest.NewServer(f.handler(c.prefix, "https://forge.example"))
			t.Cleanup(srv.Close)
			t.Setenv("TB_FORGE_TOKEN", "forge-token")
			b, err := gitbump.New(gitbump.Options{Config: gitConfig(t, "file://"+bare, func(g *config.GitFollowup) {
				g.PullRequest = &config.PullRequest{Forge: c.forge, APIURL: srv.URL + c.prefix, Repository: "ops/infra", Token: "env:TB_FORGE_TOKEN"}
			}), Store: openStore(t)})
			if err != nil {
				t.Fatal(err)
			}
			lines := b.RunEnded(context.Background(), succeededOp(), engine.RunOutput{Declared: map[string]string{"talos_version": "v1.13.9"}})
			if len(lines) != 1 || !strings.Contains(lines[0], "Pull request: https://forge.example/ops/infra/pull/7") {
				t.Fatalf("lines: %q", lines)
			}
			if len(f.bodies) != 1 || f.auth[0] != c.auth || f.bodies[0]["head"] != "talosbot/staging-talos-version-v1.13.9-op123abc" || f.bodies[0]["base"] != "main" {
				t.Fatalf("request: auth %q body %+v", f.auth, f.bodies)
			}
		})
	}
}

// TestRollbackAfterBump: a rollback makes talos_version untrue (R19). An
// unmerged bump is to be closed (nothing pushed); a merged one gets a
// revert branch whose only change sets the line back.
func TestRollbackAfterBump(t *testing.T) {
	bare := bareRemote(t)
	b, err := gitbump.New(gitbump.Options{Config: gitConfig(t, "file://"+bare, nil), Store: openStore(t)})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	up := engine.RunOutput{Declared: map[string]string{"talos_version": "v1.13.9"}}
	rollback := func(id string) []string {
		return b.RunEnded(ctx, &state.Operation{ID: id, Cluster: "staging", Command: "rollback", Text: "/talos rollback worker-1 staging", Requester: "bob",
			State: state.StateSucceeded, Disruptive: true, Attempts: 1}, engine.RunOutput{Invalidated: []string{"talos_version"}})
	}
	// No bump yet: nothing to revert.
	if lines := rollback("rb0"); len(lines) != 0 {
		t.Fatalf("rollback without a bump: %q", lines)
	}
	b.RunEnded(ctx, succeededOp(), up)
	bump := "talosbot/staging-talos-version-v1.13.9-op123abc"
	lines := rollback("rb1")
	if len(lines) != 1 || !strings.Contains(lines[0], "branch "+bump) || !strings.Contains(lines[0], "not merged: close it unmerged") {
		t.Fatalf("unmerged: %q", lines)
	}
	if got := branches(t, bare); len(got) != 2 {
		t.Fatalf("an unmerged bump got a revert branch: %v", got)
	}
	// A second rollback does not revert the same bump again.
	if lines := rollback("rb1b"); len(lines) != 0 {
		t.Fatalf("second rollback: %q", lines)
	}

	op := succeededOp()
	op.ID = "op2"
	b.RunEnded(ctx, op, up)
	merged := "talosbot/staging-talos-version-v1.13.9-op2"
	gitCmd(t, bare, "update-ref", "refs/heads/main", merged)
	lines = rollback("rb2")
	revert := "talosbot/revert-staging-talos-version-v1.12.6-rb2"
	if len(lines) != 1 || !strings.Contains(lines[0], "revert pushed: branch "+revert) || !strings.Contains(lines[0], "reverts branch "+merged) {
		t.Fatalf("merged: %q", lines)
	}
	if d := gitCmd(t, bare, "diff", "-U0", "main", revert); !strings.Contains(d, "-  default = \"v1.13.9\"\n+  default = \"v1.12.6\"\n") ||
		strings.TrimSpace(gitCmd(t, bare, "diff", "--numstat", "main", revert)) != "1\t1\tterraform/variables_talos.tf" {
		t.Fatalf("revert diff:\n%s", d)
	}
	if msg := gitCmd(t, bare, "log", "-1", "--format=%B", revert); !strings.Contains(msg, "This reverts branch "+merged) || !strings.Contains(msg, "R19") {
		t.Fatalf("revert message:\n%s", msg)
	}
}

// TestFollowupsSayWhetherMerged: the evidence the drift report and the plan
// guard print follows the branch: open, merged, or deleted unmerged.
func TestFollowupsSayWhetherMerged(t *testing.T) {
	bare := bareRemote(t)
	b, err := gitbump.New(gitbump.Options{Config: gitConfig(t, "file://"+bare, nil), Store: openStore(t)})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if n := b.GitFollowups(ctx, "staging"); n != nil {
		t.Fatalf("follow-ups before any change: %v", n)
	}
	b.RunEnded(ctx, succeededOp(), engine.RunOutput{Declared: map[string]string{"talos_version": "v1.13.9"}})
	br := "talosbot/staging-talos-version-v1.13.9-op123abc"
	one := func() *lifecyclev1.GitFollowup {
		t.Helper()
		n := b.GitFollowups(ctx, "staging")
		if len(n) != 1 {
			t.Fatalf("follow-ups = %v", n)
		}
		return n[0]
	}
	if f := one(); f.GetBranch() != br || f.GetVariable() != "talos_version" || f.GetValue() != "v1.13.9" || f.GetBase() != "main" ||
		f.GetOperationId() != "op123abc" || f.GetState() != lifecyclev1.GitFollowupState_GIT_FOLLOWUP_STATE_OPEN {
		t.Fatalf("open: %v", f)
	}
	if n := b.GitFollowups(ctx, "production"); n != nil {
		t.Fatalf("another cluster: %v", n)
	}
	gitCmd(t, bare, "branch", "-D", br)
	if f := one(); f.GetState() != lifecyclev1.GitFollowupState_GIT_FOLLOWUP_STATE_DELETED {
		t.Fatalf("deleted: %v", f)
	}
	op := succeededOp()
	op.ID = "op2"
	b.RunEnded(ctx, op, engine.RunOutput{Declared: map[string]string{"talos_version": "v1.13.9"}})
	gitCmd(t, bare, "update-ref", "refs/heads/main", "talosbot/staging-talos-version-v1.13.9-op2")
	if f := one(); f.GetState() != lifecyclev1.GitFollowupState_GIT_FOLLOWUP_STATE_MERGED || f.GetOperationId() != "op2" {
		t.Fatalf("merged: %v", f)
	}
}

// TestFollowupsUnreachableRemoteIsCached: a remote that does not answer
// is asked once a minute, not on every plugin request.
func TestFollowupsUnreachableRemoteIsCached(t *testing.T) {
	bare := bareRemote(t)
	now := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	b, err := gitbump.New(gitbump.Options{Config: gitConfig(t, "file://"+bare, nil), Store: openStore(t), Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	b.RunEnded(ctx, succeededOp(), engine.RunOutput{Declared: map[string]string{"talos_version": "v1.13.9"}})
	moved := bare + ".moved"
	if err := os.Rename(bare, moved); err != nil {
		t.Fatal(err)
	}
	state := func() lifecyclev1.GitFollowupState {
		n := b.GitFollowups(ctx, "staging")
		if len(n) != 1 {
			t.Fatalf("follow-ups = %v", n)
		}
		return n[0].GetState()
	}
	if s := state(); s != lifecyclev1.GitFollowupState_GIT_FOLLOWUP_STATE_UNCHECKED {
		t.Fatalf("unreachable: %v", s)
	}
	if err := os.Rename(moved, bare); err != nil {
		t.Fatal(err)
	}
	if s := state(); s != lifecyclev1.GitFollowupState_GIT_FOLLOWUP_STATE_UNCHECKED {
		t.Fatalf("within the minute the cached answer is used: %v", s)
	}
	now = now.Add(2 * time.Minute)
	if s := state(); s != lifecyclev1.GitFollowupState_GIT_FOLLOWUP_STATE_OPEN {
		t.Fatalf("after the minute: %v", s)
	}
}
