package releases

import (
	"fmt"
	"strings"
)

// How a breaking change is handled before an upgrade that crosses it.
const (
	// CheckRefuse: the target pre-flight reads the cluster and refuses the
	// plan when the cluster is affected (plugins/talosupgrade/preflight.go).
	CheckRefuse = "refuse"
	// CheckWarn: the pre-flight reads the cluster and warns on the card.
	CheckWarn = "warn"
	// CheckListed: nothing in the cluster tells whether it is affected; the
	// change is listed on the plan, in `/talos releases` and in notices.
	CheckListed = "listed"
)

// Change is one breaking change a Talos minor brings, as its release
// notes (or, for #13967, the maintainers) describe it.
type Change struct {
	// ID names the change in docs/UPGRADES.md and in the pre-flight.
	ID string
	// Minor is the Talos minor that brings it (Patch 0).
	Minor Version
	// Title is the short name, What what breaks, Action what to do.
	Title, What, Action string
	// Source is where it was read (the tag of hack/release.toml, an issue).
	Source string
	// Check is CheckRefuse, CheckWarn or CheckListed.
	Check string
}

// Line is the change for chat: "v1.14 etcd metrics on port 2383: …".
func (c Change) Line() string {
	return fmt.Sprintf("%s %s: %s", c.Minor.MinorTag(), c.Title, c.What)
}

// The sources of the table, cited in docs/UPGRADES.md. v1.14.1's
// hack/release.toml keeps only its component updates (previous = v1.14.0),
// so the v1.14 notes are read at the v1.14.0-rc.1 tag of the mirror, the
// newest tag that carries them; v1.14.1's module confirms the code paths.
const (
	notes113 = "hack/release.toml at v1.13.0"
	notes114 = "hack/release.toml at v1.14.0-rc.1"
)

// BreakingChanges is the table of breaking changes per Talos minor,
// ascending by minor. It returns a new slice on every call: callers may
// filter it, and nothing in the package changes after start.
func BreakingChanges() []Change {
	v113, v114 := Version{Major: 1, Minor: 13, Patch: 0}, Version{Major: 1, Minor: 14, Patch: 0}
	return []Change{
		{ID: "lifecycle-extra-kernel-args", Minor: v113, Check: CheckRefuse,
			Title:  "LifecycleService upgrades drop extraKernelArgs",
			What:   "an upgrade of a v1.13+ node goes through LifecycleService.Upgrade, which does not pass machine.install.extraKernelArgs to the installer (GRUB with grubUseUKICmdline: false) and still reports success",
			Action: "move the arguments into the schematic (Image Factory customization.extraKernelArgs), declare it, and remove machine.install.extraKernelArgs in a same-version Terraform change",
			Source: "siderolabs/talos#13967, siderolabs/docs#699; [notes.install_upgrade_api] in " + notes113},
		{ID: "interactive-installer-removed", Minor: v113, Check: CheckListed,
			Title:  "interactive installer removed",
			What:   "`talosctl apply-config --mode=interactive` and the GenerateConfiguration API are gone",
			Action: "install from pre-generated machine configuration",
			Source: "[notest.interactive-installer] in " + notes113},
		{ID: "nvidia-cdi", Minor: v113, Check: CheckListed,
			Title:  "NVIDIA GPUs through CDI",
			What:   "NVIDIA GPU support switched to the Container Device Interface",
			Action: "configure the GPUs through the gpu-operator Helm chart as the v1.13 upgrade notes say",
			Source: "[notes.nvidia] in " + notes113},
		{ID: "factory-installer", Minor: v114, Check: CheckRefuse,
			Title:  "installer only from Image Factory",
			What:   "ghcr.io/siderolabs/installer is no longer published; only Image Factory installers exist for v1.14 and later",
			Action: "move machine.install.image to the node's Image Factory installer (factory.talos.dev/<platform>-installer/<schematic>) in a same-version Terraform change (R13)",
			Source: "[notes.defaultInstaller] in " + notes114},
		{ID: "etcd-3.6", Minor: v114, Check: CheckRefuse,
			Title:  "etcd 3.6 required",
			What:   "Talos v1.14 is compatible with etcd 3.6.x only as the starting version and runs 3.7 by default",
			Action: "run etcd 3.6 first (unpin cluster.etcd.image, or pin a 3.6.x image) on the running Talos",
			Source: "[notes.etcd] in " + notes114 + "; DefaultEtcdVersion 3.7.1 in pkg/machinery/constants at v1.14.1"},
		{ID: "etcd-metrics-port", Minor: v114, Check: CheckWarn,
			Title:  "etcd metrics on port 2383",
			What:   "etcd serves /metrics and /health on port 2383; 2379 serves gRPC only",
			Action: "scrape etcd on 2383 (same client mTLS), or keep a custom cluster.etcd.extraArgs listen-metrics-urls",
			Source: "[notes.etcd] in " + notes114 + "; listen-client-http-urls in internal/app/machined/pkg/system/services/etcd.go at v1.14.1"},
		{ID: "tls13", Minor: v114, Check: CheckRefuse,
			Title:  "TLS 1.3 minimum for etcd and kube-apiserver",
			What:   "etcd and kube-apiserver accept TLS 1.3 only; tls-min-version (and etcd's listen-client-http-urls) in their extraArgs is refused, so the component does not start; cipher-suite settings are ignored",
			Action: "remove tls-min-version from cluster.apiServer.extraArgs and cluster.etcd.extraArgs (and listen-client-http-urls from etcd's), and make sure every client speaks TLS 1.3",
			Source: "[notes.tls13] in " + notes114 + "; deny lists in internal/app/machined/pkg/system/services/etcd.go and internal/app/machined/pkg/controllers/k8s/control_plane_final.go at v1.14.1"},
		{ID: "workload-isolation-iscsi", Minor: v114, Check: CheckWarn,
			Title:  "workload isolation stops in-tree iSCSI",
			What:   "with workload isolation (sandboxd, SecurityProfileConfig workloadIsolation: true, the default of new clusters) the in-tree iSCSI volume plugin cannot reach iscsid; in-tree volume plugins are deprecated",
			Action: "move iSCSI volumes to a CSI driver (csi-driver-iscsi, democratic-csi) before enabling workload isolation",
			Source: "[notes.sandboxd] and [notes.kubelet] in " + notes114},
		{ID: "flexvolume-removed", Minor: v114, Check: CheckWarn,
			Title:  "FlexVolume host path removed",
			What:   "Talos no longer provisions /usr/libexec/kubernetes, the FlexVolume executable path",
			Action: "move FlexVolume volumes to a CSI driver",
			Source: "[notes.flexvolume] in " + notes114},
		{ID: "apply-config-reboot-removed", Minor: v114, Check: CheckListed,
			Title:  "apply-config --mode=reboot removed",
			What:   "configuration is applied without a reboot; `--mode=reboot` is gone",
			Action: "apply, then reboot explicitly where the documentation says a change needs it",
			Source: "[notes.apply_config] in " + notes114},
		{ID: "dedicated-etcd-volume", Minor: v114, Check: CheckListed,
			Title:  "etcd on its own volume",
			What:   "with a dedicated ETCD volume, wiping EPHEMERAL no longer clears etcd data",
			Action: "wipe the ETCD volume to reset etcd (`/talos recover --guide` names the volume)",
			Source: "[notes.systemVolumes] in " + notes114},
		{ID: "flannel-nftables", Minor: v114, Check: CheckListed,
			Title:  "Flannel uses nftables",
			What:   "Flannel runs with EnableNFTables (native nftables, not iptables-nft)",
			Action: "review host firewall rules that expect Flannel's iptables chains",
			Source: "[notes.flannel] in " + notes114},
		{ID: "nri-enabled", Minor: v114, Check: CheckListed,
			Title:  "containerd NRI enabled",
			What:   "NRI is no longer disabled in the CRI containerd",
			Action: "add a CRICustomizationConfig disabling NRI to keep the old behaviour",
			Source: "[notes.cri-nri] in " + notes114},
		{ID: "send-redirects", Minor: v114, Check: CheckListed,
			Title:  "ICMP send_redirects off",
			What:   "net.ipv4.conf.{all,default}.send_redirects default to 0",
			Action: "nodes acting as L3 gateways that rely on redirects set them in machine.sysctls",
			Source: "[notes.sendRedirects] in " + notes114},
	}
}

// Crossed are the breaking changes an upgrade from → to enters: those of
// every minor after from's, up to and including to's, in table order.
// Nothing is crossed within a minor or going down.
func Crossed(from, to Version) []Change {
	var out []Change
	for _, c := range BreakingChanges() {
		if c.Minor.Major == to.Major && c.Minor.Compare(Version{Major: from.Major, Minor: from.Minor, Patch: 0}) > 0 && c.Minor.Compare(Version{Major: to.Major, Minor: to.Minor, Patch: 0}) <= 0 {
			out = append(out, c)
		}
	}
	return out
}

// CrossedLines say, one line per minor, which breaking changes lie
// between from and to: "v1.14 breaking changes: installer only from
// Image Factory; etcd 3.6 required; …". None when nothing is crossed.
func CrossedLines(from, to Version) []string {
	var out []string
	var minor Version
	var titles []string
	flush := func() {
		if len(titles) > 0 {
			out = append(out, fmt.Sprintf("%s breaking changes: %s", minor.MinorTag(), strings.Join(titles, "; ")))
		}
		titles = nil
	}
	for _, c := range Crossed(from, to) {
		if c.Minor != minor {
			flush()
			minor = c.Minor
		}
		titles = append(titles, c.Title)
	}
	flush()
	return out
}

// ChangeByID is the table's change with this id.
func ChangeByID(id string) (Change, bool) {
	for _, c := range BreakingChanges() {
		if c.ID == id {
			return c, true
		}
	}
	return Change{}, false
}
