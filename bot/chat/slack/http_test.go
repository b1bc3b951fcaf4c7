package slack_test

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/talosbot/talosbot/bot/chat"
	"github.com/talosbot/talosbot/bot/chat/slack"
	"github.com/talosbot/talosbot/bot/chat/slack/slackfake"
)

// Slack's documented request-signing example
// (https://api.slack.com/authentication/verifying-requests-from-slack).
const (
	docSecret = "8f742231b10e8888abcd99yyyzzz85a5"
	docTS     = "1531420618"
	docBody   = "token=xyzz0WbapA4vBCDEFasx0q6G&team_id=T1DC2JH3J&team_domain=testteamnow&channel_id=G8PSS9T3V&channel_name=foobar&user_id=U2CERLKJA&user_name=roadrunner&command=%2Fwebhook-collect&text=&response_url=https%3A%2F%2Fhooks.slack.com%2Fcommands%2FT1DC2JH3J%2F397700885554%2F96rGlfmibIGlgcZRskXaIFfN&trigger_id=398738663015.47445629121.803a0bc887a14d10d2c447fce8b6703c"
	docSig    = "v0=a2114d57b48eac39b9ad189dd8316235a7b4a8d21a10bd27519666489c69b503"
)

func docTime(after time.Duration) func() time.Time {
	ts, _ := strconv.ParseInt(docTS, 10, 64)
	return func() time.Time { return time.Unix(ts, 0).Add(after) }
}

// httpAdapter is an HTTP-mode adapter that has learnt its own user id
// (U0BOT) from auth.test, as the bot does at start.
func httpAdapter(t *testing.T, secret string, clock func() time.Time, h chat.Handler) *slack.Adapter {
	t.Helper()
	fake, err := slackfake.Start(slackfake.Options{BotToken: botToken, BotUserID: "U0BOT"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(fake.Close)
	a, err := slack.New(slack.Options{Mode: slack.ModeHTTP, BotToken: botToken, SigningSecret: secret, Clock: clock, Handler: h, APIURL: fake.APIURL()})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Identify(context.Background()); err != nil {
		t.Fatal(err)
	}
	return a
}

func do(h http.Handler, path, ts, sig, body string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(http.MethodPost, path, strings.NewReader(body))
	r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	if ts != "" {
		r.Header.Set("X-Slack-Request-Timestamp", ts)
	}
	if sig != "" {
		r.Header.Set("X-Slack-Signature", sig)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

func sign(secret, ts, body string) string {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte("v0:" + ts + ":" + body))
	return "v0=" + hex.EncodeToString(m.Sum(nil))
}

func TestVerifySignatureDocumentedExample(t *testing.T) {
	hdr := http.Header{}
	hdr.Set("X-Slack-Request-Timestamp", docTS)
	hdr.Set("X-Slack-Signature", docSig)
	if err := slack.VerifySignature(docSecret, hdr, []byte(docBody), docTime(time.Minute)()); err != nil {
		t.Fatalf("documented example refused: %v", err)
	}
	if err := slack.VerifySignature(docSecret, hdr, []byte(docBody), docTime(-4*time.Minute)()); err != nil {
		t.Fatalf("a request slightly in the future (clock skew) must pass: %v", err)
	}
}

func TestHTTPModeRefusesBadSignaturesAndRunsNothing(t *testing.T) {
	h := newStub()
	tampered := strings.Replace(docBody, "text=", "text=upgrade+production", 1)
	cases := []struct {
		name          string
		secret        string
		clock         func() time.Time
		ts, sig, body string
	}{
		{"tampered body", docSecret, docTime(time.Minute), docTS, docSig, tampered},
		{"wrong secret", "0000000000000000000000000000000", docTime(time.Minute), docTS, docSig, docBody},
		{"timestamp 6 minutes old", docSecret, docTime(6 * time.Minute), docTS, docSig, docBody},
		{"no signature", docSecret, docTime(0), docTS, "", docBody},
		{"no timestamp", docSecret, docTime(0), "", docSig, docBody},
		{"garbage timestamp", docSecret, docTime(0), "yesterday", docSig, docBody},
		{"truncated signature", docSecret, docTime(0), docTS, docSig[:20], docBody},
	}
	var adapters []*slack.Adapter
	for _, c := range cases {
		a := httpAdapter(t, c.secret, c.clock, h)
		adapters = append(adapters, a)
		for _, path := range []string{"/slack/commands", "/slack/events", "/slack/interactivity"} {
			w := do(a.HTTPHandler(), path, c.ts, c.sig, c.body)
			if w.Code != http.StatusUnauthorized {
				t.Errorf("%s %s: status %d, want 401", c.name, path, w.Code)
			}
		}
	}
	for _, a := range adapters {
		a.Wait()
	}
	if cmds, acts, _ := h.snapshot(); len(cmds)+len(acts) != 0 {
		t.Fatalf("refused requests ran the handler: %+v %+v", cmds, acts)
	}

	// The documented request itself is accepted and becomes a command.
	a := httpAdapter(t, docSecret, docTime(time.Minute), h)
	w := do(a.HTTPHandler(), "/slack/commands", docTS, docSig, docBody)
	if w.Code != http.StatusOK || w.Body.Len() != 0 {
		t.Fatalf("documented example: %d %s", w.Code, w.Body)
	}
	a.Wait()
	cmds, _, _ := h.snapshot()
	if want := (chat.Command{User: "U2CERLKJA", Channel: "slack:G8PSS9T3V", Text: ""}); len(cmds) != 1 || cmds[0] != want {
		t.Fatalf("commands %+v, want %+v", cmds, want)
	}
}

func TestHTTPModeEventsAndInteractivity(t *testing.T) {
	h := newStub()
	now := time.Unix(1700000000, 0)
	a := httpAdapter(t, "s3cret", func() time.Time { return now }, h)
	srv := a.HTTPHandler()
	ts := strconv.FormatInt(now.Unix(), 10)
	post := func(path, body string) *httptest.ResponseRecorder {
		return do(srv, path, ts, sign("s3cret", ts, body), body)
	}

	w := post("/slack/events", `{"token":"x","challenge":"3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P","type":"url_verification"}`)
	if w.Code != 200 || !strings.Contains(w.Body.String(), `"challenge":"3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P"`) {
		t.Fatalf("url_verification: %d %s", w.Code, w.Body)
	}
	mention := `{"type":"event_callback","event_id":"Ev9","event":{"type":"app_mention","user":"U1","text":"<@U0BOT> health staging","channel":"C9"}}`
	if w := post("/slack/events", mention); w.Code != 200 {
		t.Fatalf("event: %d %s", w.Code, w.Body)
	}
	// Slack retries with the same event_id, signed afresh: 200, not run twice.
	retryTS := strconv.FormatInt(now.Unix()+1, 10)
	retry := httptest.NewRequest(http.MethodPost, "/slack/events", strings.NewReader(mention))
	retry.Header.Set("X-Slack-Request-Timestamp", retryTS)
	retry.Header.Set("X-Slack-Signature", sign("s3cret", retryTS, mention))
	retry.Header.Set("X-Slack-Retry-Num", "1")
	retry.Header.Set("X-Slack-Retry-Reason", "http_timeout")
	rw := httptest.NewRecorder()
	srv.ServeHTTP(rw, retry)
	if rw.Code != 200 {
		t.Fatalf("event retry: %d %s", rw.Code, rw.Body)
	}
	payload := `{"type":"block_actions","user":{"id":"U2"},"channel":{"id":"C9"},"container":{"message_ts":"1.2"},"actions":[{"action_id":"tok-x","block_id":"b","value":"tok-x","type":"button"}]}`
	if w := post("/slack/interactivity", "payload="+url.QueryEscape(payload)); w.Code != 200 {
		t.Fatalf("interactivity: %d %s", w.Code, w.Body)
	}
	for path, body := range map[string]string{
		"/slack/events":        `{"type":`,
		"/slack/interactivity": "payload=%7Bnope",
		"/slack/commands":      "text=status", // no user or channel
	} {
		if w := post(path, body); w.Code != http.StatusBadRequest || !strings.Contains(w.Body.String(), `"error"`) {
			t.Errorf("malformed %s: %d %s", path, w.Code, w.Body)
		}
	}
	if w := post("/slack/interactivity", "payload="+url.QueryEscape(`{"type":"block_actions","channel":{"id":"C9"},"actions":[{"action_id":"a","block_id":"b"}]}`)); w.Code != 400 || !strings.Contains(w.Body.String(), "user") {
		t.Errorf("click without user: %d %s", w.Code, w.Body)
	}
	a.Wait()
	cmds, acts, _ := h.snapshot()
	if len(cmds) != 1 || cmds[0] != (chat.Command{User: "U1", Channel: "slack:C9", Text: "health staging"}) {
		t.Fatalf("commands %+v", cmds)
	}
	if len(acts) != 1 || acts[0] != (chat.Action{User: "U2", Channel: "slack:C9", MessageRef: "1.2", ActionID: "tok-x"}) {
		t.Fatalf("actions %+v", acts)
	}
	_ = context.Background
}

// TestHTTPModeReplayRefusedRetryAnsweredOnce: a captured signed request sent
// again inside the timestamp window is a replay: 401, handed to the bot as a
// refusal once (with the signed user and channel), and nothing runs again.
// A Slack retry of a slash command (same trigger_id, new signature, with
// X-Slack-Retry-Num) gets 200 and does not run twice. The replay state is the
// one passed in (the bot's store): a new adapter on it (a restart) still
// refuses.
func TestHTTPModeReplayRefusedRetryAnsweredOnce(t *testing.T) {
	h := newStub()
	now := time.Unix(1700000000, 0)
	replays := &chat.MemoryReplays{}
	newAdapter := func() *slack.Adapter {
		a, err := slack.New(slack.Options{Mode: slack.ModeHTTP, BotToken: botToken, SigningSecret: "s3cret", Handler: h,
			Clock: func() time.Time { return now }, Replays: replays})
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	a := newAdapter()
	send := func(a *slack.Adapter, ts int64, body string, retry string) *httptest.ResponseRecorder {
		tsText := strconv.FormatInt(ts, 10)
		r := httptest.NewRequest(http.MethodPost, "/slack/commands", strings.NewReader(body))
		r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		r.Header.Set("X-Slack-Request-Timestamp", tsText)
		r.Header.Set("X-Slack-Signature", sign("s3cret", tsText, body))
		if retry != "" {
			r.Header.Set("X-Slack-Retry-Num", retry)
		}
		w := httptest.NewRecorder()
		a.HTTPHandler().ServeHTTP(w, r)
		a.Wait()
		return w
	}
	unfreeze := "command=%2Ftalos&text=unfreeze+production&user_id=U1&channel_id=C9&trigger_id=111.222.abc"
	if w := send(a, now.Unix()-60, unfreeze, ""); w.Code != 200 {
		t.Fatalf("first delivery: %d %s", w.Code, w.Body)
	}
	for i := range 2 {
		if w := send(a, now.Unix()-60, unfreeze, ""); w.Code != http.StatusUnauthorized || !strings.Contains(w.Body.String(), "replay") {
			t.Fatalf("replay %d: %d %s", i, w.Code, w.Body)
		}
	}
	// The retry header is not signed: adding it to a replay changes nothing.
	if w := send(newAdapter(), now.Unix()-60, unfreeze, "1"); w.Code != http.StatusUnauthorized {
		t.Fatalf("replay after a restart, with a retry header: %d %s", w.Code, w.Body)
	}
	// A real retry is signed afresh: acknowledged, not run again.
	if w := send(a, now.Unix(), unfreeze, "1"); w.Code != 200 {
		t.Fatalf("retry: %d %s", w.Code, w.Body)
	}
	// Outside the 5-minute window the signature check itself refuses.
	if w := send(a, now.Unix()-6*60, strings.Replace(unfreeze, "111.222", "333.444", 1), ""); w.Code != http.StatusUnauthorized {
		t.Fatalf("stale: %d %s", w.Code, w.Body)
	}
	cmds, _, _ := h.snapshot()
	if len(cmds) != 1 || cmds[0].Text != "unfreeze production" {
		t.Fatalf("ran %+v, want the first delivery only", cmds)
	}
	rs := h.refused()
	if len(rs) != 1 || rs[0].What != "replay" || rs[0].User != "U1" || rs[0].Channel != "slack:C9" {
		t.Fatalf("refusals %+v, want one, U1's in slack:C9", rs)
	}
}

// TestHTTPModeKnowsItsOwnMentions: in HTTP mode the adapter learns its own
// user id from auth.test (Identify, which the bot runs at start), and an
// app_mention by the bot itself is acknowledged and never a command. Until
// Identify has run, events are refused (503) rather than guessed at; a bad
// token fails Identify with what to fix.
func TestHTTPModeKnowsItsOwnMentions(t *testing.T) {
	fake, err := slackfake.Start(slackfake.Options{BotToken: botToken, BotUserID: "U0SELF"})
	if err != nil {
		t.Fatal(err)
	}
	defer fake.Close()
	h := newStub()
	now := time.Unix(1700000000, 0)
	a, err := slack.New(slack.Options{Mode: slack.ModeHTTP, BotToken: botToken, SigningSecret: "s3cret", Handler: h,
		Clock: func() time.Time { return now }, APIURL: fake.APIURL()})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	post := func(user string) *httptest.ResponseRecorder {
		n++
		ts := strconv.FormatInt(now.Unix(), 10)
		body := fmt.Sprintf(`{"type":"event_callback","event_id":"Ev%d","event":{"type":"app_mention","user":"%s","text":"<@U0SELF> freeze production","channel":"C9"}}`, n, user)
		w := do(a.HTTPHandler(), "/slack/events", ts, sign("s3cret", ts, body), body)
		a.Wait()
		return w
	}
	if w := post("U0SELF"); w.Code != http.StatusServiceUnavailable || !strings.Contains(w.Body.String(), "own Slack user id") {
		t.Fatalf("event before Identify: %d %s, want 503", w.Code, w.Body)
	}
	if err := a.Identify(context.Background()); err != nil {
		t.Fatal(err)
	}
	if w := post("U0SELF"); w.Code != 200 {
		t.Fatalf("the bot's own mention: %d %s, want 200 (acknowledged, ignored)", w.Code, w.Body)
	}
	if cmds, _, _ := h.snapshot(); len(cmds) != 0 {
		t.Fatalf("the bot's own mention became commands: %+v", cmds)
	}
	if w := post("U1"); w.Code != 200 {
		t.Fatalf("a person's mention: %d %s", w.Code, w.Body)
	}
	if cmds, _, _ := h.snapshot(); len(cmds) != 1 || cmds[0].User != "U1" {
		t.Fatalf("commands %+v, want U1's", cmds)
	}

	bad, err := slack.New(slack.Options{Mode: slack.ModeHTTP, BotToken: "xoxb-revoked", SigningSecret: "s3cret", APIURL: fake.APIURL()})
	if err != nil {
		t.Fatal(err)
	}
	if err := bad.Identify(context.Background()); err == nil || !strings.Contains(err.Error(), "auth.test") || !strings.Contains(err.Error(), "check chat.slack.bot_token") {
		t.Fatalf("Identify with a bad token: %v", err)
	}
}
