package main

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/talosbot/talosbot/internal/servetest"
)

// TestAuditVerifyAndExportAgainstARunningBotAndDamagedCopies runs `talosbot
// serve`, pins the head it posts in chat, verifies and exports through the
// running bot's audit API (the file is locked while it runs), then damages
// copies of its real database in each way an attacker or a bad disk would
// and expects `talosbot audit verify` to exit 1 with the reason, never panic.
func TestAuditVerifyAndExportAgainstARunningBotAndDamagedCopies(t *testing.T) {
	// Waits on processes and the sim's reboots, not the CPU: runs beside the package's other slow tests.
	t.Parallel()
	slow(t)
	dir := t.TempDir()
	plugin, sum := buildEnginePlugin(t)
	tc, tokFile := filepath.Join(dir, "talosconfig"), filepath.Join(dir, "audit-token")
	must(t, os.WriteFile(tc, []byte("context: e2e\n"), 0o600))
	// A file secret with the trailing newline `echo` writes: it is dropped.
	must(t, os.WriteFile(tokFile, []byte("audit-secret-verify-0123456789abcdef\n"), 0o600))
	addr := servetest.FreeAddr(t)
	cfg := filepath.Join(dir, "talosbot.yaml")
	must(t, os.WriteFile(cfg, []byte(fmt.Sprintf(`
data_dir: %[1]s/data
listen: %[2]s
clusters:
  - name: staging
    environment: staging
    channels: [ops]
    endpoints: [127.0.0.1]
    nodes: [{name: cp-1, address: 127.0.0.1, role: controlplane, host: pve1}]
    credentials: {source: files, talosconfig: "file:%[3]s"}
policy: {staging: {operators: [alice]}}
chat:
  web: {enabled: true, users: [{name: alice, token: env:TB_CONSOLE_TOKEN_ALICE}]}
audit: {token: "file:%[4]s"}
plugins:
  external: [{name: eng, path: %[5]s, sha256: %[6]s}]
`, dir, addr, tc, tokFile, plugin, sum)), 0o600))
	b := &servetest.Bot{T: t, Bin: talosbotBinary(t), Config: cfg, Addr: addr, Tokens: servetest.NewTokens(t, "alice")}
	b.Start()
	stopped := false
	stop := func() {
		if !stopped {
			stopped = true
			_ = b.Cmd.Process.Signal(syscall.SIGTERM)
			_ = b.Cmd.Wait()
		}
	}
	defer stop()
	for i := range 3 {
		b.Command("alice", "ops", "/talos probe staging")
		b.WaitFor(fmt.Sprintf("probe %d", i+1), func() bool {
			n := 0
			for _, m := range b.Messages("ops") {
				if strings.Contains(m.Title, "probe") && strings.Contains(m.Title, "✅") {
					n++
				}
			}
			return n > i
		})
	}
	b.Command("alice", "ops", "/talos audit head")
	headRE := regexp.MustCompile("Audit head: record (\\d+) of \\d+, sha256 `([0-9a-f]{64})`")
	var pinned string
	b.WaitFor("the audit head", func() bool {
		for _, m := range b.Messages("ops") {
			if sub := headRE.FindStringSubmatch(m.Text); sub != nil {
				pinned = sub[2]
				return true
			}
		}
		return false
	})

	db := filepath.Join(dir, "data", "talosbot.db")
	url := "http://" + addr
	// --db while the bot runs: a quick, clear refusal naming --url.
	start := time.Now()
	_, errOut, code := runBin(t, "audit", "verify", "--db", db)
	if code != 1 || !strings.Contains(errOut, "locked by a running talosbot") || !strings.Contains(errOut, "--url") {
		t.Fatalf("verify --db on a running bot: exit %d\n%s", code, errOut)
	}
	if took := time.Since(start); took > 30*time.Second {
		t.Errorf("the refusal took %s", took)
	}
	out, errOut, code := runBin(t, "audit", "verify", "--url", url, "--token", "file:"+tokFile, "--expect-head", pinned)
	if code != 0 || !strings.Contains(out, "audit chain OK") || !strings.Contains(out, "the pinned head "+pinned[:12]+" is in the chain") {
		t.Fatalf("verify --url: exit %d\n%s%s", code, out, errOut)
	}
	if _, errOut, code := runBin(t, "audit", "verify", "--url", url, "--token", "env:NO_SUCH_TOKEN_VAR"); code != 2 || !strings.Contains(errOut, "NO_SUCH_TOKEN_VAR is not set") {
		t.Fatalf("verify --url without a token: exit %d %s", code, errOut)
	}
	out, errOut, code = runBin(t, "audit", "export", "--url", url, "--token", "file:"+tokFile, "--format", "csv", "--op", "probe", "--limit", "2")
	if code != 0 || strings.Count(out, "\n") != 3 || !strings.Contains(out, "probe") {
		t.Fatalf("export --url (2 records + header): exit %d\n%s%s", code, out, errOut)
	}
	if _, errOut, code := runBin(t, "audit", "export", "--url", url, "--token", "file:"+tokFile, "--since", "99999999999d"); code != 2 || !strings.Contains(errOut, "longer than the maximum") {
		t.Fatalf("export --since overflow: exit %d %s", code, errOut)
	}
	stop()

	// The stopped bot's real database verifies, pinned head included.
	out, errOut, code = runBin(t, "audit", "verify", "--db", db, "--expect-head", pinned)
	if code != 0 {
		t.Fatalf("verify --db after stop: exit %d\n%s%s", code, out, errOut)
	}
	last := uint64(0)
	fmt.Sscanf(out[strings.Index(out, "(seq ")+5:], "%d", &last)
	if last < 4 {
		t.Fatalf("too few records to cut: %s", out)
	}
	raw, err := os.ReadFile(db)
	must(t, err)

	key := func(seq uint64) []byte {
		k := make([]byte, 8)
		for i := range 8 {
			k[7-i] = byte(seq >> (8 * i))
		}
		return k
	}
	raws := func(name string, b []byte) string {
		p := filepath.Join(t.TempDir(), name+".db")
		must(t, os.WriteFile(p, b, 0o600))
		return p
	}
	viaBolt := func(name string, fn func(tx *bolt.Tx) error) string {
		p := filepath.Join(t.TempDir(), name+".db")
		must(t, os.WriteFile(p, raw, 0o600))
		d, err := bolt.Open(p, 0o600, &bolt.Options{Timeout: 5 * time.Second})
		must(t, err)
		must(t, d.Update(fn))
		must(t, d.Close())
		return p
	}
	// Flip one byte of record 3 where bbolt reads it (copy-on-write leaves
	// stale copies of a page in the file; bbolt itself tells them apart).
	readRec := func(p string) []byte {
		d, err := bolt.Open(p, 0o600, &bolt.Options{ReadOnly: true, Timeout: 5 * time.Second})
		must(t, err)
		defer d.Close()
		var v []byte
		_ = d.View(func(tx *bolt.Tx) error { v = bytes.Clone(tx.Bucket([]byte("audit")).Get(key(3))); return nil })
		return v
	}
	rec3 := readRec(db)
	var flipped []byte
	for off := 0; flipped == nil; {
		i := bytes.Index(raw[off:], rec3)
		if i < 0 {
			t.Fatal("record 3 is not where bbolt reads it")
		}
		i += off
		cand := bytes.Clone(raw)
		j := i + bytes.Index(rec3, []byte(`"actor":"`)) + len(`"actor":"`)
		cand[j] ^= 0x01
		if !bytes.Equal(readRec(raws("probe", cand)), rec3) {
			flipped = cand
		}
		off = i + 1
	}
	page := os.Getpagesize()
	used := len(bytes.TrimRight(raw, "\x00"))
	cases := []struct {
		name, path string
		want       []string
		pinned     bool
	}{
		{"bucket deleted", viaBolt("bucket", func(tx *bolt.Tx) error { return tx.DeleteBucket([]byte("audit")) }), []string{"the audit bucket is missing"}, false},
		{"last record and head deleted", viaBolt("tail", func(tx *bolt.Tx) error {
			if err := tx.Bucket([]byte("audit")).Delete(key(last)); err != nil {
				return err
			}
			return tx.Bucket([]byte("meta")).Delete([]byte("audit_head"))
		}), []string{"the audit head", "is missing"}, false},
		{"record deleted", viaBolt("record", func(tx *bolt.Tx) error { return tx.Bucket([]byte("audit")).Delete(key(2)) }), []string{"record 2 is missing"}, false},
		{"byte flipped", raws("flipped", flipped), []string{"edited"}, false},
		{"truncated", raws("truncated", raw[:(used/2)/page*page]), []string{"damaged"}, false},
		{"truncated to a few bytes", raws("short", raw[:100]), []string{"damaged"}, false},
		{"cut back below the pinned head, rewritten consistently", viaBolt("rewritten", func(tx *bolt.Tx) error {
			a := tx.Bucket([]byte("audit"))
			var prev []byte
			for seq := uint64(1); seq <= last; seq++ {
				if seq >= 2 {
					if err := a.Delete(key(seq)); err != nil {
						return err
					}
					continue
				}
				prev = bytes.Clone(a.Get(key(seq)))
			}
			h := regexp.MustCompile(`"hash":"([0-9a-f]{64})"`).FindSubmatch(prev)
			if err := tx.DeleteBucket([]byte("audit_by_time")); err != nil {
				return err
			}
			if _, err := tx.CreateBucket([]byte("audit_by_time")); err != nil {
				return err
			}
			head := append(append(key(1), make([]byte, 8)...), h[1]...)
			return tx.Bucket([]byte("meta")).Put([]byte("audit_head"), head)
		}), []string{"the pinned head " + pinned[:12] + " is not in the chain"}, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			args := []string{"audit", "verify", "--db", c.path}
			if c.pinned {
				args = append(args, "--expect-head", pinned)
			}
			out, errOut, code := runBin(t, args...)
			msg := out + errOut
			if code != 1 {
				t.Fatalf("exit %d, want 1:\n%s", code, msg)
			}
			for _, w := range append(c.want, c.path) {
				if !strings.Contains(msg, w) {
					t.Errorf("output lacks %q:\n%s", w, msg)
				}
			}
			if strings.Contains(msg, "panic") || strings.Contains(msg, "goroutine") {
				t.Fatalf("verify panicked:\n%s", msg)
			}
		})
	}
}

// TestServeRefusesAnAuditChainWithoutItsHead is issue 29's first defect the
// way the attacker found it: with meta/audit_head deleted from a real
// serve's database, serve started and wrote its next record as seq 1 over
// the oldest one. Now serve refuses to start, naming audit verify and audit
// repair-head; the repair (verified, audited, by the OS user) makes the
// chain verify again and serve start.
func TestServeRefusesAnAuditChainWithoutItsHead(t *testing.T) {
	// Waits on processes and the sim's reboots, not the CPU: runs beside the package's other slow tests.
	t.Parallel()
	slow(t)
	dir := t.TempDir()
	plugin, sum := buildEnginePlugin(t)
	b := servetest.Config{Dir: dir, Clusters: []servetest.Cluster{{Nodes: []string{"{name: cp-1, address: 127.0.0.1, role: controlplane, host: pve1}"},
		Endpoints: []string{"127.0.0.1"}, Talosconfig: []byte("context: e2e\n")}},
		Extra: fmt.Sprintf("plugins:\n  external: [{name: eng, path: %s, sha256: %s}]\n", plugin, sum)}.Bot(t, talosbotBinary(t))
	stop := func() {
		_ = b.Cmd.Process.Signal(syscall.SIGTERM)
		_ = b.Cmd.Wait()
	}
	probes := func(n int) {
		for i := range n {
			b.Command("alice", "ops", "/talos probe staging")
			b.WaitFor(fmt.Sprintf("probe %d", i+1), func() bool {
				done := 0
				for _, m := range b.Messages("ops") {
					if strings.Contains(m.Title, "probe") && strings.Contains(m.Title, "✅") {
						done++
					}
				}
				return done > i
			})
		}
	}
	b.Start()
	probes(2)
	stop()

	db := filepath.Join(dir, "data", "talosbot.db")
	records := func() map[uint64][]byte {
		d, err := bolt.Open(db, 0o600, &bolt.Options{ReadOnly: true, Timeout: 5 * time.Second})
		must(t, err)
		defer d.Close()
		out := map[uint64][]byte{}
		must(t, d.View(func(tx *bolt.Tx) error {
			return tx.Bucket([]byte("audit")).ForEach(func(k, v []byte) error {
				out[binary.BigEndian.Uint64(k)] = bytes.Clone(v)
				return nil
			})
		}))
		return out
	}
	before := records()
	if len(before) < 2 {
		t.Fatalf("only %d audit records after two probes", len(before))
	}
	// The attack: delete one key, with bbolt directly.
	d, err := bolt.Open(db, 0o600, &bolt.Options{Timeout: 5 * time.Second})
	must(t, err)
	must(t, d.Update(func(tx *bolt.Tx) error { return tx.Bucket([]byte("meta")).Delete([]byte("audit_head")) }))
	must(t, d.Close())

	// serve refuses to start: it exits non-zero with the way out, and never
	// answers /readyz (the unfixed bot did, and then overwrote record 1).
	cmd := exec.Command(talosbotBinary(t), "serve", "--config", b.Config)
	cmd.Env = append(os.Environ(), b.TokenEnv()...)
	var serveOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &serveOut, &serveOut
	must(t, cmd.Start())
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	var werr error
	b.WaitForWithin("serve to exit", time.Minute, func() bool {
		select {
		case werr = <-exited:
			return true
		default:
		}
		if resp, err := http.Get("http://" + b.Addr + "/readyz"); err == nil {
			resp.Body.Close()
			_ = cmd.Process.Kill()
			<-exited
			t.Fatalf("serve started on a chain without its head:\n%s", serveOut.String())
		}
		return false
	})
	var ee *exec.ExitError
	if !errors.As(werr, &ee) || ee.ExitCode() == 0 {
		t.Fatalf("serve: %v, want a non-zero exit\n%s", werr, serveOut.String())
	}
	for _, w := range []string{"the audit head (meta/audit_head) is missing", "talosbot audit verify --db " + db, "talosbot audit repair-head --db " + db} {
		if !strings.Contains(serveOut.String(), w) {
			t.Errorf("serve's refusal lacks %q:\n%s", w, serveOut.String())
		}
	}
	after := records()
	if len(after) != len(before) || !bytes.Equal(after[1], before[1]) {
		t.Fatalf("the refused start changed the trail: %d records (was %d), record 1:\n%s\nwas\n%s", len(after), len(before), after[1], before[1])
	}
	if out, errOut, code := runBin(t, "audit", "verify", "--db", db); code != 1 || !strings.Contains(errOut, "the audit head (seq and hash of the last record) is missing") {
		t.Fatalf("verify of the headless chain: exit %d\n%s%s", code, out, errOut)
	}

	// The repair: verified, then audited with the OS user.
	out, errOut, code := runBin(t, "audit", "repair-head", "--db", db)
	n := len(before)
	if code != 0 || !strings.Contains(out, "audit head repaired") || !strings.Contains(out, fmt.Sprintf("audit chain OK: %d records", n+1)) {
		t.Fatalf("repair-head: exit %d\n%s%s", code, out, errOut)
	}
	if out, errOut, code := runBin(t, "audit", "verify", "--db", db); code != 0 {
		t.Fatalf("verify after the repair: exit %d\n%s%s", code, out, errOut)
	}
	u, err := user.Current()
	must(t, err)
	out, errOut, code = runBin(t, "audit", "export", "--db", db, "--format", "csv", "--user", "os:"+u.Username)
	if code != 0 || strings.Count(out, "audit head repaired") != 1 || !strings.Contains(out, fmt.Sprintf("to=%d ", n)) || !strings.Contains(out, "from=missing") {
		t.Fatalf("the repair is not in the trail: exit %d\n%s%s", code, out, errOut)
	}
	// A second run has nothing to do and appends nothing.
	if out, _, code := runBin(t, "audit", "repair-head", "--db", db); code != 0 || !strings.Contains(out, "nothing to repair") {
		t.Fatalf("second repair-head: exit %d\n%s", code, out)
	}

	// serve starts on the repaired chain and appends after the repair.
	b.Start()
	probes(1)
	stop()
	out, errOut, code = runBin(t, "audit", "verify", "--db", db)
	if code != 0 {
		t.Fatalf("verify after the restart: exit %d\n%s%s", code, out, errOut)
	}
	final := records()
	if len(final) <= n+1 {
		t.Fatalf("%d records after the restart and a probe, want more than %d", len(final), n+1)
	}
	for seq, raw := range before {
		if !bytes.Equal(final[seq], raw) {
			t.Fatalf("record %d changed:\n%s\nwas\n%s", seq, final[seq], raw)
		}
	}
}
