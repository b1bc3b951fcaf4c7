package engine_test

import (
	"github.com/talosbot/talosbot/state"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestTypedInputsServedByDeclaration: the engine serves the staging-drill
// evidence only to a command whose manifest needs it, built from the runs of
// commands whose manifest declares a drill (engineplugin's "roll" declares
// DRILL_TALOS_UPGRADE and "stash" DRILL_ETCD_RESTORE; the engine knows no
// name). Dry runs and failed runs prove nothing. The attempt, the Terraform
// settings and the last restore drill are typed fields of every request.
func TestTypedInputsServedByDeclaration(t *testing.T) {
	e := newEnvConfig(t, strings.Replace(testConfig,
		`credentials: {source: files, talosconfig: "file:%s"}`,
		`credentials: {source: files, talosconfig: "file:%s", terraform: {root: /srv/tf/staging, binary: tofu}}`, 1))
	out := filepath.Join(t.TempDir(), "inputs")
	read := func(cmd string) string {
		t.Helper()
		id, err := e.submit("alice", "stg", "/talos "+cmd+" --inputs "+out)
		if err != nil {
			t.Fatal(err)
		}
		e.await(id, state.StateSucceeded)
		b, err := os.ReadFile(out)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	const tf = "terraform=/srv/tf/staging,tofu,clusters[0].credentials.terraform"
	if got, want := read("drills"), "attempt=1 drills=[] "+tf+" last_drill="; got != want {
		t.Fatalf("before any drill: %q, want %q (evidence looked up, none found)", got, want)
	}

	dry, err := e.submit("alice", "stg", "/talos roll v2 --dry-run")
	if err != nil {
		t.Fatal(err)
	}
	e.await(dry, state.StateSucceeded)
	failed, err := e.submit("alice", "stg", "/talos roll v2 --mode fail")
	if err != nil {
		t.Fatal(err)
	}
	e.await(failed, state.StateFailed)
	if got := read("drills"); !strings.Contains(got, "drills=[] ") {
		t.Fatalf("after a dry run and a failed run: %q, want no evidence", got)
	}

	roll, err := e.submit("alice", "stg", "/talos roll v2")
	if err != nil {
		t.Fatal(err)
	}
	e.await(roll, state.StateSucceeded)
	stash, err := e.submit("alice", "stg", "/talos stash")
	if err != nil {
		t.Fatal(err)
	}
	e.await(stash, state.StateSucceeded)
	if got, want := read("drills"), "attempt=1 drills=[DRILL_TALOS_UPGRADE:roll:"+roll+",DRILL_ETCD_RESTORE:stash:"+stash+"] "+tf+" last_drill="+stash+" succeeded"; got != want {
		t.Fatalf("after a staging roll and restore drill: %q, want %q", got, want)
	}
	// A command that does not declare the need gets no evidence.
	if got, want := read("probe"), "attempt=1 drills=unset "+tf+" last_drill="+stash+" succeeded"; got != want {
		t.Fatalf("probe: %q, want %q", got, want)
	}
}
