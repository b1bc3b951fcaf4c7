package etcd

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/talosbot/talosbot/internal/retention"
)

// Issue 29: a file already at a snapshot's name is never replaced (the
// publish was os.Rename, which replaces silently); the new snapshot fails
// with the fix, and no part file stays behind.
func TestWriteVerifiedNeverReplacesAFile(t *testing.T) {
	src := filepath.Join(t.TempDir(), "fixture.db")
	writeSnapshotFixture(t, src, 100, 100)
	good, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	const base = "20261202T143000.250Z-cp-1-0a1b2c3d"
	precious := []byte("a verified snapshot taken a quarter second earlier")
	if err := os.WriteFile(filepath.Join(dir, base+".db"), precious, 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = WriteVerified(context.Background(), bytes.NewReader(good), dir, base)
	if !errors.Is(err, fs.ErrExist) || !strings.Contains(err.Error(), "never replaced") || !strings.Contains(err.Error(), "take the snapshot again") {
		t.Fatalf("err = %v, want a refusal to replace the existing file", err)
	}
	if got, _ := os.ReadFile(filepath.Join(dir, base+".db")); !bytes.Equal(got, precious) {
		t.Fatalf("the existing snapshot was replaced: %d bytes", len(got))
	}
	assertOnly(t, dir, base+".db")
}

// Runs of one cluster queue on its lock: a second run waits, is told who
// holds the lock, and gets it when the first lets go.
func TestLockClusterQueuesAndNamesTheHolder(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	path := filepath.Join(t.TempDir(), ".staging.lock")
	unlock, err := lockCluster(ctx, path, "the snapshot of operation op-upgrade", func(string) { t.Error("the first run waited") })
	if err != nil {
		t.Fatal(err)
	}
	told := make(chan string, 1)
	got := make(chan error, 1)
	go func() {
		u, err := lockCluster(ctx, path, "the snapshot of operation op-snap", func(h string) { told <- h })
		if err == nil {
			u()
		}
		got <- err
	}()
	if h := <-told; h != "the snapshot of operation op-upgrade" {
		t.Fatalf("told %q, want the holder", h)
	}
	select {
	case err := <-got:
		t.Fatalf("second run did not wait: %v", err)
	default:
	}
	unlock()
	if err := <-got; err != nil {
		t.Fatal(err)
	}

	// A queued run whose operation ends stops waiting.
	unlock, err = lockCluster(ctx, path, "holder", func(string) {})
	if err != nil {
		t.Fatal(err)
	}
	defer unlock()
	cctx, ccancel := context.WithCancel(ctx)
	go func() {
		_, err := lockCluster(cctx, path, "waiter", func(string) { ccancel() })
		got <- err
	}()
	if err := <-got; !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
}

// A snapshot whose run ended within SettleGrace before a run began, or
// after, is protected from that run's retention: the host's list of
// record-named snapshots may predate its record.
func TestSettlingProtectsRecentRuns(t *testing.T) {
	dir := t.TempDir()
	began := time.Date(2026, 12, 2, 14, 30, 0, 0, time.UTC)
	for name, end := range map[string]time.Time{
		"20261202T120000.000Z-cp-1-00000001.db": began.Add(-2 * SettleGrace), // long settled
		"20261202T142000.000Z-cp-1-00000002.db": began.Add(-SettleGrace / 2), // just ended
		"20261202T143001.000Z-cp-2-00000003.db": began.Add(time.Minute),      // ended while this run queued
	} {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(p, time.Time{}, end); err != nil {
			t.Fatal(err)
		}
	}
	got, err := settling(dir, "c", began.Add(-SettleGrace))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || !got["c/20261202T142000.000Z-cp-1-00000002"] || !got["c/20261202T143001.000Z-cp-2-00000003"] {
		t.Fatalf("settling = %v", got)
	}
	// Retention with keep 1 then deletes only the settled one.
	removed, err := ApplyRetention(dir, "c", retention.Policy{Keep: 1}, began, got)
	if err != nil || len(removed) != 1 || filepath.Base(removed[0]) != "20261202T120000.000Z-cp-1-00000001.db" {
		t.Fatalf("removed %v, %v", removed, err)
	}
}

// The lock holds across processes (a standalone snapshot and an upgrade's
// run in different plugin processes): a child process holds it, this one
// queues, is told the child's holder text, and gets the lock when the child
// lets go.
func TestLockClusterAcrossProcesses(t *testing.T) {
	if os.Getenv("TALOSBOT_LOCK_HELPER") != "" {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	path := filepath.Join(t.TempDir(), ".staging.lock")
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestLockHelperProcess$")
	cmd.Env = append(os.Environ(), "TALOSBOT_LOCK_HELPER="+path)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil || line != "locked\n" {
		t.Fatalf("helper said %q, %v", line, err)
	}
	told := ""
	unlock, err := lockCluster(ctx, path, "parent", func(h string) {
		told = h
		_ = stdin.Close() // the child unlocks and exits
	})
	if err != nil {
		t.Fatal(err)
	}
	unlock()
	if told != "the snapshot of operation op-child" {
		t.Fatalf("told %q, want the child's holder", told)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatal(err)
	}
}

// TestLockHelperProcess is the child of TestLockClusterAcrossProcesses.
func TestLockHelperProcess(t *testing.T) {
	path := os.Getenv("TALOSBOT_LOCK_HELPER")
	if path == "" {
		t.Skip("helper process only")
	}
	unlock, err := lockCluster(context.Background(), path, "the snapshot of operation op-child", func(string) {})
	if err != nil {
		t.Fatal(err)
	}
	fmt.Println("locked")
	_, _ = io.Copy(io.Discard, os.Stdin) // until the parent closes stdin
	unlock()
}
