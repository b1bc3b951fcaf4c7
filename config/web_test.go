package config

import (
	"strings"
	"testing"
)

func TestWebConsoleUsers(t *testing.T) {
	msgs := func(w *Web) string {
		var out []string
		for _, e := range w.validate() {
			out = append(out, e.String())
		}
		return strings.Join(out, "\n")
	}
	ok := &Web{Enabled: true, Users: []WebUser{{Name: "alice", Token: "env:ALICE_TOK"}, {Name: "bob", Token: "file:/etc/talosbot/bob"}}}
	if m := msgs(ok); m != "" {
		t.Fatalf("valid users refused: %s", m)
	}
	for name, c := range map[string]struct {
		w    *Web
		want string
	}{
		"shared token":       {&Web{Enabled: true, Token: "env:TB_CONSOLE"}, "chat.web.token: a console token shared by everyone"},
		"shared, disabled":   {&Web{Token: "env:TB_CONSOLE"}, "chat.web.token: a console token shared by everyone"},
		"no users":           {&Web{Enabled: true}, "chat.web.users: the console is enabled but has no users"},
		"no name":            {&Web{Enabled: true, Users: []WebUser{{Token: "env:A"}}}, "chat.web.users[0].name: is required"},
		"name with space":    {&Web{Enabled: true, Users: []WebUser{{Name: "a b", Token: "env:A"}}}, `chat.web.users[0].name: "a b" must not contain`},
		"twice":              {&Web{Enabled: true, Users: []WebUser{{Name: "a", Token: "env:A"}, {Name: "a", Token: "env:B"}}}, `chat.web.users[1].name: "a" is listed twice`},
		"no token":           {&Web{Enabled: true, Users: []WebUser{{Name: "a"}}}, "chat.web.users[0].token: is required"},
		"same reference":     {&Web{Enabled: true, Users: []WebUser{{Name: "a", Token: "env:A"}, {Name: "b", Token: "env:A"}}}, "chat.web.users[1].token: is the same reference as a's"},
		"inline secret":      {&Web{Enabled: true, Users: []WebUser{{Name: "a", Token: "hunter2-console"}}}, "chat.web.users[0].token: secrets are given by reference only"},
		"users, disabled ok": {&Web{Users: []WebUser{{Name: "a"}}}, "chat.web.users[0].token: is required"},
	} {
		m := msgs(c.w)
		if !strings.Contains(m, c.want) {
			t.Errorf("%s: got %q, want %q", name, m, c.want)
		}
		if strings.Contains(m, "hunter2") {
			t.Errorf("%s: inline secret echoed: %s", name, m)
		}
	}
}

func TestWebConsoleSharedTokenRefusedByParse(t *testing.T) {
	_, err := Parse([]byte(strings.Replace(badConfig, "releases:", "chat:\n  web: {enabled: true, token: env:TB_CONSOLE}\nreleases:", 1)))
	if err == nil || !strings.Contains(err.Error(), "chat.web.token: a console token shared by everyone") || !strings.Contains(err.Error(), "chat.web.users") {
		t.Fatalf("want the shared token refused with the fix, got %v", err)
	}
}
