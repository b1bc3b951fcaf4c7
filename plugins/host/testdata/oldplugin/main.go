// Command oldplugin is an external plugin built against the lifecycle
// protocol before ValidateConfig existed: its gRPC server answers that RPC
// with codes.Unimplemented, as a plugin built with an older SDK does.
package main

import (
	"context"
	"errors"

	"github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"

	"github.com/talosbot/talosbot/plugins/sdk"
	lifecyclev1 "github.com/talosbot/talosbot/plugins/sdk/proto/lifecycle/v1"
)

// old serves Describe only; every other RPC is Unimplemented.
type old struct {
	lifecyclev1.UnimplementedLifecycleServer
}

func (old) Describe(context.Context, *lifecyclev1.DescribeRequest) (*lifecyclev1.Manifest, error) {
	return &lifecyclev1.Manifest{Name: "old", Version: "0.0.1", Commands: []*lifecyclev1.Command{{Name: "old", Effect: lifecyclev1.Effect_EFFECT_READ_ONLY}}}, nil
}

type glue struct{ plugin.NetRPCUnsupportedPlugin }

func (glue) GRPCServer(_ *plugin.GRPCBroker, s *grpc.Server) error {
	lifecyclev1.RegisterLifecycleServer(s, old{})
	return nil
}

func (glue) GRPCClient(context.Context, *plugin.GRPCBroker, *grpc.ClientConn) (any, error) {
	return nil, errors.New("plugin side only")
}

func main() {
	plugin.Serve(&plugin.ServeConfig{
		HandshakeConfig:  sdk.HandshakeConfig(),
		VersionedPlugins: map[int]plugin.PluginSet{sdk.ProtocolVersion: {sdk.PluginName: glue{}}},
		GRPCServer:       plugin.DefaultGRPCServer,
	})
}
