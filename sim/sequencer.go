package sim

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/api/common"
	machineapi "github.com/siderolabs/talos/pkg/machinery/api/machine"
)

// This file is machined's sequencer as the sim plays it
// (internal/app/machined/pkg/runtime/v1alpha1/v1alpha1_controller.go, v1alpha1_priority_lock.go,
// internal/app/machined/pkg/runtime/sequencer.go): one sequence runs at a time; a request for a
// second one is acknowledged by the API and then either takes the lock over (cancelling the running
// sequence) or is refused with a LOCKED SequenceEvent that carries no actor id.

// Sequence names, as Talos prints them.
const (
	seqBoot         = "boot"
	seqReboot       = "reboot"
	seqReset        = "reset"
	seqUpgrade      = "upgrade"
	seqStageUpgrade = "stageUpgrade"
)

// seqTakeOver is runtime.sequenceTakeOver: running sequence → sequences that may take it over.
var seqTakeOver = map[string]map[string]bool{
	seqBoot:   {seqReboot: true, seqReset: true, seqUpgrade: true},
	seqReboot: {seqReboot: true},
	seqReset:  {seqReboot: true},
}

// errLocked is runtime.ErrLocked.
var errLocked = errors.New("locked")

// lockTimeout is the takeover timeout machined's Controller.Run gives the priority lock.
const lockTimeout = time.Minute

// errReboot is returned by the reboot task: the node goes down, nothing after it is published
// (machined exits on the RestartEvent).
var errReboot = errors.New("unix.Reboot(1234567)")

// task is one sequencer task; run nil means the task only publishes its events.
type task struct {
	name string
	run  func(ctx context.Context) error
}

// phase is a named group of tasks.
type phase struct {
	name  string
	tasks []task
}

// seqLock is the node's PriorityLock.
type seqLock struct {
	running string // "" = noop
	cancel  context.CancelFunc
	done    chan struct{} // closed when the running sequence released the lock
}

// lockSequence acquires the node's sequence lock for seq, cancelling a sequence it may take over
// (or any, with takeover). It publishes the LOCKED event itself.
func (n *node) lockSequence(ctx context.Context, seq string, takeover bool) (context.Context, func(), error) {
	deadline := time.NewTimer(lockTimeout)
	defer deadline.Stop()

	for {
		n.mu.Lock()
		cur := n.seq

		if cur.running == "" {
			seqCtx, cancel := context.WithCancel(ctx)
			done := make(chan struct{})
			n.seq = seqLock{running: seq, cancel: cancel, done: done}
			n.mu.Unlock()

			release := func() {
				cancel()
				n.mu.Lock()
				if n.seq.done == done {
					n.seq = seqLock{}
				}
				n.mu.Unlock()
				close(done)
			}

			return seqCtx, release, nil
		}

		n.mu.Unlock()

		if !seqTakeOver[cur.running][seq] && !takeover {
			// Published with context.Background() in Talos: no actor id.
			n.events.publish("", &machineapi.SequenceEvent{
				Sequence: seq,
				Action:   machineapi.SequenceEvent_NOOP,
				Error:    &common.Error{Code: common.Code_LOCKED, Message: "sequence not started: " + errLocked.Error()},
			})

			return nil, nil, errLocked
		}

		cur.cancel()

		select {
		case <-cur.done:
		case <-deadline.C:
			return nil, nil, errors.New("failed to acquire lock: timeout")
		case <-ctx.Done():
			return nil, nil, ctx.Err()
		}
	}
}

// runSequence is Controller.Run: lock, phases with their events, and the failure event.
// It returns errReboot when the sequence ended in a reboot (the caller takes the node down).
// stage, when not BOOTING, is the machine stage published once the sequence started (the
// MachineStatus controller follows the running sequence).
func (n *node) runSequence(ctx context.Context, actor, seq string, takeover bool, stage machineapi.MachineStatusEvent_MachineStage, phases func() []phase) error {
	ctx = context.WithValue(ctx, actorKey{}, actor)

	seqCtx, release, err := n.lockSequence(ctx, seq, takeover)
	if err != nil {
		return err
	}
	defer release()

	err = n.runPhases(seqCtx, actor, seq, stage, phases())
	if err == nil || errors.Is(err, errReboot) {
		return err
	}

	code := common.Code_FATAL
	if errors.Is(err, context.Canceled) {
		code = common.Code_CANCELED
	}

	n.events.publish(actor, &machineapi.SequenceEvent{
		Sequence: seq,
		Action:   machineapi.SequenceEvent_NOOP,
		Error:    &common.Error{Code: code, Message: "sequence failed: " + err.Error()},
	})

	return err
}

func (n *node) runPhases(ctx context.Context, actor, seq string, stage machineapi.MachineStatusEvent_MachineStage, phases []phase) error {
	n.events.publish(actor, &machineapi.SequenceEvent{Sequence: seq, Action: machineapi.SequenceEvent_START})

	if stage != machineapi.MachineStatusEvent_BOOTING {
		n.emitStage(stage, false)
	}

	for i, ph := range phases {
		n.events.publish(actor, &machineapi.PhaseEvent{Phase: ph.name, Action: machineapi.PhaseEvent_START})

		for j, t := range ph.tasks {
			n.events.publish(actor, &machineapi.TaskEvent{Task: t.name, Action: machineapi.TaskEvent_START})

			var err error
			if t.run != nil {
				err = t.run(ctx)
			}

			if errors.Is(err, errReboot) {
				// machined exits on the RestartEvent the reboot task publishes: the node goes
				// down before the STOP events reach anyone.
				return err
			}

			n.events.publish(actor, &machineapi.TaskEvent{Task: t.name, Action: machineapi.TaskEvent_STOP})

			if err != nil {
				n.events.publish(actor, &machineapi.PhaseEvent{Phase: ph.name, Action: machineapi.PhaseEvent_STOP})
				n.events.publish(actor, &machineapi.SequenceEvent{Sequence: seq, Action: machineapi.SequenceEvent_STOP})

				return fmt.Errorf("error running phase %d in %s sequence: task %d/%d: failed, %w", i+1, seq, j+1, len(ph.tasks), err)
			}
		}

		n.events.publish(actor, &machineapi.PhaseEvent{Phase: ph.name, Action: machineapi.PhaseEvent_STOP})

		if err := ctx.Err(); err != nil {
			n.events.publish(actor, &machineapi.SequenceEvent{Sequence: seq, Action: machineapi.SequenceEvent_STOP})

			return err
		}
	}

	n.events.publish(actor, &machineapi.SequenceEvent{Sequence: seq, Action: machineapi.SequenceEvent_STOP})

	return nil
}

// noop is a task that only publishes its events.
func noop(name string) task { return task{name: name} }

func ph(name string, tasks ...task) phase { return phase{name: name, tasks: tasks} }

// stopAllPhases is v1alpha1_sequencer.go's stopAllPhaselist (metal mode).
func stopAllPhases(kexec bool) []phase {
	out := []phase{
		ph("stopServices", noop("stopServicesForUpgrade")),
		ph("umount", noop("unmountPodMounts")),
		ph("unmountBind", noop("unmountSystemDiskBindMounts")),
		ph("unmountSystem", noop("unmountEphemeralPartition")),
		ph("volumeFinalize", noop("teardownLifecycle")),
	}

	if kexec {
		out = append(out, ph("kexec", noop("kexecPrepare")))
	}

	return append(out, ph("stopEverything", noop("stopAllServices")))
}

// bootPhases is Sequencer.Boot (metal mode). startAllServices takes startup: services come up
// over that time, and a client reconnecting to the rebooted node sees the boot happen.
func bootPhases(startup time.Duration) []phase {
	return []phase{
		ph("memorySizeCheck", noop("memorySizeCheck")),
		ph("diskSizeCheck", noop("diskSizeCheck")),
		ph("env", noop("setUserEnvVars"), noop("waitForCARoots")),
		ph("dbus", noop("startDBus")),
		ph("ephemeral", noop("mountEphemeralPartition")),
		ph("udevSetup", noop("writeUdevRules")),
		ph("userDisks", noop("mountUserDisks")),
		ph("userSetup", noop("writeUserFiles")),
		ph("startEverything", task{name: "startAllServices", run: func(ctx context.Context) error {
			t := time.NewTimer(startup)
			defer t.Stop()

			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-t.C:
				return nil
			}
		}}),
	}
}
