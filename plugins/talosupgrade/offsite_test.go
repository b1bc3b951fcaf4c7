package talosupgrade

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/talosbot/talosbot/plugins/sdk"
	"github.com/talosbot/talosbot/plugins/sdk/sdktest"
)

// Issue 19: a failed off-site upload fails the pre-upgrade snapshot step
// (R12 is not met), touches no node, keeps the verified local copy and says
// what to do next.
func TestFailedOffsiteUploadStopsTheUpgrade(t *testing.T) {
	t.Parallel()
	slow(t)
	e := start(t, 1, 1, false, nil)
	ctx := ctxFor(t, 2*time.Minute)
	req := e.request(t, target)
	req.Evidence.Backups = &sdk.Backups{Dir: req.Evidence.Backups.GetDir(), Offsite: &sdk.Offsite{Endpoint: "127.0.0.1:1", Bucket: "snaps", Region: "us-east-1", Insecure: true}}
	req.Credentials.OffsiteAccessKeyID, req.Credentials.OffsiteSecretAccessKey = []byte("k"), []byte("s")
	rec, _ := sdktest.Run(ctx, &Plugin{}, req, nil)
	res := rec.FinalResult()
	text := res.Summary + " " + res.Error
	if res.OK || !strings.Contains(text, "nothing was changed") || !strings.Contains(text, "not off-cluster (R12)") ||
		!strings.Contains(text, "run the command again") {
		t.Fatalf("want the upgrade stopped at the snapshot step with R12 and the next step, got %v", res)
	}
	for _, n := range e.names() {
		if c := e.upgradeCalls(n); c != 0 {
			t.Fatalf("%s got %d upgrade calls after a failed off-site copy", n, c)
		}
	}
	local, _ := filepath.Glob(filepath.Join(req.Evidence.Backups.GetDir(), "*", "*.db"))
	if len(local) != 1 || !strings.Contains(text, "kept at "+local[0]) {
		t.Fatalf("local copy %v not kept or not named in %q", local, text)
	}
}
