package cluster

import (
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/siderolabs/talos/pkg/machinery/role"

	"github.com/talosbot/talosbot/internal/talosrbac"
	"github.com/talosbot/talosbot/plugins/sdk"
)

// The Talos API methods each disruptive operation calls, for CheckRole. An operation lists all
// it may need to finish: one it starts and cannot finish (a node drained and rebooted, then the
// boot id unreadable) is worse than one refused before it starts.
var (
	// GateMethods are the health gate's reads (R1/R2), run before and after every operation.
	GateMethods = []string{talosrbac.Version, talosrbac.ServiceList, talosrbac.EtcdStatus,
		talosrbac.EtcdMemberList, talosrbac.EtcdAlarmList, talosrbac.HealthCheck}
	// SnapshotMethods choose a member and take the verified etcd snapshot (R12); os:etcd:backup
	// is enough for them.
	SnapshotMethods = []string{talosrbac.EtcdStatus, talosrbac.EtcdSnapshot}
	// TalosUpgradeMethods are a node's upgrade on either path (legacy MachineService.Upgrade, or
	// ImageService.Pull + LifecycleService.Upgrade + Reboot), the boot-id read that proves the
	// reboot, events, the kubeconfig fetched through the Talos API to drain a v1.13+ node, and
	// the rollback offered when a node fails.
	TalosUpgradeMethods = []string{talosrbac.Upgrade, talosrbac.ImagePull, talosrbac.LifecycleUpgrade,
		talosrbac.Reboot, talosrbac.Read, talosrbac.Events, talosrbac.Kubeconfig, talosrbac.Rollback}
	// K8sUpgradeMethods read and apply the machine config (a sensitive resource) and pre-pull images.
	K8sUpgradeMethods = []string{talosrbac.ReadSensitive, talosrbac.ApplyConfiguration, talosrbac.MachineImagePull}
	// RollbackMethods roll one node back and follow its reboot.
	RollbackMethods = []string{talosrbac.Rollback, talosrbac.Read, talosrbac.Events}
	// RemoveMethods reset the node (graceful: drain and leave etcd).
	RemoveMethods = []string{talosrbac.Reset}
	// RecoverMethods are etcd disaster recovery: reset with an EPHEMERAL (or ETCD) wipe, upload,
	// bootstrap.
	RecoverMethods = []string{talosrbac.Reset, talosrbac.EtcdRecover, talosrbac.Bootstrap, talosrbac.EtcdSnapshot}
)

// TalosconfigRoles returns the Talos roles of the talosconfig's current context: the
// organisations of its client certificate, which apid maps to roles
// (pkg/grpc/middleware/authz/injector.go, role.Parse).
func TalosconfigRoles(talosconfig []byte) (role.Set, error) {
	cfg, err := ParseTalosconfig(talosconfig)
	if err != nil {
		return role.Zero, err
	}

	ctx, ok := cfg.Contexts[cfg.Context]
	if !ok || ctx == nil {
		return role.Zero, fmt.Errorf("the talosconfig has no context %q (check the talosconfig credential)", cfg.Context)
	}

	if ctx.Crt == "" {
		return role.Zero, errors.New("the talosconfig's context has no client certificate (check the talosconfig credential)")
	}

	der, err := base64.StdEncoding.DecodeString(ctx.Crt)
	if err != nil {
		return role.Zero, fmt.Errorf("the talosconfig's client certificate is not base64: %w", err)
	}

	block, _ := pem.Decode(der)
	if block == nil {
		return role.Zero, errors.New("the talosconfig's client certificate is not PEM (check the talosconfig credential)")
	}

	crt, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return role.Zero, fmt.Errorf("parse the talosconfig's client certificate: %w", err)
	}

	// Unknown organisations (old certificates carry "talos" or none) grant nothing.
	roles, _ := role.Parse(crt.Subject.Organization)

	return roles.Intersect(role.All), nil
}

// CheckRole refuses an operation whose talosconfig's roles cannot call every Talos method it
// needs (methods, e.g. TalosUpgradeMethods): the operation would otherwise fail part way with
// Talos's bare "PermissionDenied: not authorized". It names the role held, the calls refused
// and the role that allows them. operation says what would have run ("the upgrade").
// An unreadable talosconfig is left to the connection, which reports it.
func CheckRole(talosconfig []byte, operation string, methods ...[]string) error {
	held, err := TalosconfigRoles(talosconfig)
	if err != nil {
		return nil //nolint:nilerr // Connect reports an unreadable talosconfig with its fix
	}

	var denied []string

	// need is the roles that allow every denied call: what the fix names.
	need := role.MakeSet(role.Admin, role.Operator, role.Reader, role.EtcdBackup)

	for _, ms := range methods {
		for _, m := range ms {
			if talosrbac.Permits(held, m) || slices.Contains(denied, shortMethod(m)) { // rule:R23-role
				continue
			}

			denied = append(denied, shortMethod(m))
			need = need.Intersect(talosrbac.Allowed(m))
		}
	}

	if len(denied) == 0 {
		return nil
	}

	heldText := "no Talos role"
	if s := held.Strings(); len(s) > 0 {
		heldText = "role " + strings.Join(s, ", ")
	}

	// os:admin allows every call, so need always holds it.
	needText := strings.Join(need.Strings(), " or ")

	return sdk.Refuse("R23", fmt.Sprintf("the cluster's talosconfig has %s, and Talos refuses it %s, which %s needs (PermissionDenied: not authorized)",
		heldText, strings.Join(denied, ", "), operation),
		fmt.Sprintf("give the bot a talosconfig whose client certificate has %s (talosctl config new --roles %s bot-talosconfig), set it as the cluster's talosconfig credential; nothing was changed (docs/OPERATIONS.md, \"Talos role\")",
			needText, string(role.Admin)))
}

// shortMethod is "MachineService.Upgrade" for "/machine.MachineService/Upgrade".
func shortMethod(m string) string {
	if !strings.HasPrefix(m, "/") {
		return m
	}

	_, after, _ := strings.Cut(strings.TrimPrefix(m, "/"), ".")

	return strings.Replace(after, "/", ".", 1)
}
