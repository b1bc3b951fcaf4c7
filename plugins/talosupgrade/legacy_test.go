package talosupgrade

import (
	"strings"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/constants"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/talosbot/talosbot/plugins/sdk/sdktest"
)

// TestLegacyUpgradeTakesTalosUpgradeMutex: on the legacy Upgrade API the
// bot sends preserve as talosctl does (false), so Talos itself takes the
// cluster's etcd upgrade mutex and runs ValidateForUpgrade on a control
// plane. While another upgrader holds the mutex, Talos refuses the upgrade
// and the roll stops with the control plane untouched.
func TestLegacyUpgradeTakesTalosUpgradeMutex(t *testing.T) {
	t.Parallel()
	slow(t)
	e := start(t, 3, 0, false, nil)
	ctx := ctxFor(t, 3*time.Minute)
	cli, err := e.c.Etcd().Client(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close() //nolint:errcheck
	sess, err := concurrency.NewSession(cli, concurrency.WithTTL(60))
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close() //nolint:errcheck
	mu := concurrency.NewMutex(sess, constants.EtcdTalosEtcdUpgradeMutex)
	if err := mu.Lock(ctx); err != nil {
		t.Fatal(err)
	}

	rec, _ := sdktest.Run(ctx, &Plugin{}, e.request(t, target), nil)
	res := rec.FinalResult()
	if res.OK || !strings.Contains(res.Error, "upgrade mutex") {
		t.Fatalf("want Talos's upgrade mutex refusal, got %v\n%s", res, dump(rec.Steps()))
	}
	for _, n := range e.names() {
		if v := e.c.NodeVersion(n); v != from {
			t.Fatalf("%s runs %s while another upgrader held the mutex", n, v)
		}
	}
}
