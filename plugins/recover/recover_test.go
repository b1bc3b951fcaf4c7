package recover

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"filippo.io/age"
	"go.etcd.io/etcd/etcdutl/v3/snapshot"
	"go.uber.org/zap"

	machineapi "github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/client"

	"github.com/talosbot/talosbot/plugins/cluster"
	"github.com/talosbot/talosbot/plugins/cluster/etcd"
	"github.com/talosbot/talosbot/plugins/sdk"
	"github.com/talosbot/talosbot/plugins/sdk/sdktest"
	"github.com/talosbot/talosbot/sim"
)

const (
	mEtcdRecover = "/machine.MachineService/EtcdRecover"
	mBootstrap   = "/machine.MachineService/Bootstrap"
	mReset       = "/machine.MachineService/Reset"
)

type fixture struct {
	c    *sim.Cluster
	dir  string
	snap *etcd.Snapshot
	now  time.Time
}

// setup starts a 3 control plane sim, writes "before", takes a verified
// snapshot into the bot's snapshot dir, then writes "after".
func setup(t *testing.T) *fixture { return setupWith(t, nil) }

func setupWith(t *testing.T, recipients []string) *fixture {
	t.Helper()
	return setupSim(t, recipients, sim.Options{ControlPlanes: 3, Workers: 1, RebootDelay: 200 * time.Millisecond})
}

func setupSim(t *testing.T, recipients []string, opts sim.Options) *fixture {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := sim.Start(ctx, opts)
	if err != nil {
		t.Fatalf("start sim: %v", err)
	}
	t.Cleanup(func() { _ = c.Close() })
	f := &fixture{c: c, dir: t.TempDir(), now: time.Now()}
	put(t, c, "/talosbot/before", "1")
	inv, err := cluster.InventoryFrom(f.target())
	if err != nil {
		t.Fatal(err)
	}
	cl, err := cluster.Connect(ctx, inv, &sdk.Credentials{Talosconfig: c.Talosconfig()})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if f.snap, err = etcd.TakeSnapshot(ctx, cl, inv, etcd.SnapshotOptions{Dir: f.dir, Recipients: recipients, Now: func() time.Time { return f.now }}); err != nil {
		t.Fatal(err)
	}
	put(t, c, "/talosbot/after", "1")
	return f
}

func put(t *testing.T, c *sim.Cluster, k, v string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ec, err := c.Etcd().Client(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer ec.Close()
	if _, err := ec.Put(ctx, k, v); err != nil {
		t.Fatal(err)
	}
}

func has(t *testing.T, c *sim.Cluster, k string) bool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ec, err := c.Etcd().Client(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer ec.Close()
	r, err := ec.Get(ctx, k)
	if err != nil {
		t.Fatal(err)
	}
	return len(r.Kvs) > 0
}

func (f *fixture) target() *sdk.Cluster {
	pc := &sdk.Cluster{Name: "production", Environment: "production"}
	for _, n := range f.c.Nodes() {
		pc.Nodes = append(pc.Nodes, &sdk.Node{Name: n.Name, Address: n.IP, Role: n.Role})
	}
	return pc
}

func (f *fixture) req(attempt int32, args map[string]string) *sdk.OperationRequest {
	if args == nil {
		args = map[string]string{}
	}
	return &sdk.OperationRequest{OperationID: "op-1", Command: Command, Cluster: *f.target(), Args: args, Attempt: attempt,
		Credentials: sdk.Credentials{Talosconfig: f.c.Talosconfig()},
		Evidence:    sdk.Evidence{Backups: &sdk.Backups{Dir: f.dir, LastDrill: "op-7 succeeded " + f.now.Add(time.Minute).UTC().Format(time.RFC3339)}},
		Settings:    sdk.Settings{NodeTimeoutMs: 90_000, GateTimeoutMs: 120_000}}
}

func (f *fixture) plugin(after time.Duration) *Plugin {
	return WithClock(func() time.Time { return f.now.Add(after) })
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	t.Cleanup(cancel)
	return c
}

func refusal(t *testing.T, p *Plugin, req *sdk.OperationRequest, want ...string) {
	t.Helper()
	plan, err := sdktest.Plan(ctx(t), p, req)
	if err != nil {
		t.Fatal(err)
	}
	r := plan.Refusal
	if r == nil {
		t.Fatalf("not refused: %s", plan.Summary)
	}
	text := r.Reason + " | " + r.Fix
	for _, w := range want {
		if !strings.Contains(text, w) {
			t.Fatalf("refusal %q lacks %q", text, w)
		}
	}
}

func (f *fixture) calls(method string) map[string]int {
	out := map[string]int{}
	for _, n := range f.c.Nodes() {
		if k := f.c.Calls(n.Name, method); k > 0 {
			out[n.Name] = k
		}
	}
	return out
}

// The refusals, then the recovery itself on the same cluster: quorum
// present; after the loss an unverified snapshot, one too old without
// --accept-age, an unreachable control plane; then the run restores on a
// node that lost its data, resets the stale survivor's EPHEMERAL, ends with
// one leader and three voters and the data of the snapshot; a resumed run
// afterwards changes nothing.
func TestRecoverRefusalsThenRestore(t *testing.T) {
	t.Parallel()
	slow(t)
	f := setup(t)
	p := f.plugin(time.Hour)

	refusal(t, p, f.req(1, nil), "etcd quorum is present (3 of 3", "nothing to recover")

	if _, err := f.c.LoseEtcdQuorum(ctx(t)); err != nil {
		t.Fatal(err)
	}

	// A snapshot whose bytes do not end in etcd's trailer.
	bad := filepath.Join(f.dir, "production", f.now.Add(-time.Hour).UTC().Format(etcd.TimestampLayout)+"-cp-9.db")
	if err := os.WriteFile(bad, []byte("not a snapshot"), 0o600); err != nil {
		t.Fatal(err)
	}
	refusal(t, p, f.req(1, map[string]string{"from": filepath.Base(bad)}), "snapshot not verified", "pick another snapshot")
	refusal(t, f.plugin(48*time.Hour), f.req(1, nil), "older than --max-age 24h0m0s", "--accept-age")
	refusal(t, p, f.req(1, map[string]string{"max-age": "30m"}), "older than --max-age 30m0s")

	if err := f.c.Inject(ctx(t), "cp-1", sim.Fault{Unreachable: true}); err != nil {
		t.Fatal(err)
	}
	refusal(t, p, f.req(1, nil), "cp-1 did not answer", "newer than any snapshot")
	if err := f.c.Clear(ctx(t), "cp-1"); err != nil {
		t.Fatal(err)
	}
	if n := len(f.calls(mEtcdRecover)) + len(f.calls(mBootstrap)); n != 0 {
		t.Fatalf("a refusal uploaded or bootstrapped: %v %v", f.calls(mEtcdRecover), f.calls(mBootstrap))
	}

	// cp-1 survived stale: it answers, and its own data holds the write
	// made after the snapshot. Refused by default, naming the node, both
	// revisions and the snapshot command for it.
	snapRev := snapshotRevision(t, f.snap.Path)
	refusal(t, p, f.req(1, nil), "cp-1 answers and its etcd data is at revision",
		fmt.Sprintf("newer than %s at revision %d", f.snap.ID, snapRev), "talosctl -n "+nodeIP(f.c, "cp-1")+" -e "+nodeIP(f.c, "cp-1")+" etcd snapshot", "--accept-loss")
	if n := len(f.calls(mEtcdRecover)) + len(f.calls(mBootstrap)); n != 0 {
		t.Fatalf("a refusal uploaded or bootstrapped: %v %v", f.calls(mEtcdRecover), f.calls(mBootstrap))
	}
	left, _ := filepath.Glob(filepath.Join(f.dir, "production", ".recover-*"))
	if len(left) != 0 {
		t.Fatalf("work dirs (with the member's copy) left behind: %v", left)
	}
	loss := map[string]string{"accept-loss": "true"}

	plan, err := sdktest.Plan(ctx(t), p, f.req(1, loss))
	if err != nil || plan.Refusal != nil {
		t.Fatalf("plan: %v %v", err, plan.Refusal)
	}
	for _, w := range []string{f.snap.ID, "on cp-2", fmt.Sprintf("cp-1 at revision %d (snapshot %d)", survivorRev(t, plan.Summary), snapRev), "cp-1: etcd stale", "cp-2: etcd waiting", "cp-3: etcd waiting", "last restore drill op-7 succeeded", "after this snapshot was taken", "off-site not configured"} {
		if !strings.Contains(plan.Summary, w) {
			t.Fatalf("plan summary lacks %q:\n%s", w, plan.Summary)
		}
	}

	rec, err := sdktest.Run(ctx(t), p, f.req(1, loss), nil)
	if err != nil {
		t.Fatal(err)
	}
	res := rec.FinalResult()
	if !res.OK {
		t.Fatalf("recovery failed: %s: %s\nsteps: %v", res.Summary, res.Error, rec.Steps())
	}
	if _, err := f.c.WaitEtcdHealthy(ctx(t), 3); err != nil {
		t.Fatal(err)
	}
	if !has(t, f.c, "/talosbot/before") || has(t, f.c, "/talosbot/after") {
		t.Fatal("want the key from before the snapshot and not the one after")
	}
	joined := strings.Join(res.Lines, "\n")
	for _, w := range []string{"revision", "on cp-2", "lost: everything written after", "took", "cp-1 held revision"} {
		if !strings.Contains(joined, w) {
			t.Fatalf("report lacks %q:\n%s", w, joined)
		}
	}
	if a := rec.Artifacts(); len(a) != 1 || a[0].ID != f.snap.ID || a[0].Revision == 0 {
		t.Fatalf("artifact = %v", a)
	}
	want := map[string]int{"cp-2": 1}
	if got := f.calls(mEtcdRecover); !equal(got, want) {
		t.Fatalf("EtcdRecover calls %v, want %v", got, want)
	}
	if got := f.calls(mBootstrap); !equal(got, want) {
		t.Fatalf("Bootstrap calls %v, want %v", got, want)
	}

	// Resumed after the last step: nothing is uploaded or bootstrapped again.
	rec, err = sdktest.Run(ctx(t), p, f.req(2, loss), nil)
	if err != nil || !rec.FinalResult().OK {
		t.Fatalf("resume: %v %v", err, rec.FinalResult())
	}
	if got := f.calls(mEtcdRecover); !equal(got, want) {
		t.Fatalf("after resume EtcdRecover calls %v", got)
	}
	if got := f.calls(mBootstrap); !equal(got, want) {
		t.Fatalf("after resume Bootstrap calls %v", got)
	}
}

// Resume at the step boundaries where something already changed: after the
// upload (the bot died before Bootstrap) and after the Bootstrap (it died
// before etcd came up). The resumed run uploads to the same node only,
// never bootstraps a second time, and finishes the recovery.
func TestRecoverResumeAfterUploadAndAfterBootstrap(t *testing.T) {
	t.Parallel()
	slow(t)
	for _, stage := range []string{"upload", "bootstrap"} {
		t.Run(stage, func(t *testing.T) {
			f := setup(t)
			p := f.plugin(time.Hour)
			if _, err := f.c.LoseEtcdQuorum(ctx(t)); err != nil {
				t.Fatal(err)
			}
			// What the first attempt did before it was killed, through the same API.
			tc, err := cluster.NewTalosClient(ctx(t), f.c.Talosconfig(), []string{nodeIP(f.c, "cp-1")})
			if err != nil {
				t.Fatal(err)
			}
			defer tc.Close()
			nctx := client.WithNode(ctx(t), nodeIP(f.c, "cp-2"))
			fh, err := os.Open(f.snap.Path)
			if err != nil {
				t.Fatal(err)
			}
			_, err = tc.EtcdRecover(nctx, fh)
			fh.Close()
			if err != nil {
				t.Fatal(err)
			}
			wantBoot := map[string]int{"cp-2": 1}
			if stage == "bootstrap" {
				if err := tc.Bootstrap(nctx, &machineapi.BootstrapRequest{RecoverEtcd: true}); err != nil {
					t.Fatal(err)
				}
			}
			rec, err := sdktest.Run(ctx(t), p, f.req(2, map[string]string{"accept-loss": "true"}), nil)
			if err != nil {
				t.Fatal(err)
			}
			if res := rec.FinalResult(); !res.OK {
				t.Fatalf("resume failed: %s: %s\nsteps: %v", res.Summary, res.Error, rec.Steps())
			}
			if got := f.calls(mEtcdRecover); len(got) != 1 || got["cp-2"] == 0 {
				t.Fatalf("EtcdRecover calls %v: want only cp-2", got)
			}
			if got := f.calls(mBootstrap); stage == "upload" && !equal(got, wantBoot) {
				t.Fatalf("Bootstrap calls %v, want %v", got, wantBoot)
			} else if stage == "bootstrap" && (len(got) != 1 || got["cp-2"] == 0) {
				t.Fatalf("Bootstrap calls %v: want only cp-2", got)
			}
			if _, err := f.c.WaitEtcdHealthy(ctx(t), 3); err != nil {
				t.Fatal(err)
			}
			if !has(t, f.c, "/talosbot/before") {
				t.Fatal("restored data missing")
			}
		})
	}
}

// snapshotRevision is etcdutl's revision of a snapshot file.
func snapshotRevision(t *testing.T, path string) int64 {
	t.Helper()
	st, err := snapshot.NewV3(zap.NewNop()).Status(path)
	if err != nil {
		t.Fatal(err)
	}
	return st.Revision
}

var survivorRe = regexp.MustCompile(`cp-1 at revision (\d+) \(snapshot`)

// survivorRev is cp-1's revision as the plan states it; the test checks it
// is above the snapshot's.
func survivorRev(t *testing.T, summary string) int64 {
	t.Helper()
	m := survivorRe.FindStringSubmatch(summary)
	if m == nil {
		t.Fatalf("plan names no revision for cp-1:\n%s", summary)
	}
	n, _ := strconv.ParseInt(m[1], 10, 64)
	return n
}

// killAt stops a run the moment a step has ended, as a SIGKILL at that
// step boundary does: the context ends, so nothing after the step happens.
type killAt struct {
	sdk.Reporter
	step   string
	cancel context.CancelFunc
}

func (k *killAt) StepOK(id, detail string) error {
	err := k.Reporter.StepOK(id, detail)
	if id == k.step {
		k.cancel()
	}
	return err
}

// Resume at the later step boundaries: the first attempt is stopped right
// after the rejoin (the stale member's EPHEMERAL reset) or right after the
// members step, then attempt 2 runs. It never uploads, bootstraps or
// resets again, and finishes with the snapshot's data on three voters.
func TestRecoverResumeAfterRejoinAndAfterMembers(t *testing.T) {
	t.Parallel()
	slow(t)
	for _, stage := range []string{StepRejoin, StepMembers} {
		t.Run(stage, func(t *testing.T) {
			f := setup(t)
			p := f.plugin(time.Hour)
			if _, err := f.c.LoseEtcdQuorum(ctx(t)); err != nil {
				t.Fatal(err)
			}
			loss := map[string]string{"accept-loss": "true"}
			kctx, cancel := context.WithCancel(ctx(t))
			rec := sdktest.NewRecorder(nil)
			_ = p.Run(kctx, f.req(1, loss), &killAt{Reporter: rec, step: stage, cancel: cancel})
			cancel()
			reached := false
			for _, st := range rec.Steps() {
				reached = reached || st.StepID == stage && st.Status == sdk.StepOK
			}
			if !reached {
				t.Fatalf("attempt 1 never finished %s: %v", stage, rec.Steps())
			}
			once := map[string]int{"cp-2": 1}
			reset := map[string]int{"cp-1": 1}
			check := func(when string) {
				t.Helper()
				for m, want := range map[string]map[string]int{mEtcdRecover: once, mBootstrap: once, mReset: reset} {
					if got := f.calls(m); !equal(got, want) {
						t.Fatalf("%s: %s calls %v, want %v", when, m, got, want)
					}
				}
			}
			check("attempt 1")

			rec2, err := sdktest.Run(ctx(t), p, f.req(2, loss), nil)
			if err != nil {
				t.Fatal(err)
			}
			if res := rec2.FinalResult(); !res.OK {
				t.Fatalf("resume failed: %s: %s\nsteps: %v", res.Summary, res.Error, rec2.Steps())
			}
			check("after the resume")
			for _, st := range rec2.Steps() {
				if (st.StepID == StepUpload || st.StepID == StepBootstrap) && st.Status != sdk.StepSkipped {
					t.Fatalf("resumed %s is %s, want skipped", st.StepID, st.Status)
				}
			}
			if _, err := f.c.WaitEtcdHealthy(ctx(t), 3); err != nil {
				t.Fatal(err)
			}
			if !has(t, f.c, "/talosbot/before") || has(t, f.c, "/talosbot/after") {
				t.Fatal("want the snapshot's data")
			}
		})
	}
}

func nodeIP(c *sim.Cluster, name string) string {
	for _, n := range c.Nodes() {
		if n.Name == name {
			return n.IP
		}
	}
	return ""
}

func equal(a, b map[string]int) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// An age-encrypted snapshot is decrypted with the identity from the
// credentials into a private work dir that is gone after the call; without
// the identity it is not verified and the plan is refused. The read-only
// guide locates it without the identity and says to decrypt it.
func TestRecoverEncryptedSnapshot(t *testing.T) {
	t.Parallel()
	slow(t)
	id, err := age.GenerateX25519Identity()
	if err != nil {
		t.Fatal(err)
	}
	f := setupWith(t, []string{id.Recipient().String()})
	if !strings.HasSuffix(f.snap.Path, ".age") {
		t.Fatalf("snapshot %s not encrypted", f.snap.Path)
	}
	if _, err := f.c.LoseEtcdQuorum(ctx(t)); err != nil {
		t.Fatal(err)
	}
	p := f.plugin(time.Hour)
	// What a recovery killed by SIGKILL left: its work dir with the
	// decrypted snapshot. The next call removes it.
	crashed := filepath.Join(f.dir, "production", ".recover-x")
	if err := os.MkdirAll(crashed, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(crashed, "plain.db"), []byte("clear etcd data"), 0o600); err != nil {
		t.Fatal(err)
	}
	refusal(t, p, f.req(1, nil), "snapshot not verified", "no age identity")
	if _, err := os.Stat(crashed); !os.IsNotExist(err) {
		t.Fatalf("the crashed call's work dir %s is still there: %v", crashed, err)
	}
	req := f.req(1, map[string]string{"accept-loss": "true"})
	req.Credentials.AgeIdentity = []byte(id.String())
	plan, err := sdktest.Plan(ctx(t), p, req)
	if err != nil || plan.Refusal != nil {
		t.Fatalf("plan: %v %v", err, plan.Refusal)
	}
	if !strings.Contains(plan.Summary, "revision ") || strings.Contains(plan.Summary, "revision 0") {
		t.Fatalf("no revision from the decrypted snapshot: %s", plan.Summary)
	}
	left, _ := filepath.Glob(filepath.Join(f.dir, "production", ".recover-*"))
	if len(left) != 0 {
		t.Fatalf("work dirs left behind: %v", left)
	}
	guide := f.req(1, nil)
	guide.Command = GuideCommand
	rec, err := sdktest.Run(ctx(t), p, guide, nil)
	if err != nil {
		t.Fatal(err)
	}
	text := strings.Join(rec.FinalResult().Lines, "\n")
	if !strings.Contains(text, "age -d -i <your age identity file> -o db.snapshot "+f.snap.Path) || !strings.Contains(text, "bootstrap --recover-from=db.snapshot") || strings.Contains(text, "AGE-SECRET-KEY") {
		t.Fatalf("guide:\n%s", text)
	}
}

// The refusal's fix, followed: snapshot the stale survivor's own data into
// the snapshot dir under the name the fix gives, and recover --from it. Its
// revision is the member's, so nothing is refused without --accept-loss,
// and the write made after the bot's snapshot survives the recovery.
func TestRecoverFromSurvivorKeepsNewerData(t *testing.T) {
	t.Parallel()
	slow(t)
	f := setup(t)
	p := f.plugin(time.Hour)
	if _, err := f.c.LoseEtcdQuorum(ctx(t)); err != nil {
		t.Fatal(err)
	}
	tc, err := cluster.NewTalosClient(ctx(t), f.c.Talosconfig(), []string{nodeIP(f.c, "cp-1")})
	if err != nil {
		t.Fatal(err)
	}
	defer tc.Close()
	rd, err := tc.EtcdSnapshot(client.WithNode(ctx(t), nodeIP(f.c, "cp-1")), &machineapi.EtcdSnapshotRequest{})
	if err != nil {
		t.Fatal(err)
	}
	base := f.now.Add(30*time.Minute).UTC().Format(etcd.TimestampLayout) + "-cp-1"
	_, err = etcd.WriteVerified(ctx(t), rd, filepath.Join(f.dir, "production"), base)
	rd.Close()
	if err != nil {
		t.Fatal(err)
	}
	args := map[string]string{"from": base + ".db"}
	plan, err := sdktest.Plan(ctx(t), p, f.req(1, args))
	if err != nil || plan.Refusal != nil {
		t.Fatalf("plan: %v %v", err, plan.Refusal)
	}
	rec, err := sdktest.Run(ctx(t), p, f.req(1, args), nil)
	if err != nil {
		t.Fatal(err)
	}
	if res := rec.FinalResult(); !res.OK {
		t.Fatalf("recovery failed: %s: %s\nsteps: %v", res.Summary, res.Error, rec.Steps())
	}
	if _, err := f.c.WaitEtcdHealthy(ctx(t), 3); err != nil {
		t.Fatal(err)
	}
	if !has(t, f.c, "/talosbot/before") || !has(t, f.c, "/talosbot/after") {
		t.Fatal("the survivor's data is not what was restored")
	}
}

// onStep runs a test's hook when a step reports, before the run goes on
// (the plugin calls its reporter synchronously).
type onStep struct {
	sdk.Reporter
	hook func(id, status string)
}

func (o *onStep) StepStarted(id, d string) error {
	o.hook(id, "started")
	return o.Reporter.StepStarted(id, d)
}
func (o *onStep) StepOK(id, d string) error { o.hook(id, "ok"); return o.Reporter.StepOK(id, d) }
func (o *onStep) StepSkipped(id, d string) error {
	o.hook(id, "skipped")
	return o.Reporter.StepSkipped(id, d)
}

// setHealthFault reports node's etcd service as not (yet) healthy, or
// stops doing so, keeping its other faults (EtcdDataLost): the state of a
// member whose next health check has not run yet (Talos checks 5 s after
// the start, then every 20 s) or a learner not yet promoted.
func (f *fixture) setHealthFault(t *testing.T, node string, on bool) {
	t.Helper()
	flt := f.c.Faults()[node]
	flt.UnhealthyService = ""
	if on {
		flt.UnhealthyService = "etcd"
	}
	if err := f.c.Inject(ctx(t), node, flt); err != nil {
		t.Fatal(err)
	}
}

// waitJoined waits until node's etcd service is Running and its member
// sees a leader.
func (f *fixture) waitJoined(node string) error {
	wctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for {
		for _, m := range f.c.EtcdView(wctx).Members {
			if m.Node == node && m.Service == "Running" && m.Leader != 0 {
				return nil
			}
		}
		select {
		case <-wctx.Done():
			return fmt.Errorf("%s did not join: %v", node, f.c.EtcdView(context.Background()))
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// Members that run with a leader but whose health checks have not passed
// are a cluster with quorum: the recovery is refused, naming them.
func TestRecoverRefusedWhileMembersHaveLeader(t *testing.T) {
	t.Parallel()
	f := setup(t)
	for _, n := range []string{"cp-1", "cp-2", "cp-3"} {
		f.setHealthFault(t, n, true)
	}
	refusal(t, f.plugin(time.Hour), f.req(1, nil), "etcd on cp-1, cp-2, cp-3 runs with a leader although its health check has not passed", "a cluster with quorum exists")
}

// A control plane that joined the restored cluster but whose etcd health
// check has not passed yet (Running, unhealthy, with a leader) is not reset
// by the rejoin step; only the stale survivor (no leader) is.
func TestRecoverDoesNotResetJoinedMember(t *testing.T) {
	t.Parallel()
	slow(t)
	f := setup(t)
	p := f.plugin(time.Hour)
	if _, err := f.c.LoseEtcdQuorum(ctx(t)); err != nil {
		t.Fatal(err)
	}
	f.setHealthFault(t, "cp-3", true)
	var hookErr error
	rec := sdktest.NewRecorder(nil)
	rep := &onStep{Reporter: rec, hook: func(id, st string) {
		switch {
		case id == StepEtcd && st == "ok":
			// The restored cluster is up: let cp-3 join it before the
			// rejoin step reads the members.
			hookErr = f.waitJoined("cp-3")
		case id == StepRejoin && st != "started":
			f.setHealthFault(t, "cp-3", false)
		}
	}}
	if err := p.Run(ctx(t), f.req(1, map[string]string{"accept-loss": "true"}), rep); err != nil {
		t.Fatal(err)
	}
	if hookErr != nil {
		t.Fatal(hookErr)
	}
	if res := rec.FinalResult(); !res.OK {
		t.Fatalf("recovery failed: %s: %s\nsteps: %v", res.Summary, res.Error, rec.Steps())
	}
	if got, want := f.calls(mReset), map[string]int{"cp-1": 1}; !equal(got, want) {
		t.Fatalf("Reset calls %v, want %v (a joined member was reset)", got, want)
	}
	var detail string
	for _, st := range rec.Steps() {
		if st.StepID == StepRejoin && st.Status == sdk.StepOK {
			detail = st.Detail
		}
	}
	if !strings.Contains(detail, "not reset: cp-3") {
		t.Fatalf("rejoin step %q does not name cp-3 as joined", detail)
	}
	if _, err := f.c.WaitEtcdHealthy(ctx(t), 3); err != nil {
		t.Fatal(err)
	}
}

// Resumed after the Bootstrap while the restored member's health check
// has not passed yet (Running, unhealthy, with a leader): the run treats
// the restore as done and never uploads to or bootstraps a second node
// (two clusters from one snapshot), nor resets the restored one.
func TestRecoverResumeRestoredNotYetHealthy(t *testing.T) {
	t.Parallel()
	slow(t)
	f := setup(t)
	p := f.plugin(time.Hour)
	if _, err := f.c.LoseEtcdQuorum(ctx(t)); err != nil {
		t.Fatal(err)
	}
	tc, err := cluster.NewTalosClient(ctx(t), f.c.Talosconfig(), []string{nodeIP(f.c, "cp-1")})
	if err != nil {
		t.Fatal(err)
	}
	defer tc.Close()
	nctx := client.WithNode(ctx(t), nodeIP(f.c, "cp-2"))
	fh, err := os.Open(f.snap.Path)
	if err != nil {
		t.Fatal(err)
	}
	_, err = tc.EtcdRecover(nctx, fh)
	fh.Close()
	if err != nil {
		t.Fatal(err)
	}
	if err := tc.Bootstrap(nctx, &machineapi.BootstrapRequest{RecoverEtcd: true}); err != nil {
		t.Fatal(err)
	}
	f.setHealthFault(t, "cp-2", true)
	f.setHealthFault(t, "cp-3", true)
	if err := f.waitJoined("cp-2"); err != nil {
		t.Fatal(err)
	}
	rec := sdktest.NewRecorder(nil)
	rep := &onStep{Reporter: rec, hook: func(id, st string) {
		if id == StepEtcd && st == "started" {
			f.setHealthFault(t, "cp-2", false)
			f.setHealthFault(t, "cp-3", false)
		}
	}}
	if err := p.Run(ctx(t), f.req(2, map[string]string{"accept-loss": "true"}), rep); err != nil {
		t.Fatal(err)
	}
	if res := rec.FinalResult(); !res.OK {
		t.Fatalf("resume failed: %s: %s\nsteps: %v", res.Summary, res.Error, rec.Steps())
	}
	once := map[string]int{"cp-2": 1}
	for m, want := range map[string]map[string]int{mEtcdRecover: once, mBootstrap: once, mReset: {"cp-1": 1}} {
		if got := f.calls(m); !equal(got, want) {
			t.Fatalf("%s calls %v, want %v", m, got, want)
		}
	}
	if _, err := f.c.WaitEtcdHealthy(ctx(t), 3); err != nil {
		t.Fatal(err)
	}
	if !has(t, f.c, "/talosbot/before") {
		t.Fatal("restored data missing")
	}
}
