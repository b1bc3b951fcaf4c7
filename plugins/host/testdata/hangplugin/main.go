// Command hangplugin is an external plugin that wedges, for the tests of a
// hung plugin. Where it hangs, it first starts a child process that inherits
// the plugin's stderr (as a plugin that shells out to a tool does) and
// writes "PLUGIN_PID CHILD_PID" to a file; the child sleeps on, holding the
// stderr pipe open even after the plugin itself is gone.
//
//   - `/talos hang [cluster] --pidfile FILE` never answers its Plan, deaf to
//     cancellation (pids to FILE).
//   - `/talos hang [cluster] --mode crash` exits, leaving the file
//     $HANG_MARKER behind; every later start of the plugin then hangs
//     before the go-plugin handshake (pids to $HANG_MARKER.pids).
package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"time"

	"github.com/talosbot/talosbot/plugins/sdk"
)

type hang struct{}

func main() {
	if marker := os.Getenv("HANG_MARKER"); marker != "" {
		if _, err := os.Stat(marker); err == nil {
			spawnAndHang(marker + ".pids")
		}
	}
	sdk.Serve(hang{})
}

// spawnAndHang starts the child, records the pids and never returns.
func spawnAndHang(pidfile string) {
	child := exec.Command("sleep", "3600")
	child.Stderr = os.Stderr // inherited: the pipe to the host stays open while the child lives
	if err := child.Start(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if pidfile != "" {
		_ = os.WriteFile(pidfile+".tmp", fmt.Appendf(nil, "%d %d", os.Getpid(), child.Process.Pid), 0o600)
		_ = os.Rename(pidfile+".tmp", pidfile)
	}
	for {
		time.Sleep(time.Hour) // hang (a sleeping goroutine, so the runtime sees no deadlock)
	}
}

func (hang) Describe(context.Context) (*sdk.Manifest, error) {
	return &sdk.Manifest{Name: "hang", Version: "0.0.1-test", Commands: []*sdk.Command{{
		Name:    "hang",
		Summary: "start a child and never answer (a test plugin)",
		Args: []*sdk.Arg{
			{Name: "cluster", Description: "cluster"},
			{Name: "pidfile", Flag: true, Description: "where to write the pids"},
			{Name: "mode", Flag: true, Description: "crash: exit, and hang at every later start"},
		},
		Effect: sdk.EffectReadOnly,
	}}}, nil
}

func (hang) Plan(_ context.Context, req *sdk.OperationRequest) (*sdk.OperationPlan, error) {
	if req.Args["mode"] == "crash" {
		_ = os.WriteFile(os.Getenv("HANG_MARKER"), []byte("crashed"), 0o600)
		os.Exit(3)
	}
	spawnAndHang(req.Args["pidfile"])
	return nil, nil
}

func (hang) Run(context.Context, *sdk.OperationRequest, sdk.Reporter) error {
	select {}
}
