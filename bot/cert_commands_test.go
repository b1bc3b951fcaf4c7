package bot_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/talosbot/talosbot/bot/certnotice"
	"github.com/talosbot/talosbot/state"
)

// TestCertsSnooze: the expiry notices' snooze button runs `/talos certs
// snooze`: operators may, viewers may not; it is audited and bounded (30
// days: a snooze must not outlast a certificate a day from expiry).
func TestCertsSnooze(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	if _, err := e.submit("alice", "prd", "/talos certs snooze --for 3d"); err != nil {
		t.Fatal(err)
	}
	until, err := certnotice.SnoozedUntil(ctx, e.store, "production")
	if err != nil || !until.Equal(e.clock.Now().Add(72*time.Hour)) {
		t.Errorf("snoozed until %s (%v), want %s", until, err, e.clock.Now().Add(72*time.Hour))
	}
	if recs, _ := e.store.QueryAudit(ctx, state.AuditQuery{Action: "certs.snoozed", Cluster: "production"}); len(recs) != 1 || recs[0].Actor != "alice" {
		t.Errorf("not audited: %+v", recs)
	}
	if _, err := e.submit("carol", "prd", "/talos certs snooze production"); err == nil || !strings.Contains(err.Error(), "viewer") {
		t.Errorf("viewer snooze: %v", err)
	}
	if _, err := e.submit("alice", "prd", "/talos certs snooze production --for 40d"); err == nil || !strings.Contains(err.Error(), "between") {
		t.Errorf("40d: %v", err)
	}
	if u, _ := certnotice.SnoozedUntil(ctx, e.store, "production"); !u.Equal(until) {
		t.Errorf("a refused snooze changed it to %s", u)
	}
}
