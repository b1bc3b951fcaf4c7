package slack_test

import (
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/talosbot/talosbot/bot/chat"
	"github.com/talosbot/talosbot/bot/chat/slack"
)

// Slack's window is five minutes either way: a timestamp exactly five
// minutes old or ahead passes, one a second further is refused, and a
// request from the future is refused like a stale one (a skewed or forged
// clock). (Issue 34: the future side survived mutation.)
func TestVerifySignatureWindowIsFiveMinutesEitherWay(t *testing.T) {
	hdr := http.Header{}
	hdr.Set("X-Slack-Request-Timestamp", docTS)
	hdr.Set("X-Slack-Signature", docSig)
	for _, c := range []struct {
		name  string
		after time.Duration // how long after the timestamp "now" is
		ok    bool
	}{
		{"exactly five minutes old", chat.ReplayWindow, true},
		{"five minutes and a second old", chat.ReplayWindow + time.Second, false},
		{"exactly five minutes ahead", -chat.ReplayWindow, true},
		{"five minutes and a second ahead", -chat.ReplayWindow - time.Second, false},
		{"an hour ahead", -time.Hour, false},
	} {
		err := slack.VerifySignature(docSecret, hdr, []byte(docBody), docTime(c.after)())
		if (err == nil) != c.ok {
			t.Errorf("%s: err %v, want ok=%t", c.name, err, c.ok)
		}
	}
}

// A request stamped ahead of the bot's clock stays inside the window for up
// to twice the window after it first arrives, so its id must be remembered
// that long: a replay eight minutes later (its timestamp then four minutes
// old, still valid) is refused and runs nothing.
func TestHTTPModeRemembersRequestsForTwiceTheWindow(t *testing.T) {
	h := newStub()
	var mu sync.Mutex
	now := time.Unix(1700000000, 0)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	a, err := slack.New(slack.Options{Mode: slack.ModeHTTP, BotToken: botToken, SigningSecret: "s3cret", Handler: h,
		Clock: clock, Replays: &chat.MemoryReplays{}})
	if err != nil {
		t.Fatal(err)
	}
	body := "command=%2Ftalos&text=unfreeze+production&user_id=U1&channel_id=C9"
	ts := strconv.FormatInt(now.Add(4*time.Minute).Unix(), 10) // four minutes ahead
	send := func() *httptest.ResponseRecorder {
		r := httptest.NewRequest(http.MethodPost, "/slack/commands", strings.NewReader(body))
		r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		r.Header.Set("X-Slack-Request-Timestamp", ts)
		r.Header.Set("X-Slack-Signature", sign("s3cret", ts, body))
		w := httptest.NewRecorder()
		a.HTTPHandler().ServeHTTP(w, r)
		a.Wait()
		return w
	}
	if w := send(); w.Code != http.StatusOK {
		t.Fatalf("first delivery: %d %s", w.Code, w.Body)
	}
	mu.Lock()
	now = now.Add(8 * time.Minute)
	mu.Unlock()
	if w := send(); w.Code != http.StatusUnauthorized || !strings.Contains(w.Body.String(), "replay") {
		t.Fatalf("replay 8 minutes later, timestamp still in the window: %d %s, want 401 replay", w.Code, w.Body)
	}
	if cmds, _, _ := h.snapshot(); len(cmds) != 1 {
		t.Fatalf("ran %d commands, want the first delivery only", len(cmds))
	}
}
