package slack

import (
	"net/url"
	"strings"
	"testing"
	"time"
)

// The fuzz targets assert the decoders never panic and that what they accept
// is well-formed: a Command or Action always has a user and a slack: channel.

func checkChannel(t *testing.T, ch string) {
	if !strings.HasPrefix(ch, "slack:") || len(ch) == len("slack:") {
		t.Fatalf("decoded channel %q is not a qualified slack channel", ch)
	}
}

func FuzzDecodeEvent(f *testing.F) {
	f.Add([]byte(`{"type":"url_verification","challenge":"abc"}`))
	f.Add([]byte(`{"type":"event_callback","event_id":"Ev1","event":{"type":"app_mention","user":"U1","text":"<@U0> health staging","channel":"C1"}}`))
	f.Add([]byte(`{"type":"event_callback","event":{"type":"app_mention","user":"U1","text":"<@U0","channel":""}}`))
	f.Add([]byte(`{"type":"event_callback","event":[]}`))
	f.Add([]byte(`null`))
	f.Fuzz(func(t *testing.T, b []byte) {
		d, err := decodeEvent(b, "U0")
		if err != nil {
			return
		}
		if d.Command != nil {
			if d.Command.User == "" || d.Command.User == "U0" {
				t.Fatalf("command from %q", d.Command.User)
			}
			checkChannel(t, d.Command.Channel)
		}
	})
}

func FuzzDecodeInteraction(f *testing.F) {
	f.Add([]byte(`{"type":"block_actions","user":{"id":"U2"},"channel":{"id":"C9"},"container":{"message_ts":"1.2"},"actions":[{"action_id":"tok","block_id":"b","value":"tok"}]}`))
	f.Add([]byte(`{"type":"block_actions","user":{"id":"U2"},"container":{"channel_id":"C9"},"actions":[{"value":"tok","block_id":"b"}]}`))
	f.Add([]byte(`{"type":"block_actions","actions":[null,{"block_id":1}]}`))
	f.Add([]byte(`{"type":"view_submission"}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		acts, err := decodeInteractionJSON(b)
		if err != nil {
			return
		}
		for _, a := range acts {
			if a.User == "" || a.ActionID == "" {
				t.Fatalf("action %+v", a)
			}
			checkChannel(t, a.Channel)
		}
		// The same payload through the HTTP form path decodes identically.
		acts2, err := decodeInteractionForm([]byte("payload=" + url.QueryEscape(string(b))))
		if err != nil || len(acts2) != len(acts) {
			t.Fatalf("form path differs: %v %d/%d", err, len(acts2), len(acts))
		}
	})
}

func FuzzDecodeSlashCommand(f *testing.F) {
	f.Add("user_id=U1&channel_id=C1&text=health+staging&command=%2Ftalos")
	f.Add("user_id=&channel_id=C1")
	f.Add("%zz")
	f.Add(`{"user_id":"U1","channel_id":"C1","text":"x"}`)
	f.Fuzz(func(t *testing.T, s string) {
		if c, err := decodeSlashForm([]byte(s)); err == nil {
			if c.User == "" {
				t.Fatal("command without user")
			}
			checkChannel(t, c.Channel)
		}
		if c, err := decodeSlashJSON([]byte(s)); err == nil {
			if c.User == "" {
				t.Fatal("command without user")
			}
			checkChannel(t, c.Channel)
		}
	})
}

func TestDedupeBoundedAndExpiring(t *testing.T) {
	now := time.Unix(0, 0)
	d := newDedupe(3, time.Minute, func() time.Time { return now })
	for _, k := range []string{"a", "b", "c"} {
		if !d.firstTime(k) {
			t.Fatalf("%s seen before", k)
		}
	}
	if d.firstTime("a") {
		t.Fatal("a is a duplicate")
	}
	d.firstTime("d") // evicts b, the least recently seen
	if d.len() != 3 {
		t.Fatalf("len %d", d.len())
	}
	if !d.firstTime("b") {
		t.Fatal("b should have been evicted")
	}
	now = now.Add(2 * time.Minute)
	if !d.firstTime("a") {
		t.Fatal("a should have expired")
	}
	if !d.firstTime("") {
		t.Fatal("empty keys are never duplicates")
	}
	if !d.firstTime("") {
		t.Fatal("empty keys are never duplicates")
	}
}
