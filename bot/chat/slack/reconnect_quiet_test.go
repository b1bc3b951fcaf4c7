package slack_test

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/talosbot/talosbot/bot/chat/slack"
	"github.com/talosbot/talosbot/bot/chat/slack/slackfake"
)

// syncBuffer is a log sink the adapter's goroutines write while the test reads.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestSlackAskedReconnectIsNoConnectionLoss: Slack regularly asks a Socket
// Mode client to reconnect (a "disconnect" envelope). That is routine: the
// adapter reconnects at once and says nothing about a lost connection, so
// operators are not paged by a warning that means nothing.
func TestSlackAskedReconnectIsNoConnectionLoss(t *testing.T) {
	fake, err := slackfake.Start(slackfake.Options{BotToken: botToken, AppToken: appToken})
	if err != nil {
		t.Fatal(err)
	}
	defer fake.Close()
	var logs syncBuffer
	a, err := slack.New(slack.Options{BotToken: botToken, AppToken: appToken, APIURL: fake.APIURL(),
		Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	runCtx, stop := context.WithCancel(ctx)
	errc := make(chan error, 1)
	go func() { errc <- a.Run(runCtx) }()
	if err := fake.WaitConnected(ctx, 1); err != nil {
		t.Fatal(err)
	}
	if err := fake.Disconnect(); err != nil {
		t.Fatal(err)
	}
	if err := fake.WaitConnected(ctx, 2); err != nil {
		t.Fatal(err)
	}
	stop()
	if err := <-errc; err != nil {
		t.Fatalf("Run: %v", err)
	}
	if strings.Contains(logs.String(), "connection lost") {
		t.Errorf("a Slack-asked reconnect was logged as a lost connection:\n%s", logs.String())
	}
}
