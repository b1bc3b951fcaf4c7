package talos

import (
	"strings"
	"testing"
	"time"

	machineapi "github.com/siderolabs/talos/pkg/machinery/api/machine"
)

func TestLandingDifferences(t *testing.T) {
	id, other := strings.Repeat("a", 64), strings.Repeat("b", 64)
	plan := LandingPlan{Version: "v1.13.9", Schematic: id, KernelArgs: []string{"net.ifnames=0", "console=tty0"}}
	base := "talos.platform=nocloud console=ttyS0 init_on_alloc=1"

	for _, tc := range []struct {
		name   string
		plan   LandingPlan
		landed Landed
		want   []string
	}{
		{"landed", plan, Landed{Schematic: id, Cmdline: base + " net.ifnames=0 console=tty0", BootedEntry: "Talos-v1.13.9.efi"}, nil},
		{"second install of the version", plan, Landed{Schematic: id, Cmdline: base + " net.ifnames=0 console=tty0", BootedEntry: "Talos-v1.13.9~2.efi"}, nil},
		{"GRUB: no booted entry to check", plan, Landed{Schematic: id, Cmdline: base + " net.ifnames=0 console=tty0"}, nil},
		{"every difference", plan, Landed{Schematic: other, Cmdline: base + " net.ifnames=01", BootedEntry: "Talos-v1.13.90.efi"}, []string{
			"schematic " + other + ", not the installer's " + id,
			"kernel arguments net.ifnames=0 console=tty0 declared in machine.install.extraKernelArgs are not on the kernel command line",
			"booted entry Talos-v1.13.90.efi, not Talos-v1.13.9",
		}},
		{"no schematic extension", plan, Landed{Cmdline: base + " net.ifnames=0 console=tty0"}, []string{"schematic none, not the installer's " + id}},
		{"installer not from Image Factory", LandingPlan{Version: "v1.13.9"}, Landed{Schematic: other, Cmdline: base}, nil},
	} {
		got := tc.plan.Differences(tc.landed)
		if strings.Join(got, "\n") != strings.Join(tc.want, "\n") {
			t.Errorf("%s: differences %q, want %q", tc.name, got, tc.want)
		}
	}
}

func TestNotReadyErrorNamesConditions(t *testing.T) {
	e := &NotReadyError{Node: "cp-2", Version: "v1.13.9", Timeout: 10 * time.Minute, Unmet: []*machineapi.MachineStatusEvent_MachineStatus_UnmetCondition{
		{Name: "services", Reason: "kubelet not healthy"},
		{Name: "staticPods", Reason: "kube-system/kube-scheduler-cp-2 pending"},
	}}
	want := "cp-2 booted v1.13.9 but is not ready: kubelet, static pods (Talos's unmet conditions after 10m0s: services: kubelet not healthy; staticPods: kube-system/kube-scheduler-cp-2 pending)"
	if e.Error() != want {
		t.Fatalf("got  %q\nwant %q", e.Error(), want)
	}
}
