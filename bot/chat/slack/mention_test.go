package slack

import "testing"

// TestCommandStartsAfterTheBotsOwnMention: a mention of someone else before
// the bot's is not where the command starts (it used to be: "<@U0BOB>
// <@U0BOT> health staging" read "<@U0BOT> health staging" as the command).
func TestCommandStartsAfterTheBotsOwnMention(t *testing.T) {
	for text, want := range map[string]string{
		"<@U0BOB> please <@U0BOT> health staging": "health staging",
		"<@U0BOT|talosbot> status":                "status",
		"hey <@U0BOT> health staging":             "health staging",
		"<@U0OTHER> health staging":               "health staging", // the bot mentioned some other way: first mention, as before
	} {
		if got := stripMention(text, "U0BOT"); got != want {
			t.Errorf("stripMention(%q) = %q, want %q", text, got, want)
		}
	}
}
