// Package servetest drives a real `talosbot serve` process through its
// console API, for end-to-end tests: start, SIGKILL, restart, read the
// channel, click buttons. Each console user has their own token (as in
// serve): ConsoleUsers writes the config lines, Bot.Tokens holds the tokens,
// and Post sends each request with the token of the user its body names.
package servetest

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"
)

// Binary returns the binary under test: $TALOSBOT_BIN (make test sets it,
// and $TALOSBOT_PLUGINS_BIN for the built-in plugins, which the process
// inherits) or a fresh Build into a temp dir, where talosbot finds
// talosbot-plugins next to itself.
func Binary(t testing.TB) string {
	t.Helper()
	if p := os.Getenv("TALOSBOT_BIN"); p != "" {
		return p
	}
	dir := t.TempDir()
	if err := Build(dir, false); err != nil {
		t.Fatal(err)
	}
	return filepath.Join(dir, "talosbot")
}

// Build builds talosbot-plugins, then talosbot (and with demo,
// talosbot-demo) into dir as make build does: talosbot records the sha256 of
// that talosbot-plugins, and serve starts no other binary as its built-in
// plugins (a plain go build of talosbot records none and refuses them all).
func Build(dir string, demo bool) error {
	root, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}").Output()
	if err != nil {
		return fmt.Errorf("find the module root: %w", err)
	}
	goBuild := func(args ...string) error {
		cmd := exec.Command("go", append([]string{"build"}, args...)...)
		cmd.Dir = strings.TrimSpace(string(root))
		if b, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("go build %s: %w\n%s", strings.Join(args, " "), err, b)
		}
		return nil
	}
	if err := goBuild("-o", dir+"/", "./cmd/talosbot-plugins"); err != nil {
		return err
	}
	raw, err := os.ReadFile(filepath.Join(dir, "talosbot-plugins"))
	if err != nil {
		return err
	}
	sum := sha256.Sum256(raw)
	ldflags := "-X github.com/talosbot/talosbot/internal/version.PluginsSHA256=" + hex.EncodeToString(sum[:])
	if err := goBuild("-ldflags", ldflags, "-o", dir+"/", "./cmd/talosbot"); err != nil {
		return err
	}
	if demo {
		return goBuild("-tags", "demo", "-ldflags", ldflags, "-o", filepath.Join(dir, "talosbot-demo"), "./cmd/talosbot")
	}
	return nil
}

// FreeAddr returns a free loopback host:port.
func FreeAddr(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// NewTokens returns a fresh random console token for each user.
func NewTokens(t testing.TB, users ...string) map[string]string {
	t.Helper()
	tokens := map[string]string{}
	for _, u := range users {
		var b [16]byte
		if _, err := rand.Read(b[:]); err != nil {
			t.Fatal(err)
		}
		tokens[u] = u + "-console-" + hex.EncodeToString(b[:])
	}
	return tokens
}

// ConsoleUsers returns the chat.web line of a serve config whose console
// users each sign in with their own token (named as $TB_CONSOLE_TOKEN_<USER>,
// which Bot.Start sets from Bot.Tokens), and fresh tokens for them.
func ConsoleUsers(t testing.TB, users ...string) (yaml string, tokens map[string]string) {
	t.Helper()
	var entries []string
	for _, u := range users {
		entries = append(entries, fmt.Sprintf("{name: %s, token: env:%s}", u, TokenEnv(u)))
	}
	return "  web: {enabled: true, users: [" + strings.Join(entries, ", ") + "]}\n", NewTokens(t, users...)
}

// TokenEnv is the environment variable that holds user's console token.
func TokenEnv(user string) string { return "TB_CONSOLE_TOKEN_" + strings.ToUpper(user) }

// Bot is one `talosbot serve --config Config` process whose console listens
// on Addr; each console user has their own token in Tokens.
type Bot struct {
	T      testing.TB
	Bin    string
	Config string
	Addr   string
	// Tokens maps each console user to their token (from ConsoleUsers).
	Tokens map[string]string
	// Env is added to the process environment.
	Env    []string
	Cmd    *exec.Cmd
	Stderr *bytes.Buffer

	reaped bool // the cleanup that stops a bot its test left running is registered
}

// TokenEnv returns the environment that passes Tokens to the process.
func (b *Bot) TokenEnv() []string {
	var env []string
	for u, tok := range b.Tokens {
		env = append(env, TokenEnv(u)+"="+tok)
	}
	return env
}

// Start runs the process and waits until /readyz answers.
func (b *Bot) Start() {
	b.T.Helper()
	b.Cmd = exec.Command(b.Bin, "serve", "--config", b.Config)
	b.Stderr = &bytes.Buffer{}
	b.Cmd.Stderr = b.Stderr
	b.Cmd.Env = append(append(os.Environ(), b.TokenEnv()...), b.Env...)
	if err := b.Cmd.Start(); err != nil {
		b.T.Fatal(err)
	}
	// A test that fails before it stops the bot (t.Fatal anywhere, the readyz
	// wait included) must not leave serve and its plugin processes running
	// after the test binary exits. The cleanup belongs to the test of the
	// first Start: a restart inside a subtest (which sets b.T) must not end
	// the bot with that subtest. It stops whichever process is current then;
	// cleanups run last-registered first, so a test's own stop (which waits,
	// setting ProcessState) runs before it.
	if !b.reaped {
		b.reaped = true
		b.T.Cleanup(func() {
			if b.Cmd != nil && b.Cmd.ProcessState == nil {
				_ = b.Cmd.Process.Kill()
				_ = b.Cmd.Wait()
			}
		})
	}
	b.WaitFor("readyz", func() bool {
		resp, err := http.Get("http://" + b.Addr + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	})
}

// WaitFor polls cond until it holds, failing the test after 20 s with the
// console's messages and the bot's log.
func (b *Bot) WaitFor(what string, cond func() bool) { b.WaitForWithin(what, 20*time.Second, cond) }

// WaitForWithin is WaitFor with its own deadline.
func (b *Bot) WaitForWithin(what string, d time.Duration, cond func() bool) {
	b.T.Helper()
	deadline := time.Now().Add(d)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			var msgs []string
			for _, m := range b.Messages("ops") {
				msgs = append(msgs, m.Title+" | "+m.Text)
			}
			b.T.Fatalf("timed out waiting for %s; console:\n%s\nbot stderr:\n%s", what, strings.Join(msgs, "\n"), b.Stderr)
		}
		<-tick.C
	}
}

// tokenFor returns user's token, or for "" the first user's (by name).
func (b *Bot) tokenFor(user string) string {
	if tok, ok := b.Tokens[user]; ok || user != "" {
		return tok
	}
	names := make([]string, 0, len(b.Tokens))
	for u := range b.Tokens {
		names = append(names, u)
	}
	sort.Strings(names)
	if len(names) == 0 {
		return ""
	}
	return b.Tokens[names[0]]
}

// Post sends a JSON body with the token of the user the body names (its
// "user" key) and returns the status code.
func (b *Bot) Post(path string, body map[string]string) int {
	b.T.Helper()
	code, _ := b.PostAs(b.tokenFor(body["user"]), path, body)
	return code
}

// PostAs sends a JSON body with this bearer token and returns the status
// code and the response body.
func (b *Bot) PostAs(token, path string, body any) (int, string) {
	b.T.Helper()
	raw, _ := json.Marshal(body)
	req, _ := http.NewRequest("POST", "http://"+b.Addr+path, bytes.NewReader(raw))
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		b.T.Fatal(err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(out)
}

// Command types text as user in channel; anything but 202 fails the test.
func (b *Bot) Command(user, channel, text string) {
	b.T.Helper()
	if code := b.Post("/api/console/commands", map[string]string{"user": user, "channel": channel, "text": text}); code != http.StatusAccepted {
		b.T.Fatalf("%s: HTTP %d", text, code)
	}
}

// Message is a console message.
type Message struct {
	ID      string `json:"id"`
	Text    string `json:"text"`
	Title   string `json:"title"`
	Fields  []struct{ Label, Value string }
	Buttons []struct {
		ActionID string `json:"action_id"`
		Label    string `json:"label"`
	} `json:"buttons"`
}

// Field returns the value of the field with this label, or "".
func (m Message) Field(label string) string {
	for _, f := range m.Fields {
		if f.Label == label {
			return f.Value
		}
	}
	return ""
}

// Button returns the action id of the button with this label, or "".
func (m Message) Button(label string) string {
	for _, b := range m.Buttons {
		if b.Label == label {
			return b.ActionID
		}
	}
	return ""
}

// Messages reads the channel (nil while the bot does not answer).
func (b *Bot) Messages(channel string) []Message {
	req, _ := http.NewRequest("GET", "http://"+b.Addr+"/api/console/messages?channel="+channel, nil)
	req.Header.Set("Authorization", "Bearer "+b.tokenFor(""))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil
	}
	defer resp.Body.Close()
	var out struct{ Messages []Message }
	_ = json.NewDecoder(resp.Body).Decode(&out)
	return out.Messages
}

// HasMessage reports whether a message in channel satisfies pred.
func (b *Bot) HasMessage(channel string, pred func(Message) bool) bool {
	for _, m := range b.Messages(channel) {
		if pred(m) {
			return true
		}
	}
	return false
}

// ChildPIDs lists the processes whose parent is pid.
func ChildPIDs(pid int) []int {
	var out []int
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		raw, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid …; comm may contain spaces, so cut at the last ')'.
		s := string(raw)
		fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		if len(fields) > 1 && fields[1] == fmt.Sprint(pid) {
			var child int
			_, _ = fmt.Sscan(e.Name(), &child)
			out = append(out, child)
		}
	}
	return out
}

// Alive reports whether pid runs (a zombie counts as dead).
func Alive(pid int) bool {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	s := string(raw)
	fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	return len(fields) > 0 && fields[0] != "Z"
}

// AwaitEnd waits until operation opID's message in channel shows a final
// state and returns that state (failing the test after within).
func (b *Bot) AwaitEnd(channel, opID string, within time.Duration) string {
	b.T.Helper()
	var st string
	b.WaitForWithin("operation "+opID+" to end", within, func() bool {
		for _, m := range b.Messages(channel) {
			if m.Field("Operation") == opID {
				switch s := m.Field("State"); s {
				case "succeeded", "failed", "refused", "cancelled", "denied", "expired":
					st = s
					return true
				}
			}
		}
		return false
	})
	return st
}

// BuildPlugin compiles the external plugin in the package directory pkg
// (relative to the test's own directory, as `go build` takes it) and returns
// the binary's path and the sha256 that a config's plugins.external entry
// names.
// BuildPluginModule is BuildPlugin for a plugin that is its own Go module
// (examples/hello-plugin): it builds dir's main package inside that module,
// as an external author does.
func BuildPluginModule(t testing.TB, dir string) (path, sum string) {
	t.Helper()
	path = filepath.Join(t.TempDir(), filepath.Base(filepath.Clean(dir))+"-plugin")
	cmd := exec.Command("go", "build", "-o", path, ".")
	cmd.Dir = dir
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build plugin module %s: %v\n%s", dir, err, b)
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	h := sha256.Sum256(raw)
	return path, hex.EncodeToString(h[:])
}

func BuildPlugin(t testing.TB, pkg string) (path, sum string) {
	t.Helper()
	path = filepath.Join(t.TempDir(), filepath.Base(filepath.Clean(pkg))+"-plugin")
	if b, err := exec.Command("go", "build", "-o", path, pkg).CombinedOutput(); err != nil {
		t.Fatalf("build plugin %s: %v\n%s", pkg, err, b)
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	h := sha256.Sum256(raw)
	return path, hex.EncodeToString(h[:])
}
