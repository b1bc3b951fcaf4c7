package notice_test

import (
	"context"
	"testing"
	"time"

	"github.com/talosbot/talosbot/bot/notice"
)

// Loop ticks at each due time, asks for the next one after each tick, and
// returns once its context ends.
func TestLoopTicksAtEachDueTimeUntilCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ticks := make(chan time.Time)
	asked := 0
	done := make(chan struct{})
	go func() {
		defer close(done)
		notice.Loop(ctx, time.Now, func(now time.Time) time.Time { asked++; return now.Add(5 * time.Millisecond) },
			func(ctx context.Context, now time.Time) {
				select {
				case ticks <- now:
				case <-ctx.Done():
				}
			})
	}()
	for range 3 {
		select {
		case <-ticks:
		case <-time.After(10 * time.Second):
			t.Fatal("no tick")
		}
	}
	cancel()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Loop did not return after its context ended")
	}
	if asked < 3 {
		t.Errorf("next asked %d times for 3 ticks", asked)
	}
}

func TestSnoozesParseKeepsEachKindsLimit(t *testing.T) {
	sn := notice.Snoozes{Default: 7 * 24 * time.Hour, Max: 30 * 24 * time.Hour}
	if d, err := sn.Parse(" "); err != nil || d != sn.Default {
		t.Errorf("empty: %v %v", d, err)
	}
	if d, err := sn.Parse("30d"); err != nil || d != sn.Max {
		t.Errorf("30d: %v %v", d, err)
	}
	for _, bad := range []string{"31d", "0m", "-1h", "soon"} {
		if _, err := sn.Parse(bad); err == nil {
			t.Errorf("%s accepted", bad)
		}
	}
}
