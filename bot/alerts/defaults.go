package alerts

import "github.com/talosbot/talosbot/config"

// DefaultRules are runbook suggestions for the common etcd, node and Talos
// alerts (kube-prometheus / etcd-mixin / node-exporter names). The demo
// ships them; a real config can copy them into alerts.rules.
func DefaultRules() []config.AlertRule {
	health := "/talos health {{cluster}}"
	status := "/talos status {{cluster}}"
	return []config.AlertRule{
		{
			Name:     "etcd-no-leader",
			MatchRE:  map[string]string{"alertname": "etcdNoLeader|EtcdNoLeader"},
			Text:     "etcd on {{cluster}} has no leader: the control plane cannot write. Run the health gate to see which members disagree; do not start any lifecycle operation until every member reports the same leader (R3).",
			Runbook:  "https://www.talos.dev/v1.12/advanced/etcd-maintenance/",
			Commands: []string{health, status},
		},
		{
			Name:     "etcd-members-down",
			MatchRE:  map[string]string{"alertname": "etcdMembersDown|etcdInsufficientMembers|EtcdMembersDown|EtcdInsufficientMembers"},
			Text:     "etcd members are down on {{cluster}}. Check quorum with the health gate. Never remove a control-plane node while quorum is at risk (R9); take a snapshot while a healthy member remains (R12).",
			Runbook:  "https://www.talos.dev/v1.12/advanced/etcd-maintenance/",
			Commands: []string{health, "/talos snapshot {{cluster}}"},
		},
		{
			Name:     "etcd-space",
			MatchRE:  map[string]string{"alertname": "etcdDatabaseQuotaLowSpace|etcdBackendQuotaLowSpace|etcdDatabaseHighFragmentationRatio|etcdExcessiveDatabaseGrowth"},
			Text:     "etcd on {{cluster}} is running out of space. Take a verified snapshot first, then defragment one member at a time (talosctl etcd defrag).",
			Runbook:  "https://www.talos.dev/v1.12/advanced/etcd-maintenance/#space-quota",
			Commands: []string{"/talos snapshot {{cluster}}", health},
		},
		{
			Name:     "etcd-slow",
			MatchRE:  map[string]string{"alertname": "etcdHighFsyncDurations|etcdHighCommitDurations|etcdHighNumberOfLeaderChanges|etcdHighNumberOfFailedGRPCRequests"},
			Text:     "etcd on {{cluster}} is slow or unstable (disk latency or leader churn). Check the members with the health gate before any upgrade; an upgrade now would make it worse.",
			Runbook:  "https://etcd.io/docs/v3.6/faq/#what-does-the-etcd-warning-apply-entries-took-too-long-mean",
			Commands: []string{health},
		},
		{
			Name:     "node-not-ready",
			MatchRE:  map[string]string{"alertname": "KubeNodeNotReady|KubeNodeUnreachable|KubeletDown|NodeDown"},
			Text:     "A node of {{cluster}} is not ready. Run the health gate. If the node is gone for good, replace it: reset it gracefully and delete the Kubernetes node while the inventory still has it, then remove it from Terraform (R8); for a control plane, only while quorum survives (R9).",
			Runbook:  "https://www.talos.dev/v1.12/talos-guides/howto/scaling-down/",
			Commands: []string{health, status},
		},
		{
			Name:     "node-resources",
			MatchRE:  map[string]string{"alertname": "NodeFilesystemSpaceFillingUp|NodeFilesystemAlmostOutOfSpace|NodeMemoryHighUtilization|NodeClockNotSynchronising|NodeClockSkewDetected"},
			Text:     "A node of {{cluster}} is short of disk, memory or time sync. Fix it before any upgrade: an upgrade needs free space on EPHEMERAL and agreeing clocks.",
			Runbook:  "https://www.talos.dev/v1.12/learn-more/troubleshooting/",
			Commands: []string{health},
		},
		{
			Name:     "control-plane-down",
			MatchRE:  map[string]string{"alertname": "KubeAPIDown|KubeAPIErrorBudgetBurn|KubeControllerManagerDown|KubeSchedulerDown"},
			Text:     "The Kubernetes control plane of {{cluster}} is unhealthy. Talos keeps working while Kubernetes is down: check the control-plane services with the health gate.",
			Runbook:  "https://www.talos.dev/v1.12/learn-more/troubleshooting/",
			Commands: []string{health, status},
		},
		{
			Name:     "talos",
			MatchRE:  map[string]string{"alertname": "Talos.*"},
			Text:     "Talos reports a problem on {{cluster}}. Run the health gate to see every node's Talos version and services.",
			Runbook:  "https://www.talos.dev/v1.12/learn-more/troubleshooting/",
			Commands: []string{health},
		},
		{
			Name:     "flux",
			MatchRE:  map[string]string{"alertname": "Flux.*|GitOps.*"},
			Text:     "Flux is not reconciling on {{cluster}}. A stalled Flux stops every lifecycle operation (R3) until its Kustomizations and HelmReleases are Ready again.",
			Runbook:  "https://fluxcd.io/flux/cheatsheets/troubleshooting/",
			Commands: []string{health},
		},
	}
}
