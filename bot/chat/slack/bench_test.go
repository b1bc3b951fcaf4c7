package slack_test

import (
	"context"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/talosbot/talosbot/bot/chat"
	"github.com/talosbot/talosbot/bot/chat/slack"
	"github.com/talosbot/talosbot/bot/chat/slack/slackfake"
)

type countHandler struct{ wg *sync.WaitGroup }

func (c countHandler) HandleCommand(context.Context, chat.Command) error { c.wg.Done(); return nil }
func (c countHandler) HandleAction(context.Context, chat.Action) error   { return nil }
func (c countHandler) HandleRefusal(context.Context, chat.Refusal) error { return nil }

// BenchmarkSocketModeAck200 sends 200 concurrent slash commands through the
// fake Socket Mode server per iteration and reports the ack latency (time
// from the envelope leaving the fake to its ack arriving). Goal: p99 < 10 ms.
func BenchmarkSocketModeAck200(b *testing.B) {
	const n = 200
	fake, err := slackfake.Start(slackfake.Options{BotToken: botToken, AppToken: appToken})
	if err != nil {
		b.Fatal(err)
	}
	defer fake.Close()
	var handled sync.WaitGroup
	a, err := slack.New(slack.Options{BotToken: botToken, AppToken: appToken, APIURL: fake.APIURL(), Handler: countHandler{&handled}})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = a.Run(ctx) }()
	wctx, wcancel := context.WithTimeout(ctx, 10*time.Second)
	defer wcancel()
	if err := fake.WaitConnected(wctx, 1); err != nil {
		b.Fatal(err)
	}
	var lat []time.Duration
	b.ResetTimer()
	for range b.N {
		handled.Add(n)
		ids := make([]string, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				id, err := fake.SlashCommand("U1", "C1", "health staging")
				if err != nil {
					b.Error(err)
				}
				ids[i] = id
			})
		}
		wg.Wait()
		ictx, icancel := context.WithTimeout(ctx, 30*time.Second)
		for _, id := range ids {
			r, err := fake.WaitAck(ictx, id)
			if err != nil {
				icancel()
				b.Fatal(err)
			}
			lat = append(lat, r.At.Sub(r.SentAt))
		}
		icancel()
		handled.Wait()
	}
	b.StopTimer()
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	pct := func(p float64) float64 {
		return float64(lat[min(len(lat)-1, int(p*float64(len(lat))))].Microseconds()) / 1000
	}
	b.ReportMetric(pct(0.50), "ack-p50-ms")
	b.ReportMetric(pct(0.99), "ack-p99-ms")
	b.ReportMetric(0, "ns/op")
}
