package bot

import (
	"context"
	"fmt"

	"github.com/talosbot/talosbot/config"
)

// FileCredentials resolves credentials given as file:/env: references
// (credentials.source "files"). Terraform-sourced clusters need a
// CredentialSource that reads Terraform outputs.
type FileCredentials struct{}

// Resolve reads the cluster's talosconfig and (optional) kubeconfig.
func (FileCredentials) Resolve(_ context.Context, cl *config.Cluster) (*Credentials, error) {
	if cl.Credentials.Source != "files" {
		return nil, fmt.Errorf("cluster %s: credentials.source %q is not supported by this build", cl.Name, cl.Credentials.Source)
	}
	tc, err := cl.Credentials.Talosconfig.Resolve()
	if err != nil {
		return nil, fmt.Errorf("clusters[%s].credentials.talosconfig: %w", cl.Name, err)
	}
	c := &Credentials{Talosconfig: tc}
	if !cl.Credentials.Kubeconfig.Empty() {
		if c.Kubeconfig, err = cl.Credentials.Kubeconfig.Resolve(); err != nil {
			return nil, fmt.Errorf("clusters[%s].credentials.kubeconfig: %w", cl.Name, err)
		}
	}
	return c, nil
}
