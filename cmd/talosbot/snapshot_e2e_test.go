package main

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/talosbot/talosbot/internal/servetest"
	"github.com/talosbot/talosbot/sim"
)

// Issue 29 through the real bot: several `/talos snapshot staging` sent at
// once run in parallel plugin processes; every one succeeds with its own id
// and file (they queue on the cluster's snapshot lock). With names by the
// UTC second they raced for one name: the rest failed with "file exists",
// or a later one replaced a verified file under the same id.
func TestParallelSnapshotsThroughTheBot(t *testing.T) {
	slow(t)
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := sim.Start(ctx, sim.Options{Dir: filepath.Join(dir, "sim"), Name: "staging", ControlPlanes: 1, Workers: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	b := servetest.Config{Dir: dir, SnapshotDir: true, Clusters: []servetest.Cluster{{Sim: c}}}.Bot(t, talosbotBinary(t))
	b.Start()
	t.Cleanup(func() { _ = b.Cmd.Process.Kill(); _ = b.Cmd.Wait() })

	const n = 4
	for range n {
		b.Command("alice", "ops", "/talos snapshot staging")
	}
	ops := map[string]bool{}
	b.WaitForWithin("the snapshot operations", 2*time.Minute, func() bool {
		for _, m := range b.Messages("ops") {
			if id := m.Field("Operation"); id != "" && strings.Contains(m.Title, "/talos snapshot") {
				ops[id] = true
			}
		}
		return len(ops) == n
	})
	for id := range ops {
		if st := b.AwaitEnd("ops", id, 3*time.Minute); st != "succeeded" {
			for _, m := range b.Messages("ops") {
				if m.Field("Operation") == id {
					t.Logf("%s", m.Text)
				}
			}
			t.Fatalf("snapshot %s: %s", id, st)
		}
	}
	files, _ := filepath.Glob(filepath.Join(dir, "snapshots", "staging", "*.db"))
	if len(files) != n {
		t.Fatalf("%d snapshot files after %d snapshots: %v", len(files), n, files)
	}
	ids := map[string]bool{}
	for _, m := range b.Messages("ops") {
		for _, l := range strings.Split(m.Text, "\n") {
			if strings.Contains(l, "queued behind") {
				t.Log(l) // whether a run had to queue depends on timing
			}
			if i := strings.Index(l, "snapshot staging/"); i >= 0 {
				ids[strings.Fields(l[i+len("snapshot "):])[0]] = true
			}
		}
	}
	if len(ids) < n {
		t.Fatalf("%d distinct snapshot ids reported for %d snapshots: %v", len(ids), n, ids)
	}
}
