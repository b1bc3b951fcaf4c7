package etcd

import (
	"fmt"
	"strings"

	machineapi "github.com/siderolabs/talos/pkg/machinery/api/machine"
)

// Explanations for the etcd failures an operator meets and the bot cannot fix itself: each says
// what Talos or etcd is doing and the fix, so that a gate line or a refusal is actionable on
// its own. They are appended to the probe lines that detect the failure (plugins/cluster/gate).

// ExplainAlarm explains an etcd member alarm.
func ExplainAlarm(alarm machineapi.EtcdMemberAlarm_AlarmType, address string) string {
	switch alarm {
	case machineapi.EtcdMemberAlarm_NOSPACE:
		return fmt.Sprintf(": etcd's database reached its space quota and every write is refused (\"mvcc: database space exceeded\"; the Kubernetes API cannot change anything). "+
			"Fix: defragment each member (talosctl -n %s etcd defrag), then clear the alarm (talosctl -n %s etcd alarm disarm); if the data really needs the space, raise quota-backend-bytes (cluster.etcd.extraArgs)", address, address)
	case machineapi.EtcdMemberAlarm_CORRUPT:
		return fmt.Sprintf(": etcd found the member's data inconsistent with the others. Fix: remove the member (talosctl etcd remove-member) and wipe it (talosctl -n %s reset --graceful=false --reboot --system-labels-to-wipe=EPHEMERAL) so it joins afresh", address)
	}
	return ""
}

// ExplainService explains an etcd service state that will not heal by waiting: a process
// that exits at start (Talos restarts it forever: it did not rejoin after a reboot), and a join
// that gave up after Talos's 30 minutes. node and address name the control plane.
func ExplainService(svc *machineapi.ServiceInfo, node, address string) string {
	if svc.GetId() != "etcd" {
		return ""
	}
	msg := svc.GetHealth().GetLastMessage()
	if evs := svc.GetEvents().GetEvents(); len(evs) > 0 {
		msg += " " + evs[len(evs)-1].GetMsg()
	}
	switch {
	case svc.GetState() == "Waiting" && strings.Contains(msg, "going to restart"):
		return fmt.Sprintf(": etcd on %s exits at start and Talos restarts it forever, so the member did not rejoin after its reboot. "+
			"Fix: read why (talosctl -n %s logs etcd); if the member was removed or its data is bad, remove it (talosctl etcd remove-member %s) and wipe it "+
			"(talosctl -n %s reset --graceful=false --reboot --system-labels-to-wipe=EPHEMERAL, or ETCD on v1.14 with a dedicated ETCD volume) so it joins afresh", node, address, node, address)
	case svc.GetState() == "Failed" && strings.Contains(msg, "failed to build initial etcd cluster"):
		return fmt.Sprintf(": etcd on %s gave up joining the cluster after Talos's 30 minutes (no member with a leader accepted it). "+
			"Fix: once the other members have a leader, reboot %s (talosctl -n %s reboot) to join again; if no member has a leader, recover etcd (/talos recover)", node, node, address)
	}
	return ""
}
