package sim

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	cosiapi "github.com/cosi-project/runtime/api/v1alpha1"
	"github.com/cosi-project/runtime/pkg/resource"
	"github.com/cosi-project/runtime/pkg/resource/meta"
	"github.com/cosi-project/runtime/pkg/state"
	"github.com/cosi-project/runtime/pkg/state/impl/inmem"
	"github.com/cosi-project/runtime/pkg/state/impl/namespaced"
	"github.com/cosi-project/runtime/pkg/state/protobuf/server"
	"github.com/cosi-project/runtime/pkg/state/registry"
	machineapi "github.com/siderolabs/talos/pkg/machinery/api/machine"
	"go.yaml.in/yaml/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/talosbot/talosbot/internal/talosrbac"
)

// This file is the node's COSI resource API: the cosi.resource.State service that machined
// registers next to MachineService (internal/app/machined/internal/server/v1alpha1/v1alpha1_server.go,
// Register) and that `talosctl get` and pkg/cluster/check read. It is cosi-project/runtime's own
// protobuf state server over its in-memory namespaced state, as in
// internal/app/machined/pkg/runtime/v1alpha2/v1alpha2_state.go, behind a read-only access filter
// like internal/app/resources/access.go.
//
// Talos fills the state with controllers. The sim has no controllers: the resources are derived
// from the node's simulated state (resources.go) whenever a client reads them, and about every
// cosiWatchTick while a client watches. The state lives in memory and is rebuilt on every boot
// (a new boot id), so resource versions start again after a reboot, as on a real node.

// cosiWatchTick is how often the resources are refreshed while a Watch is open.
const cosiWatchTick = 250 * time.Millisecond

// cosiState is one node's resource state.
type cosiState struct {
	n *node

	mu     sync.Mutex // serialises boot swaps and refreshes
	bootID string
	st     state.State
	last   map[resourceKey]bool // resources the last refresh wrote, to destroy the ones that went away
	cache  configCache

	idMu   sync.Mutex
	nodeID string // cluster.Identity, kept for the node's lifetime

	watchMu  sync.Mutex
	watchers int
	stopTick chan struct{}
}

type resourceKey struct {
	ns  resource.Namespace
	typ resource.Type
	id  resource.ID
}

func newCOSIState(n *node) *cosiState { return &cosiState{n: n} }

// registerCOSI serves the node's resources on its machined gRPC server.
func (n *node) registerCOSI(srv *grpc.Server) {
	n.cosi = newCOSIState(n)
	cosiapi.RegisterStateServer(srv, server.NewState(&apiState{s: n.cosi}))
}

// current returns this boot's state, refreshed from the node.
func (s *cosiState) current(ctx context.Context) (state.State, error) {
	s.n.mu.Lock()
	boot := s.n.bootID
	s.n.mu.Unlock()

	s.mu.Lock()
	defer s.mu.Unlock()

	if s.st == nil || s.bootID != boot {
		st, err := newBootState(ctx)
		if err != nil {
			return nil, status.Errorf(codes.Internal, "build resource state: %v", err)
		}

		s.st, s.bootID, s.last = st, boot, nil
	}

	// A resource that cannot be refreshed keeps its last value: the read still answers, as a
	// real node's API does while one controller fails.
	if err := s.refreshLocked(ctx); err != nil {
		s.n.c.log.Warn("refresh resources", "node", s.n.info.Name, "err", err)
	}

	return s.st, nil
}

// newBootState builds an empty state with the namespaces and resource definitions the sim serves.
func newBootState(ctx context.Context) (state.State, error) {
	st := state.WrapCore(namespaced.NewState(inmem.Build))

	nsReg := registry.NewNamespaceRegistry(st)
	if err := nsReg.RegisterDefault(ctx); err != nil {
		return nil, err
	}

	for _, ns := range cosiNamespaces() {
		if err := nsReg.Register(ctx, ns.name, ns.description); err != nil {
			return nil, err
		}
	}

	rdReg := registry.NewResourceRegistry(st)
	if err := rdReg.RegisterDefault(ctx); err != nil {
		return nil, err
	}

	for _, r := range cosiResourceTypes() {
		if err := rdReg.Register(ctx, r); err != nil {
			return nil, err
		}
	}

	return st, nil
}

// refreshLocked writes the node's resources: creates the new ones, updates the ones whose spec
// changed (so watchers see only real changes) and destroys the ones that went away.
func (s *cosiState) refreshLocked(ctx context.Context) error {
	desired := s.n.desiredResources(ctx, &s.cache)
	seen := make(map[resourceKey]bool, len(desired))

	var errs []error

	for _, d := range desired {
		md := d.res.Metadata()
		seen[resourceKey{md.Namespace(), md.Type(), md.ID()}] = true

		if err := s.write(ctx, d); err != nil {
			errs = append(errs, err)
		}
	}

	for key := range s.last {
		if seen[key] {
			continue
		}

		ptr := resource.NewMetadata(key.ns, key.typ, key.id, resource.VersionUndefined)

		cur, err := s.st.Get(ctx, ptr)
		if state.IsNotFoundError(err) {
			continue
		}

		if err == nil {
			err = s.st.Destroy(ctx, ptr, state.WithDestroyOwner(cur.Metadata().Owner()))
		}

		if err != nil && !state.IsNotFoundError(err) {
			errs = append(errs, fmt.Errorf("destroy %s: %w", ptr, err))
		}
	}

	s.last = seen

	return errors.Join(errs...)
}

// write creates or updates one resource; an unchanged spec is left alone.
func (s *cosiState) write(ctx context.Context, d desiredResource) error {
	md := d.res.Metadata()

	cur, err := s.st.Get(ctx, md)

	switch {
	case state.IsNotFoundError(err):
		if err = s.st.Create(ctx, d.res, state.WithCreateOwner(d.owner)); err != nil {
			return fmt.Errorf("create %s: %w", md, err)
		}

		return nil
	case err != nil:
		return fmt.Errorf("get %s: %w", md, err)
	}

	same, err := sameSpec(cur, d.res)
	if err != nil || same {
		return err
	}

	// The stored copy takes the new resource's metadata: carry the version and owner over.
	md.SetVersion(cur.Metadata().Version())

	if err = md.SetOwner(d.owner); err != nil {
		return fmt.Errorf("update %s: %w", md, err)
	}

	if err = s.st.Update(ctx, d.res, state.WithUpdateOwner(d.owner), state.WithExpectedPhaseAny()); err != nil {
		return fmt.Errorf("update %s: %w", md, err)
	}

	return nil
}

func sameSpec(a, b resource.Resource) (bool, error) {
	ya, err := yaml.Marshal(a.Spec())
	if err != nil {
		return false, fmt.Errorf("marshal %s: %w", a.Metadata(), err)
	}

	yb, err := yaml.Marshal(b.Spec())
	if err != nil {
		return false, fmt.Errorf("marshal %s: %w", b.Metadata(), err)
	}

	return string(ya) == string(yb), nil
}

// watchStarted keeps the resources refreshed until ctx ends.
func (s *cosiState) watchStarted(ctx context.Context) {
	s.watchMu.Lock()
	s.watchers++

	if s.watchers == 1 {
		stop := make(chan struct{})
		s.stopTick = stop

		s.n.c.goBackground(func(cctx context.Context) { s.tick(cctx, stop) })
	}
	s.watchMu.Unlock()

	go func() {
		<-ctx.Done()

		s.watchMu.Lock()
		defer s.watchMu.Unlock()

		s.watchers--
		if s.watchers == 0 {
			close(s.stopTick)
			s.stopTick = nil
		}
	}()
}

// tick refreshes the resources on every runtime event of the node (so a watcher sees a
// sequence's stages as they happen) and every cosiWatchTick (for etcd, Kubernetes and faults).
func (s *cosiState) tick(ctx context.Context, stop <-chan struct{}) {
	t := time.NewTicker(cosiWatchTick)
	defer t.Stop()

	_, events, cancel, err := s.n.events.subscribe(&machineapi.EventsRequest{})
	if err != nil {
		events = nil
	} else {
		defer cancel()
	}

	refresh := func() {
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()

		if _, err := s.current(rctx); err != nil {
			s.n.c.log.Warn("refresh resources", "node", s.n.info.Name, "err", err)
		}
	}

	for {
		select {
		case <-ctx.Done():
			return
		case <-stop:
			return
		case _, ok := <-events:
			if !ok {
				events = nil // the node went down: its watchers are cut off too

				continue
			}

			refresh()
		case <-t.C:
			refresh()
		}
	}
}

// apiState is the state the gRPC server sees: this boot's state, refreshed on every access and
// filtered by accessRule.
type apiState struct{ s *cosiState }

func (a *apiState) filtered(ctx context.Context) (state.CoreState, error) {
	st, err := a.s.current(ctx)
	if err != nil {
		return nil, err
	}

	return state.Filter(st, accessRule(st)), nil
}

func (a *apiState) Get(ctx context.Context, ptr resource.Pointer, opts ...state.GetOption) (resource.Resource, error) {
	st, err := a.filtered(ctx)
	if err != nil {
		return nil, err
	}

	return st.Get(ctx, ptr, opts...)
}

func (a *apiState) List(ctx context.Context, kind resource.Kind, opts ...state.ListOption) (resource.List, error) {
	st, err := a.filtered(ctx)
	if err != nil {
		return resource.List{}, err
	}

	return st.List(ctx, kind, opts...)
}

func (a *apiState) Create(ctx context.Context, r resource.Resource, opts ...state.CreateOption) error {
	st, err := a.filtered(ctx)
	if err != nil {
		return err
	}

	return st.Create(ctx, r, opts...)
}

func (a *apiState) Update(ctx context.Context, r resource.Resource, opts ...state.UpdateOption) error {
	st, err := a.filtered(ctx)
	if err != nil {
		return err
	}

	return st.Update(ctx, r, opts...)
}

func (a *apiState) Destroy(ctx context.Context, ptr resource.Pointer, opts ...state.DestroyOption) error {
	st, err := a.filtered(ctx)
	if err != nil {
		return err
	}

	return st.Destroy(ctx, ptr, opts...)
}

func (a *apiState) Watch(ctx context.Context, ptr resource.Pointer, ch chan<- state.Event, opts ...state.WatchOption) error {
	st, err := a.filtered(ctx)
	if err != nil {
		return err
	}

	if err = st.Watch(ctx, ptr, ch, opts...); err != nil {
		return err
	}

	a.s.watchStarted(ctx)

	return nil
}

func (a *apiState) WatchKind(ctx context.Context, kind resource.Kind, ch chan<- state.Event, opts ...state.WatchKindOption) error {
	st, err := a.filtered(ctx)
	if err != nil {
		return err
	}

	if err = st.WatchKind(ctx, kind, ch, opts...); err != nil {
		return err
	}

	a.s.watchStarted(ctx)

	return nil
}

func (a *apiState) WatchKindAggregated(ctx context.Context, kind resource.Kind, ch chan<- []state.Event, opts ...state.WatchKindOption) error {
	st, err := a.filtered(ctx)
	if err != nil {
		return err
	}

	if err = st.WatchKindAggregated(ctx, kind, ch, opts...); err != nil {
		return err
	}

	a.s.watchStarted(ctx)

	return nil
}

// accessRule is the sim's form of Talos's API access policy: the API is read-only, and only
// registered resource types in registered namespaces can be read, and sensitive ones only with
// os:admin (internal/app/resources/access.go).
func accessRule(st state.State) state.FilteringRule {
	return func(ctx context.Context, access state.Access) error {
		if !access.Verb.Readonly() {
			return status.Error(codes.PermissionDenied, "write access is not allowed")
		}

		rdID := strings.ToLower(access.ResourceType)

		rd, err := st.Get(ctx, resource.NewMetadata(meta.NamespaceName, meta.ResourceDefinitionType, rdID, resource.VersionUndefined))
		if err != nil {
			if state.IsNotFoundError(err) {
				return status.Errorf(codes.PermissionDenied, "resource type %q is not supported", access.ResourceType)
			}

			return err
		}

		// Sensitive types (the machine config) only for os:admin (access.go, internal/talosrbac).
		if def, ok := rd.(*meta.ResourceDefinition); ok && def.TypedSpec().Sensitivity == meta.Sensitive && !talosrbac.Permits(callerRoles(ctx), talosrbac.ReadSensitive) {
			return notAuthorized()
		}

		if _, err := st.Get(ctx, resource.NewMetadata(meta.NamespaceName, meta.NamespaceType, access.ResourceNamespace, resource.VersionUndefined)); err != nil {
			if state.IsNotFoundError(err) {
				return status.Errorf(codes.PermissionDenied, "namespace %q is not supported", access.ResourceNamespace)
			}

			return err
		}

		return nil
	}
}
