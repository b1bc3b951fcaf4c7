package bot_test

import (
	"testing"
	"time"
)

// Status shows the freeze (who, why, since), the lock, the last change and
// the last operation with its result; it never says "unlocked" while frozen.
func TestStatusShowsFreezeLastChangeAndLastOperation(t *testing.T) {
	e := newEnvConfig(t, nodesConfig)
	e.promote("v2")
	if _, err := e.submit("bob", "prd", `/talos freeze production "etcd restore drill"`); err != nil {
		t.Fatal(err)
	}
	e.clock.Add(90 * time.Second)
	if _, err := e.submit("carol", "prd", "/talos status production"); err != nil {
		t.Fatal(err)
	}
	got := e.sink.WaitReply(t, "*production* (production)")
	mustContain(t, "status", got, "lock: free", `🧊 frozen by bob since 2026-11-30 12:00 UTC (2 min ago): "etcd restore drill"`, "/talos unfreeze production")
	if _, err := e.submit("carol", "stg", "/talos status staging"); err != nil {
		t.Fatal(err)
	}
	got = e.sink.WaitReply(t, "*staging* (staging)")
	mustContain(t, "status", got, "freeze: none", "last change: /talos roll → v2, succeeded 2 min ago", "last operation: ", "roll — succeeded 2 min ago, by alice: rolled to v2")
	// Ages read in words, as everywhere else the bot speaks (render.Ago).
	e.clock.Add(72 * time.Hour)
	if _, err := e.submit("carol", "prd", "/talos status production"); err != nil {
		t.Fatal(err)
	}
	got = e.sink.WaitReply(t, "3 days ago")
	mustContain(t, "status", got, `🧊 frozen by bob since 2026-11-30 12:00 UTC (3 days ago): "etcd restore drill"`)
}

func TestHelpTakesTheRestOfTheLine(t *testing.T) {
	e := newEnv(t)
	if _, err := e.submit("carol", "stg", "/talos help roll"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.submit("carol", "stg", "/talos help audit head"); err != nil {
		t.Fatalf("help with two words: %v", err)
	}
	e.sink.WaitReply(t, "`/talos audit head")
}
