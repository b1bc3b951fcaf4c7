package host

import (
	"bytes"
	"context"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	lifecyclev1 "github.com/talosbot/talosbot/plugins/sdk/proto/lifecycle/v1"
)

// ValidateConfig asks the plugin to validate its configuration section
// (plugins.NAME as JSON, unread by the host; nil when absent) and returns
// its problems, with paths inside the section. It starts the plugin if it
// is not running. A plugin that predates the RPC accepts only an absent
// section: given one, it is reported as taking no configuration, so a
// section is never silently ignored. Like Plan it has no side effects and is
// retried once if the process dies under it.
func (m *Manager) ValidateConfig(ctx context.Context, name string, section []byte, clusters []string) ([]*lifecyclev1.ConfigProblem, error) {
	p, err := m.lookup(name)
	if err != nil {
		return nil, err
	}
	var (
		resp          *lifecyclev1.ValidateConfigResponse
		unimplemented bool
	)
	err = m.unary(ctx, p, "validate config", func(ctx context.Context, c lifecyclev1.LifecycleClient) error {
		var err error
		resp, err = c.ValidateConfig(ctx, &lifecyclev1.ValidateConfigRequest{Config: section, Clusters: clusters})
		if status.Code(err) == codes.Unimplemented {
			unimplemented, err = true, nil
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	if unimplemented {
		if t := bytes.TrimSpace(section); len(t) > 0 && string(t) != "null" {
			return []*lifecyclev1.ConfigProblem{{Message: "this plugin predates configuration sections (no ValidateConfig) and takes none; remove its section"}}, nil
		}
		return nil, nil
	}
	return resp.GetProblems(), nil
}
