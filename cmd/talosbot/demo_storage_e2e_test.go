//go:build !demo

package main

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/talosbot/talosbot/internal/servetest"
	"github.com/talosbot/talosbot/internal/storagetest"
	"github.com/talosbot/talosbot/internal/testenv"
)

// TestDemoProductionRollKeepsStorage (issue 32): the demo's production
// cluster runs a Longhorn volume and a CloudNativePG cluster (with CNPG's
// budgets) when the tools and the CRD fixtures are there. Staging first
// (R6), then a roll of production: its approval card forecasts the drains,
// the roll switches the primary over before worker-1's drain, waits for
// each rebuild, and completes; no volume was ever faulted and no database
// failed over uncontrolled while the demo ran.
func TestDemoProductionRollKeepsStorage(t *testing.T) {
	t.Parallel() // waits on processes and the sim's reboots
	if testing.Short() {
		t.Skip("starts two simulated clusters and rolls both")
	}
	if _, err := testenv.KubeAPIServerPath(); err != nil {
		t.Skip(err)
	}
	if _, err := storagetest.FixturesDir(); err != nil {
		t.Skip(err)
	}
	addr := servetest.FreeAddr(t)
	d := startDemo(t, "--listen", addr, "--data-dir", filepath.Join(t.TempDir(), "demo"), "--reboot-delay", "1s")
	if !d.waitLine("talosbot demo is ready", 3*time.Minute) {
		t.Fatalf("the demo was not ready within 3 minutes (or exited); output:\n%s", d.output())
	}
	if !strings.Contains(d.output(), "production runs Longhorn volume app/data") {
		t.Fatalf("the demo's production has no storage; output:\n%s", d.output())
	}
	b := &servetest.Bot{T: t, Addr: addr}
	ended := func(what, title string, within time.Duration) servetest.Message {
		t.Helper()
		var m servetest.Message
		b.WaitForWithin(what, within, func() bool {
			return b.HasMessage("ops", func(x servetest.Message) bool {
				if strings.Contains(x.Title, title) && (x.Field("State") == "succeeded" || x.Field("State") == "failed" || x.Field("State") == "refused" || x.Field("State") == "interrupted") {
					m = x
					return true
				}
				return false
			})
		})
		return m
	}
	b.Command("alice", "ops", "/talos upgrade talos v1.13.9 staging")
	if m := ended("the staging roll", "/talos upgrade talos · staging", 5*time.Minute); m.Field("State") != "succeeded" {
		t.Fatalf("staging roll: %s\n%s", m.Title, m.Text)
	}

	b.Command("alice", "ops", "/talos upgrade talos v1.13.9 production")
	var card servetest.Message
	b.WaitForWithin("the production approval card", 3*time.Minute, func() bool {
		return b.HasMessage("ops", func(m servetest.Message) bool {
			if m.Field("State") == "awaiting approval" && m.Button("Approve") != "" && strings.Contains(m.Title, "production") {
				card = m
				return true
			}
			return false
		})
	})
	// The card shows the first node's forecast line (Details has them all):
	// the primary's own budget does not block, it moves with the switchover.
	for _, want := range []string{"⚠️ warning: drain ", "PDB db/pg-primary (pg-1): is CloudNativePG's budget for the"} {
		if !strings.Contains(card.Text, want) {
			t.Fatalf("the approval card does not forecast %q:\n%s", want, card.Text)
		}
	}
	if code := b.Post("/api/console/actions", map[string]string{"user": "bob", "message_id": card.ID, "action_id": card.Button("Approve")}); code != 202 {
		t.Fatalf("bob approves: HTTP %d", code)
	}
	m := ended("the production roll", "/talos upgrade talos · production", 10*time.Minute)
	if m.Field("State") != "succeeded" {
		t.Fatalf("production roll: %s\n%s\ndemo output:\n%s", m.Title, m.Text, d.output())
	}
	for _, want := range []string{"db/pg: primary switched over from pg-1", "Longhorn volume(s) healthy again"} {
		if !strings.Contains(m.Text, want) {
			t.Fatalf("the production roll's result lacks %q:\n%s", want, m.Text)
		}
	}
	d.interrupt()
	out := d.output()
	if strings.Contains(out, "⚠️ demo storage:") || !strings.Contains(out, "demo storage: no volume ever faulted and no uncontrolled failover") {
		t.Fatalf("storage went wrong while the demo ran; output:\n%s", out)
	}
}
