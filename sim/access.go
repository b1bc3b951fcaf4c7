package sim

import (
	"context"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"slices"
	"strings"

	"github.com/siderolabs/talos/pkg/machinery/client/config"
	"github.com/siderolabs/talos/pkg/machinery/constants"
	"github.com/siderolabs/talos/pkg/machinery/role"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	talosx509 "github.com/siderolabs/crypto/x509"
)

// Talos's role-based access control, as the sim enforces it.
//
// apid (internal/app/apid/service.go, authz.Injector in Enabled mode) takes the caller's roles
// from its client certificate's organisations (role.Parse), or, when the caller holds
// os:impersonator (another apid forwarding a request), from the "talos-role" metadata; it sends
// them on in that metadata. machined (internal/app/machined/pkg/system/services/machined.go,
// authz.Injector in MetadataOnly mode and authz.Authorizer) reads only the metadata and checks
// the method against its rules table, falling back to os:admin for a method not listed; a
// caller without an allowed role gets PermissionDenied "not authorized"
// (pkg/grpc/middleware/authz/authorizer.go, ErrNotAuthorized). Sensitive resources (the machine
// config) are refused the same way to non-admins (internal/app/resources/access.go).

// roleMetadataKey is the metadata key apid and machined pass roles in.
const roleMetadataKey = constants.APIAuthzRoleMetadataKey

// notAuthorized is Talos's authz.ErrNotAuthorized, word for word.
func notAuthorized() error { return status.Error(codes.PermissionDenied, "not authorized") }

var (
	anyReader = role.MakeSet(role.Admin, role.Operator, role.Reader)
	adminOnly = role.MakeSet(role.Admin)
	adminOp   = role.MakeSet(role.Admin, role.Operator)
	etcdRead  = role.MakeSet(role.Admin, role.Operator, role.Reader, role.EtcdBackup)
)

// accessRules is machined's rules table (system/services/machined.go, v1.13.9; the same for
// the methods below at v1.14.1) for the methods the sim serves. A method not listed needs
// os:admin, as Talos's FallbackRoles.
var accessRules = map[string]role.Set{
	"/cluster.ClusterService/HealthCheck": anyReader,

	"/machine.ImageService/List": anyReader,
	"/machine.ImageService/Pull": adminOp,

	"/machine.LifecycleService/Install": adminOnly,
	"/machine.LifecycleService/Upgrade": adminOnly,

	// Reader too, "for maintenance only, verified in the handler": a running node refuses it
	// to a reader in the handler, see authorize.
	"/machine.MachineService/ApplyConfiguration":    role.MakeSet(role.Admin, role.Reader),
	"/machine.MachineService/Bootstrap":             adminOnly,
	"/machine.MachineService/Dmesg":                 anyReader,
	"/machine.MachineService/EtcdAlarmList":         etcdRead,
	"/machine.MachineService/EtcdAlarmDisarm":       adminOp,
	"/machine.MachineService/EtcdDefragment":        adminOp,
	"/machine.MachineService/EtcdForfeitLeadership": adminOnly,
	"/machine.MachineService/EtcdLeaveCluster":      adminOnly,
	"/machine.MachineService/EtcdMemberList":        etcdRead,
	"/machine.MachineService/EtcdRecover":           adminOnly,
	"/machine.MachineService/EtcdRemoveMemberByID":  adminOnly,
	"/machine.MachineService/EtcdSnapshot":          role.MakeSet(role.Admin, role.Operator, role.EtcdBackup),
	"/machine.MachineService/EtcdStatus":            etcdRead,
	"/machine.MachineService/Events":                anyReader,
	"/machine.MachineService/Hostname":              anyReader,
	"/machine.MachineService/ImageList":             anyReader,
	"/machine.MachineService/ImagePull":             adminOp,
	"/machine.MachineService/Kubeconfig":            adminOnly,
	"/machine.MachineService/List":                  anyReader,
	"/machine.MachineService/Logs":                  anyReader,
	"/machine.MachineService/LogsContainers":        anyReader,
	"/machine.MachineService/Memory":                anyReader,
	"/machine.MachineService/Read":                  adminOnly,
	"/machine.MachineService/Reboot":                adminOp,
	"/machine.MachineService/Reset":                 adminOnly,
	"/machine.MachineService/Restart":               adminOp,
	"/machine.MachineService/Rollback":              adminOnly,
	"/machine.MachineService/ServiceList":           anyReader,
	"/machine.MachineService/ServiceRestart":        adminOp,
	"/machine.MachineService/ServiceStart":          adminOp,
	"/machine.MachineService/ServiceStop":           adminOp,
	"/machine.MachineService/Shutdown":              adminOp,
	"/machine.MachineService/Upgrade":               adminOnly,
	"/machine.MachineService/Version":               anyReader,

	"/cosi.resource.State/Create":  adminOnly,
	"/cosi.resource.State/Destroy": adminOnly,
	"/cosi.resource.State/Get":     anyReader,
	"/cosi.resource.State/List":    anyReader,
	"/cosi.resource.State/Update":  adminOnly,
	"/cosi.resource.State/Watch":   anyReader,

	"/storage.StorageService/Disks": anyReader,
}

// AllowedRoles returns the Talos roles that may call a full gRPC method name, as machined's
// access table says (os:admin alone for a method it does not list).
func AllowedRoles(method string) []string {
	if s, ok := accessRules[method]; ok {
		return s.Strings()
	}

	return adminOnly.Strings()
}

// peerRoles is apid's role extraction for a call that reached this node from outside: the
// roles in the client certificate, or, from an impersonator (another node's apid), the roles
// it forwarded.
func peerRoles(ctx context.Context, md metadata.MD) role.Set {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return role.Zero
	}

	tlsInfo, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok || len(tlsInfo.State.PeerCertificates) == 0 {
		return role.Zero
	}

	roles, _ := role.Parse(tlsInfo.State.PeerCertificates[0].Subject.Organization)

	if roles.Includes(role.Impersonator) {
		if fwd := md.Get(roleMetadataKey); len(fwd) > 0 {
			roles, _ = role.Parse(fwd)
		}
	}

	return roles
}

// withRoles returns md with the caller's roles in apid's metadata key, replacing whatever the
// caller sent there (only an impersonator's is trusted, and peerRoles already used it).
func withRoles(md metadata.MD, roles role.Set) metadata.MD {
	out := md.Copy()
	if out == nil {
		out = metadata.MD{}
	}

	out.Set(roleMetadataKey, roles.Strings()...)

	return out
}

// callerRoles is machined's MetadataOnly injector: the roles apid put in the metadata.
func callerRoles(ctx context.Context) role.Set {
	md, _ := metadata.FromIncomingContext(ctx)

	roles, _ := role.Parse(md.Get(roleMetadataKey))

	return roles
}

// authorize is machined's authz.Authorizer.
func authorize(ctx context.Context, method string) error {
	allowed, ok := accessRules[method]
	if !ok {
		allowed = adminOnly
	}

	roles := callerRoles(ctx)
	if !allowed.IncludesAny(roles) {
		return notAuthorized()
	}

	// ApplyConfiguration's handler refuses non-admins outside maintenance mode
	// (v1alpha1_server.go, ApplyConfiguration); sim nodes are never in maintenance.
	if method == "/machine.MachineService/ApplyConfiguration" && !roles.Includes(role.Admin) {
		return notAuthorized()
	}

	return nil
}

// TalosconfigWithRole returns a talosconfig like Talosconfig's whose client certificate carries
// the given roles (certificate organisations, e.g. "os:reader", "os:operator",
// "os:etcd:backup"), as `talosctl config new --roles` issues one. It is a secret.
func (c *Cluster) TalosconfigWithRole(roles ...string) ([]byte, error) {
	if len(roles) == 0 {
		return nil, fmt.Errorf("sim: TalosconfigWithRole needs at least one role (e.g. %q)", string(role.Reader))
	}

	for _, r := range roles {
		if _, unknown := role.Parse([]string{r}); len(unknown) > 0 {
			return nil, fmt.Errorf("sim: %q is not a Talos role (known: %s)", r, strings.Join(role.All.Strings(), ", "))
		}
	}

	crt, key, err := c.pki.issue(&x509.Certificate{
		Subject:     pkix.Name{Organization: slices.Clone(roles), CommonName: strings.Join(roles, "+")},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	})
	if err != nil {
		return nil, err
	}

	eps := c.controlPlaneEndpoints()

	cfg := config.NewConfig(c.opts.Name, eps, c.pki.caPEM, &talosx509.PEMEncodedCertificateAndKey{Crt: crt, Key: key})
	if len(eps) > 0 {
		cfg.Contexts[c.opts.Name].Nodes = eps[:1]
	}

	b, err := cfg.Bytes()
	if err != nil {
		return nil, fmt.Errorf("render talosconfig: %w", err)
	}

	return b, nil
}
