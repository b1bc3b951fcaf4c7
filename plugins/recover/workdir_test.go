package recover

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// A leftover work dir (no live holder) is removed by the sweep, with its
// contents; a dir a live call holds is kept until that call releases it.
func TestSweepWorkDirs(t *testing.T) {
	t.Parallel()
	base := t.TempDir()
	left := filepath.Join(base, workDirPrefix+"x")
	if err := os.MkdirAll(left, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(left, "plain.db"), []byte("clear etcd data"), 0o600); err != nil {
		t.Fatal(err)
	}
	other := filepath.Join(base, "20260101T000000Z-cp-1.db")
	if err := os.WriteFile(other, []byte("a stored snapshot"), 0o600); err != nil {
		t.Fatal(err)
	}
	live, err := newWorkDir(base)
	if err != nil {
		t.Fatal(err)
	}
	if err := sweepWorkDirs(base); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(left); !os.IsNotExist(err) {
		t.Fatalf("leftover %s not removed: %v", left, err)
	}
	for _, p := range []string{live.path, other} {
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("%s removed: %v", p, err)
		}
	}
	live.release()
	if _, err := os.Stat(live.path); !os.IsNotExist(err) {
		t.Fatalf("released %s not removed: %v", live.path, err)
	}
}

// The work dir of a process killed with SIGKILL (no cleanup ran) is kept
// while that process lives and removed by the next sweep after it died:
// the lock dies with the process.
func TestSweepWorkDirAfterSIGKILL(t *testing.T) {
	t.Parallel()
	if dir := os.Getenv("TALOSBOT_RECOVER_WORKDIR_CHILD"); dir != "" {
		w, err := newWorkDir(dir)
		if err != nil {
			fmt.Println("error", err)
			os.Exit(1)
		}
		if err := os.WriteFile(filepath.Join(w.path, "plain"), []byte("clear"), 0o600); err != nil {
			os.Exit(1)
		}
		fmt.Println(w.path)
		_, _ = bufio.NewReader(os.Stdin).ReadString('\n') // until killed
		os.Exit(0)
	}
	base := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^TestSweepWorkDirAfterSIGKILL$")
	cmd.Env = append(os.Environ(), "TALOSBOT_RECOVER_WORKDIR_CHILD="+base)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	defer stdin.Close()
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || !strings.HasPrefix(strings.TrimSpace(line), base) {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		t.Fatalf("child: %q %v", line, err)
	}
	path := strings.TrimSpace(line)
	if err := sweepWorkDirs(base); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(path, "plain")); err != nil {
		t.Fatalf("the live child's work dir was swept: %v", err)
	}
	if err := cmd.Process.Kill(); err != nil { // SIGKILL
		t.Fatal(err)
	}
	_ = cmd.Wait()
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("the killed child's work dir should still be there before the sweep: %v", err)
	}
	if err := sweepWorkDirs(base); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Fatalf("the killed child's work dir %s survived the sweep: %v", path, err)
	}
}
