package config

import (
	"fmt"
	"reflect"
	"slices"
	"strings"
)

// MinTokenLen is the shortest token talosbot accepts for the bearer tokens it
// checks itself: each console user's, the audit API's and the alert
// webhook's. 32 characters is 128 bits as hex; `openssl rand -hex 24` makes
// 48. bot/chat/web enforces the same floor.
const MinTokenLen = 32

// Secrets are the secrets serve reads before it starts: the chat
// platforms' tokens and the bearer tokens of the console, the audit API and
// the alert webhook. The rest (talosconfig, kubeconfig, follow-up and
// backup credentials) are read when an operation needs them.
type Secrets struct {
	ConsoleTokens      map[string]string // console user → their own token (only with chat.web.enabled)
	AuditToken         string
	AlertsToken        string
	SlackBotToken      string
	SlackAppToken      string
	SlackSigningSecret string
	DiscordToken       string
}

// ResolveSecrets reads every start-up secret and checks the bearer tokens:
// each one word (no spaces or control characters) of at least MinTokenLen
// characters, and no two of them equal (a token
// says who is asking, so one shared by two roles or two users cannot). Every
// problem is reported at once, so that a first start with several variables
// missing is fixed in one go, not one restart per variable. Messages name
// references and paths, never a value.
func (c *Config) ResolveSecrets() (*Secrets, []FieldError) {
	s := &Secrets{}
	var errs []FieldError
	resolve := func(path string, r Ref) string {
		if r.Empty() || r.Check() != "" {
			return "" // a missing or malformed reference is Validate's error
		}
		b, err := r.Resolve()
		if err != nil {
			errs = append(errs, FieldError{Path: path, Msg: err.Error() + "; set it, or change the reference"})
			return ""
		}
		if len(b) == 0 {
			// An empty env value is already an error of Resolve; an empty
			// file is not, and would leave serve's adapter without a token.
			errs = append(errs, FieldError{Path: path, Msg: fmt.Sprintf("secret %s is empty; write the secret into it", r)})
		}
		return string(b)
	}
	if sl := c.Chat.Slack; sl != nil {
		s.SlackBotToken = resolve("chat.slack.bot_token", sl.BotToken)
		s.SlackAppToken = resolve("chat.slack.app_token", sl.AppToken)
		s.SlackSigningSecret = resolve("chat.slack.signing_secret", sl.SigningSecret)
	}
	if d := c.Chat.Discord; d != nil {
		s.DiscordToken = resolve("chat.discord.token", d.Token)
	}
	// Bearer tokens, in the order their clashes are reported.
	type bearer struct{ path, who, tok string }
	var bearers []bearer
	s.AuditToken = resolve("audit.token", c.Audit.Token)
	bearers = append(bearers, bearer{"audit.token", "the audit API", s.AuditToken})
	s.AlertsToken = resolve("alerts.token", c.Alerts.Token)
	bearers = append(bearers, bearer{"alerts.token", "the alert webhook", s.AlertsToken})
	if w := c.Chat.Web; w != nil && w.Enabled {
		s.ConsoleTokens = map[string]string{}
		for i, u := range w.Users {
			p := fmt.Sprintf("chat.web.users[%d].token", i)
			tok := resolve(p, u.Token)
			s.ConsoleTokens[u.Name] = tok
			bearers = append(bearers, bearer{p, "console user " + u.Name, tok})
		}
	}
	holder := map[string]bearer{}
	for _, b := range bearers {
		if b.tok == "" {
			continue
		}
		switch {
		case strings.IndexFunc(b.tok, func(r rune) bool { return r <= ' ' || r == 0x7f }) >= 0:
			// Spaces would pad a short token past the floor, and an HTTP
			// header drops them at its ends, so a token ending in one (or
			// a newline) could never be sent.
			errs = append(errs, FieldError{Path: b.path, Msg: fmt.Sprintf("the token of %s contains spaces or control characters (a newline?); a bearer token is one word: generate one with `openssl rand -hex 24`", b.who)})
		case len(b.tok) < MinTokenLen:
			errs = append(errs, FieldError{Path: b.path, Msg: fmt.Sprintf("the token of %s is shorter than %d characters; generate one with `openssl rand -hex 24`", b.who, MinTokenLen)})
		}
		if first, ok := holder[b.tok]; ok {
			errs = append(errs, FieldError{Path: b.path, Msg: fmt.Sprintf("the token of %s has the same value as %s (%s), so it cannot say who is asking; give each its own token (`openssl rand -hex 24`)", b.who, first.path, first.who)})
			continue
		}
		holder[b.tok] = b
	}
	c.Locate(errs)
	return s, errs
}

// chatSecretEnv are the variables the documentation and deploy/ examples
// put chat secrets in; plugins never get them, even when no reference in
// this file names them (another talosbot on the host may use them).
var chatSecretEnv = []string{
	"SLACK_BOT_TOKEN", "SLACK_APP_TOKEN", "SLACK_SIGNING_SECRET",
	"DISCORD_TOKEN", "DISCORD_BOT_TOKEN",
	"TALOSBOT_AUDIT_TOKEN", "TALOSBOT_ALERTS_TOKEN", "TALOSBOT_ALERTMANAGER_TOKEN",
}

// validatePassEnv refuses a plugins.pass_env entry that names a variable
// holding one of the bot's secrets: the plugin host would hand it to every
// plugin process, and chat and console tokens must stay in the bot.
func (c *Config) validatePassEnv() []FieldError {
	if len(c.Plugins.PassEnv) == 0 {
		return nil
	}
	held := map[string]string{} // variable → the key whose secret it holds
	envRefs(reflect.ValueOf(c).Elem(), "", held)
	var errs []FieldError
	for i, name := range c.Plugins.PassEnv {
		p := fmt.Sprintf("plugins.pass_env[%d]", i)
		switch {
		case name == "" || strings.ContainsAny(name, "= \t\n"):
			errs = append(errs, FieldError{Path: p, Msg: fmt.Sprintf("%q is not an environment variable name", name)})
		case held[name] != "":
			errs = append(errs, FieldError{Path: p, Msg: fmt.Sprintf("%s holds %s, a secret of the bot; plugins must never receive it: remove it from pass_env", name, held[name])})
		case slices.Contains(chatSecretEnv, name):
			errs = append(errs, FieldError{Path: p, Msg: fmt.Sprintf("%s is where chat and API tokens are kept; plugins must never receive them: remove it from pass_env", name)})
		}
	}
	return errs
}

var refType = reflect.TypeOf(Ref(""))

// envRefs records, for every env: reference in v (whatever field holds it,
// so a secret added later is covered too), the variable and the path of
// the key.
func envRefs(v reflect.Value, path string, out map[string]string) {
	if v.Type() == refType {
		if name, ok := strings.CutPrefix(v.String(), "env:"); ok && out[name] == "" {
			out[name] = path
		}
		return
	}
	switch v.Kind() {
	case reflect.Pointer:
		if !v.IsNil() {
			envRefs(v.Elem(), path, out)
		}
	case reflect.Struct:
		t := v.Type()
		for i := range t.NumField() {
			f := t.Field(i)
			if !f.IsExported() {
				continue
			}
			name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
			if name == "" || name == "-" {
				name = strings.ToLower(f.Name)
			}
			envRefs(v.Field(i), joinPath(path, name), out)
		}
	case reflect.Slice:
		for i := range v.Len() {
			envRefs(v.Index(i), fmt.Sprintf("%s[%d]", path, i), out)
		}
	case reflect.Map:
		for _, k := range v.MapKeys() {
			if k.Kind() == reflect.String {
				envRefs(v.MapIndex(k), joinPath(path, k.String()), out)
			}
		}
	}
}
