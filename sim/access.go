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

	"github.com/talosbot/talosbot/internal/talosrbac"
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

// AllowedRoles returns the Talos roles that may call a full gRPC method name, as machined's
// access table says (os:admin alone for a method it does not list; internal/talosrbac).
func AllowedRoles(method string) []string {
	return talosrbac.Allowed(method).Strings()
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

// authorize is machined's authz.Authorizer with its rules table (internal/talosrbac), and
// ApplyConfiguration's own check in its handler (v1alpha1_server.go: a configured node takes
// it only from os:admin; sim nodes are never in maintenance mode).
func authorize(ctx context.Context, method string) error {
	if talosrbac.Permits(callerRoles(ctx), method) {
		return nil
	}

	return notAuthorized()
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
