package snapshot

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/talosbot/talosbot/internal/offsite"
	"github.com/talosbot/talosbot/internal/offsite/s3test"
	"github.com/talosbot/talosbot/plugins/sdk"
	"github.com/talosbot/talosbot/plugins/sdk/sdktest"
)

// startS3 runs gofakes3 on loopback with bucket "snaps".
func startS3(t *testing.T) string {
	t.Helper()
	endpoint, _ := s3test.Start(t, "snaps")
	return endpoint
}

func withOffsite(req *sdk.OperationRequest, endpoint string, keep int32, protected ...string) {
	req.Evidence.Backups = &sdk.Backups{Dir: req.Evidence.Backups.GetDir(),
		Local:              &sdk.Retention{Keep: 1},
		OffsiteRetention:   &sdk.Retention{Keep: keep},
		Offsite:            &sdk.Offsite{Endpoint: endpoint, Bucket: "snaps", Prefix: "tb/", Region: "us-east-1", Insecure: true},
		ProtectedSnapshots: protected,
	}
	req.Credentials.OffsiteAccessKeyID, req.Credentials.OffsiteSecretAccessKey = []byte("key"), []byte("secret")
}

func TestOffsiteCopyAndRetention(t *testing.T) {
	c := startSim(t, 1)
	endpoint := startS3(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir := t.TempDir()
	p := &Plugin{now: fixedClock(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))}
	var named, newest string
	for i := range 4 {
		req := request(c, dir, 0)
		if i == 0 {
			withOffsite(req, endpoint, 1)
		} else {
			withOffsite(req, endpoint, 1, named)
		}
		rec, err := sdktest.Run(ctx, p, req, nil)
		if err != nil || !rec.FinalResult().OK {
			t.Fatalf("run %d: %v %v", i, err, rec.FinalResult())
		}
		if i == 0 {
			named = rec.Artifacts()[0].ID
		}
		newest = rec.Artifacts()[0].ID
		if !strings.Contains(strings.Join(rec.FinalResult().Lines, "\n"), "☁️ off-site: s3://snaps/tb/staging/") {
			t.Fatalf("run %d: no off-site line in %v", i, rec.FinalResult().Lines)
		}
	}
	st, err := offsite.New(offsite.Config{Endpoint: endpoint, Bucket: "snaps", Prefix: "tb/", Region: "us-east-1", Insecure: true, AccessKeyID: "k", SecretAccessKey: "s"})
	if err != nil {
		t.Fatal(err)
	}
	objs, err := st.List(ctx, "staging")
	if err != nil {
		t.Fatal(err)
	}
	// Off-site keep=1 keeps the newest; the record-named first one stays too.
	if len(objs) != 2 || objs[0].ID != named || objs[1].ID != newest {
		t.Fatalf("off-site holds %+v, want %s and the newest", objs, named)
	}
	for _, o := range objs {
		if err := st.Verify(ctx, o.Key); err != nil {
			t.Fatal(err)
		}
	}
}

func TestFailedUploadFailsAndKeepsLocalCopy(t *testing.T) {
	c := startSim(t, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir := t.TempDir()
	req := request(c, dir, 0)
	withOffsite(req, "127.0.0.1:1", 1) // nothing listens there
	rec, _ := sdktest.Run(ctx, New(), req, nil)
	res := rec.FinalResult()
	if res.OK || !strings.Contains(res.Error, "off-site copy failed, so the snapshot is not off-cluster (R12)") ||
		!strings.Contains(res.Error, "run the command again") {
		t.Fatalf("want a failed result that names R12 and the next step, got %v", res)
	}
	files, _ := filepath.Glob(filepath.Join(dir, "staging", "*.db"))
	if len(files) != 1 || !strings.Contains(res.Error, "kept at "+files[0]) {
		t.Fatalf("local copy %v not kept or not named in %q", files, res.Error)
	}
	if _, err := os.Stat(files[0]); err != nil {
		t.Fatal(err)
	}
	var failed bool
	for _, s := range rec.Steps() {
		if s.StepID == "snapshot-offsite" && s.Status == sdk.StepFailed {
			failed = true
		}
	}
	if !failed {
		t.Fatalf("snapshot-offsite step not failed: %v", rec.Steps())
	}
}

func TestListShowsLocalOffsiteRecordsAndLastDrill(t *testing.T) {
	c := startSim(t, 1)
	endpoint := startS3(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir := t.TempDir()
	p := &Plugin{now: fixedClock(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))}
	req := request(c, dir, 0)
	withOffsite(req, endpoint, 5)
	rec, err := sdktest.Run(ctx, p, req, nil)
	if err != nil || !rec.FinalResult().OK {
		t.Fatalf("snapshot: %v %v", err, rec.FinalResult())
	}
	id := rec.Artifacts()[0].ID
	list := request(c, dir, 0)
	list.Command = ListCommand
	withOffsite(list, endpoint, 5, id)
	list.Evidence.Backups.ProtectedBy = map[string]string{id: "op-upgrade-7"}
	list.Evidence.Backups.LastDrill = "op-drill-3 succeeded 2026-03-01T11:00:00Z"
	rec, err = sdktest.Run(ctx, p, list, nil)
	if err != nil || !rec.FinalResult().OK {
		t.Fatalf("list: %v %v", err, rec.FinalResult())
	}
	text := strings.Join(rec.FinalResult().Lines, "\n")
	for _, want := range []string{"💾 local (", "☁️ off-site (s3://snaps/tb/staging/), 1,", id + " · ", "not encrypted · 🔒 kept by record op-upgrade-7",
		"🧪 last restore drill: op-drill-3 succeeded"} {
		if !strings.Contains(text, want) {
			t.Fatalf("list lacks %q:\n%s", want, text)
		}
	}
}

// TestNoOffsiteIsSkippedNotDone: without off-site storage the off-site step
// did not run, so it is SKIPPED with a ⚠️ detail (the thread shows it),
// never OK: "✅ done … skipped: no off-site storage" hid that the only copy
// is on the bot's disk (issue 31).
func TestNoOffsiteIsSkippedNotDone(t *testing.T) {
	c := startSim(t, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rec, _ := sdktest.Run(ctx, New(), request(c, t.TempDir(), 0), nil)
	if res := rec.FinalResult(); !res.OK {
		t.Fatalf("snapshot failed: %s %s", res.Summary, res.Error)
	}
	var seen bool
	for _, s := range rec.Steps() {
		if s.StepID != "snapshot-offsite" || s.Status == sdk.StepRunning {
			continue
		}
		seen = true
		if s.Status != sdk.StepSkipped || !strings.HasPrefix(s.Detail, "⚠️ ") ||
			!strings.Contains(s.Detail, "the only copy is on the bot's disk") {
			t.Errorf("off-site step = %s %q, want SKIPPED with a ⚠️ detail", s.Status, s.Detail)
		}
	}
	if !seen {
		t.Fatalf("no off-site step: %v", rec.Steps())
	}
}
