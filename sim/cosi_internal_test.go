package sim

import (
	"context"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/api/common"
	machineapi "github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/resources/runtime"
)

// TestResourceSetsUnique: every served type is registered once (a second registration would
// fail every boot's state) and every node writes each resource once per refresh.
func TestResourceSetsUnique(t *testing.T) {
	t.Parallel()
	seen := map[string]bool{}

	for _, r := range cosiResourceTypes() {
		typ := r.ResourceDefinition().Type
		if seen[typ] {
			t.Fatalf("resource type %s is served twice", typ)
		}

		seen[typ] = true
	}

	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()

	if _, err := newBootState(ctx); err != nil {
		t.Fatalf("boot state: %v", err)
	}

	c, err := Start(ctx, Options{Dir: t.TempDir(), ControlPlanes: 1, Workers: 1})
	if err != nil {
		t.Fatal(err)
	}

	defer c.Close() //nolint:errcheck

	for _, n := range c.nodes {
		keys := map[resourceKey]bool{}

		for _, d := range n.desiredResources(ctx, &configCache{}) {
			md := d.res.Metadata()
			key := resourceKey{md.Namespace(), md.Type(), md.ID()}

			if keys[key] {
				t.Fatalf("%s writes %s twice", n.info.Name, md)
			}

			keys[key] = true

			if !seen[md.Type()] {
				t.Fatalf("%s writes %s, a type that is not registered", n.info.Name, md)
			}
		}
	}
}

// TestFoldStage: the machine stage follows the runtime events as MachineStatusController's
// event watcher folds them.
func TestFoldStage(t *testing.T) {
	t.Parallel()
	seqEv := func(seq string, a machineapi.SequenceEvent_Action, fatal bool) simEvent {
		ev := &machineapi.SequenceEvent{Sequence: seq, Action: a}
		if fatal {
			ev.Error = &common.Error{Code: common.Code_FATAL, Message: "boom"}
		}

		return simEvent{payload: ev}
	}
	phaseEv := func(name string) simEvent {
		return simEvent{payload: &machineapi.PhaseEvent{Phase: name, Action: machineapi.PhaseEvent_START}}
	}

	start, stop, noop := machineapi.SequenceEvent_START, machineapi.SequenceEvent_STOP, machineapi.SequenceEvent_NOOP

	for _, tc := range []struct {
		name   string
		events []simEvent
		want   runtime.MachineStage
	}{
		{"nothing yet", nil, runtime.MachineStageUnknown},
		{"booting", []simEvent{seqEv("boot", start, false)}, runtime.MachineStageBooting},
		{"booted", []simEvent{seqEv("boot", start, false), seqEv("boot", stop, false)}, runtime.MachineStageRunning},
		{"boot failed", []simEvent{seqEv("boot", start, false), seqEv("boot", stop, true)}, runtime.MachineStageBooting},
		{"upgrading", []simEvent{seqEv("boot", start, false), seqEv("boot", stop, false), seqEv("upgrade", start, false)}, runtime.MachineStageUpgrading},
		{"upgrade kexec", []simEvent{seqEv("upgrade", start, false), phaseEv("kexec")}, runtime.MachineStageRebooting},
		{"kexec of a reboot is no stage change", []simEvent{seqEv("reboot", start, false), phaseEv("kexec")}, runtime.MachineStageRebooting},
		{"failed upgrade reboots", []simEvent{seqEv("upgrade", start, false), seqEv("upgrade", stop, false), seqEv("upgrade", noop, true)}, runtime.MachineStageRebooting},
		{"fatal while shutting down", []simEvent{seqEv("shutdown", start, false), seqEv("shutdown", noop, true)}, runtime.MachineStageShuttingDown},
		{"upgrade stop keeps the stage", []simEvent{seqEv("upgrade", start, false), seqEv("upgrade", stop, false)}, runtime.MachineStageUpgrading},
		{"resetting", []simEvent{seqEv("reset", start, false)}, runtime.MachineStageResetting},
		{"maintenance", []simEvent{seqEv("boot", start, false), {payload: &machineapi.TaskEvent{Task: "runningMaintenance", Action: machineapi.TaskEvent_START}}}, runtime.MachineStageMaintenance},
	} {
		if got := foldStage(tc.events); got != tc.want {
			t.Errorf("%s: stage %s, want %s", tc.name, got, tc.want)
		}
	}
}
