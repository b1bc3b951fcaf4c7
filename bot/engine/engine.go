// Package engine runs operations: the state machine, cluster locks,
// approvals, the re-plan before run, resume, button tokens and their
// pruning, and the hooks around disruptive runs. Chat adapters feed it
// commands and button clicks (it implements chat.Handler) and render the
// Updates it sends to its Sink; plugins do all cluster work; the bot's own
// commands (package bot) are served through Options.Commands.
package engine

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/talosbot/talosbot/approvals"
	"github.com/talosbot/talosbot/bot/chat"
	"github.com/talosbot/talosbot/bot/credentials"
	"github.com/talosbot/talosbot/bot/grammar"
	"github.com/talosbot/talosbot/config"
	"github.com/talosbot/talosbot/plugins/host"
	"github.com/talosbot/talosbot/plugins/sdk"
	lifecyclev1 "github.com/talosbot/talosbot/plugins/sdk/proto/lifecycle/v1"
	"github.com/talosbot/talosbot/state"
)

// Options configure an Engine.
type Options struct {
	Config      *config.Config
	Store       *state.Store
	Plugins     Plugins
	Credentials CredentialSource
	Policy      Policy
	Sink        Sink
	Logger      *slog.Logger
	Clock       func() time.Time
	// NewID makes operation ids and action tokens; defaults to random hex.
	NewID func() string
	// Observer receives events for metrics; optional.
	Observer Observer
	// PruneTicks triggers pruning of old button tokens and cancel marks
	// (Engine.Prune), which also runs once at start; nil means every
	// PruneInterval.
	PruneTicks <-chan time.Time
	// Hooks follow disruptive runs (hooks.go); optional.
	Hooks []RunHook
	// Commands are the bot's own commands (package bot); optional: without
	// them the engine knows only plugin commands.
	Commands Commands
}

// Engine runs operations. It is safe for concurrent use.
type Engine struct {
	o       Options
	grammar *grammar.Grammar
	log     *slog.Logger

	mu      sync.Mutex
	running map[string]context.CancelFunc // op id → cancel of its run
	// cancelled holds runs cancelled before they registered (a click racing
	// the start of the run); the run cancels itself when it registers.
	cancelled map[string]bool
	// resuming holds the operations whose resume is planning the rest
	// (resume.go): a second resume meanwhile is refused, not planned again.
	resuming map[string]bool
	wg       sync.WaitGroup
	changed  chan struct{} // closed and replaced on every operation change
	base     context.Context
	stop     context.CancelFunc
}

// New builds the engine: it asks every plugin for its manifest to build the
// grammar. Call Recover once at start-up, before serving.
func New(ctx context.Context, o Options) (*Engine, error) {
	if o.Config == nil || o.Store == nil || o.Plugins == nil || o.Sink == nil || o.Policy == nil || o.Credentials == nil {
		return nil, errors.New("engine: Config, Store, Plugins, Credentials, Policy and Sink are required")
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Clock == nil {
		o.Clock = time.Now
	}
	if o.NewID == nil {
		o.NewID = randomID
	}
	if o.Observer == nil {
		o.Observer = nopObserver{}
	}
	mans, err := o.Plugins.Manifests(ctx)
	if err != nil {
		return nil, fmt.Errorf("engine: read plugin manifests: %w", err)
	}
	specs := commandSpecs(o.Commands, mans)
	// Fail closed on a policy naming a command no plugin serves (a typo
	// there would otherwise silently drop an approval rule).
	if errs := o.Config.CheckCommands(catalogue(specs)); len(errs) > 0 {
		return nil, &config.Errors{List: errs}
	}
	base, stop := context.WithCancel(context.WithoutCancel(ctx))
	e := &Engine{
		o: o, grammar: grammar.NewGrammar(specs), log: o.Logger,
		running: map[string]context.CancelFunc{}, cancelled: map[string]bool{}, resuming: map[string]bool{}, changed: make(chan struct{}),
		base: base, stop: stop,
	}
	e.goRun(func(ctx context.Context) { e.pruneLoop(ctx, o.PruneTicks) })
	return e, nil
}

func commandSpecs(own Commands, mans []*lifecyclev1.Manifest) []grammar.CommandSpec {
	var specs []grammar.CommandSpec
	if own != nil {
		specs = append(specs, own.Specs()...)
	}
	for _, m := range mans {
		for _, c := range m.GetCommands() {
			specs = append(specs, grammar.CommandSpec{Plugin: m.GetName(), Command: withPolicyFlags(c)})
		}
	}
	return specs
}

func catalogue(specs []grammar.CommandSpec) []config.CommandInfo {
	out := make([]config.CommandInfo, 0, len(specs))
	for _, s := range specs {
		out = append(out, config.CommandInfo{Name: s.Name, Operation: s.Plugin != "", Disruptive: s.GetEffect() == lifecyclev1.Effect_EFFECT_DISRUPTIVE,
			Writes: s.GetEffect() == lifecyclev1.Effect_EFFECT_WRITE})
	}
	return out
}

// Catalogue reads every plugin's manifest and returns the whole command
// catalogue (own, the bot's commands, first), for config.CheckCommands: New
// checks the configuration against it, and so does `talosbot config check`.
func Catalogue(ctx context.Context, plugins Plugins, own Commands) ([]config.CommandInfo, error) {
	mans, err := plugins.Manifests(ctx)
	if err != nil {
		return nil, fmt.Errorf("read plugin manifests: %w", err)
	}
	return catalogue(commandSpecs(own, mans)), nil
}

// Grammar is the grammar New builds from the same manifests and own
// commands (policy flags included), for checks that parse command lines
// without an engine: the usage hints test in cmd/talosbot.
func Grammar(ctx context.Context, plugins Plugins, own Commands) (*grammar.Grammar, error) {
	mans, err := plugins.Manifests(ctx)
	if err != nil {
		return nil, fmt.Errorf("read plugin manifests: %w", err)
	}
	return grammar.NewGrammar(commandSpecs(own, mans)), nil
}

// Policy flags the engine adds to every disruptive plugin command, defined
// once in package approvals, which reads them.
const (
	FlagSkipStaging   = approvals.FlagSkipStaging
	FlagOutsideWindow = approvals.FlagOutsideWindow
	FlagPromotedFrom  = approvals.FlagPromotedFrom
)

// requiredApprovals asks the policy how many approvals op needs, with the
// min_approvals its command's manifest declares. The spec is the grammar's,
// built from the same manifests the engine serves, so a declared minimum
// cannot be lost by a caller that builds the policy without it. A command
// no longer in the grammar declares nothing: the configuration alone decides.
func (e *Engine) requiredApprovals(op *state.Operation) int {
	spec, _ := e.grammar.Lookup(op.Command)
	return e.o.Policy.RequiredApprovals(op, int(spec.GetMinApprovals()))
}

func withPolicyFlags(c *lifecyclev1.Command) *lifecyclev1.Command {
	if c.GetEffect() != lifecyclev1.Effect_EFFECT_DISRUPTIVE {
		return c
	}
	c = proto.Clone(c).(*lifecyclev1.Command)
	c.Args = append(c.Args,
		&lifecyclev1.Arg{Name: FlagSkipStaging, Flag: true, Boolean: true, Description: "production only: run without a succeeded staging run of the same target (R6); needs one extra approval"},
		&lifecyclev1.Arg{Name: FlagOutsideWindow, Flag: true, Boolean: true, Description: "production only: run outside the maintenance window; needs approval"})
	return c
}

func pluginArgs(args map[string]string) map[string]string {
	out := make(map[string]string, len(args))
	for k, v := range args {
		if k != FlagSkipStaging && k != FlagOutsideWindow {
			out[k] = v
		}
	}
	return out
}

// Grammar returns the engine's command grammar (for help and adapters).
func (e *Engine) Grammar() *grammar.Grammar { return e.grammar }

// Close stops accepting work, cancels running operations' contexts without
// changing their state (they become interrupted at the next start, exactly as
// after a crash), and waits for goroutines.
func (e *Engine) Close() {
	e.stop()
	e.wg.Wait()
}

func randomID() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func (e *Engine) now() time.Time { return e.o.Clock().UTC() }

func (e *Engine) notifyChanged() {
	e.mu.Lock()
	close(e.changed)
	e.changed = make(chan struct{})
	e.mu.Unlock()
}

// Await blocks until pred holds for operation id, or ctx ends.
func (e *Engine) Await(ctx context.Context, id string, pred func(*state.Operation) bool) (*state.Operation, error) {
	for {
		e.mu.Lock()
		ch := e.changed
		e.mu.Unlock()
		op, err := e.Operation(ctx, id)
		if err == nil && pred(op) {
			return op, nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			if op != nil {
				return op, fmt.Errorf("operation %s is %s: %w", id, op.State, ctx.Err())
			}
			return nil, ctx.Err()
		}
	}
}

// Operation reads one operation.
func (e *Engine) Operation(ctx context.Context, id string) (*state.Operation, error) {
	var op *state.Operation
	err := e.o.Store.View(ctx, func(tx *state.Tx) error {
		var err error
		op, err = tx.Operation(id)
		return err
	})
	return op, err
}

// Submit handles one command line. Problems that stop the command before it
// becomes an operation are answered through Sink.Reply and returned; they
// change no state. The returned id is "" for bot commands.
func (e *Engine) Submit(ctx context.Context, from Origin, text string) (string, error) {
	inv, err := e.grammar.Parse(text)
	if err != nil {
		e.o.Sink.Reply(ctx, from, err.Error())
		return "", err
	}
	if inv.Spec.Plugin == "" {
		if e.o.Commands == nil {
			err := fmt.Errorf("command %q has no handler", inv.Spec.Name)
			e.o.Sink.Reply(ctx, from, err.Error())
			return "", err
		}
		return "", e.o.Commands.Serve(ctx, from, inv)
	}
	cl, err := e.ResolveCluster(inv.Args["cluster"], from.Channel)
	if err != nil {
		e.o.Sink.Reply(ctx, from, err.Error())
		return "", err
	}
	disruptive := inv.Spec.GetEffect() == lifecyclev1.Effect_EFFECT_DISRUPTIVE
	writes := inv.Spec.GetEffect() == lifecyclev1.Effect_EFFECT_WRITE
	frozen, err := e.Freeze(ctx, cl.Name)
	if err != nil {
		e.o.Sink.Reply(ctx, from, "could not read the cluster's freeze state: "+err.Error())
		return "", err
	}
	if from.System && disruptive {
		if err := e.scheduledDisruption(inv); err != nil {
			e.Refuse(ctx, from, cl.Name, inv, err)
			return "", err
		}
	}
	if err := e.o.Policy.Authorize(ctx, PolicyRequest{User: from.User, Cluster: cl, Command: inv.Spec.Name, Disruptive: disruptive, Writes: writes, Args: inv.Args, Now: e.now(), Frozen: frozen, System: from.System}); err != nil {
		e.Refuse(ctx, from, cl.Name, inv, err)
		return "", err
	}
	op := &state.Operation{
		ID: e.o.NewID(), Cluster: cl.Name, Environment: cl.Environment, Command: inv.Spec.Name,
		Args: inv.Args, Text: inv.Text, Disruptive: disruptive, Requester: from.User, Channel: from.Channel,
		State: state.StatePlanned, CreatedAt: e.now(),
	}
	if from.System {
		// authorizeRun checks the policy again with the scheduler's authority.
		op.Flags = []string{approvals.FlagScheduled}
	}
	err = e.o.Store.Update(ctx, func(tx *state.Tx) error {
		if disruptive {
			// One disruptive operation per cluster: refuse early, naming the holder.
			if l, err := tx.Lock(cl.Name); err != nil {
				return err
			} else if l != nil {
				return &state.LockedError{Holder: *l}
			}
		}
		if err := tx.PutOperation(op); err != nil {
			return err
		}
		_, err := tx.Append(e.event(from.User, "requested", op, "", map[string]string{"text": inv.Text}))
		return err
	})
	if err != nil {
		if errors.Is(err, state.ErrLocked) {
			e.Refuse(ctx, from, cl.Name, inv, err)
		} else {
			e.o.Sink.Reply(ctx, from, "could not record the operation: "+err.Error())
		}
		return "", err
	}
	e.notifyChanged()
	e.emit(ctx, Update{Op: op})
	e.goRun(func(ctx context.Context) { e.planAndProceed(ctx, op.ID) })
	return op.ID, nil
}

// Refuse answers and audits a request refused before it became an operation.
func (e *Engine) Refuse(ctx context.Context, from Origin, cluster string, inv *grammar.Invocation, err error) {
	e.o.Sink.Reply(ctx, from, "refused: "+err.Error())
	// The refusal stands whether or not it could be recorded; a failed
	// append is logged and counted by audit.
	_ = e.audit(ctx, state.AuditEvent{Time: e.now(), Actor: from.User, Action: "refused", Cluster: cluster,
		Command: inv.Spec.Name, Result: "refused", Detail: map[string]string{"reason": err.Error(), "text": inv.Text}})
}

// audit appends ev in a transaction of its own (records that go with a state
// change are appended inside that change's transaction instead). A failed
// append is an error: it is returned, logged, and counted through
// Observer.AuditFailed, so an audit trail with a gap never goes unnoticed.
func (e *Engine) audit(ctx context.Context, ev state.AuditEvent) error {
	err := e.o.Store.Update(ctx, func(tx *state.Tx) error { _, err := tx.Append(ev); return err })
	if err != nil {
		err = fmt.Errorf("append audit record %q: %w", ev.Action, err)
		e.log.Error("audit append failed", "action", ev.Action, "actor", ev.Actor, "cluster", ev.Cluster, "op", ev.OpID, "err", err)
		e.o.Observer.AuditFailed(ev.Action)
	}
	return err
}

func (e *Engine) event(actor, action string, op *state.Operation, result string, detail map[string]string) state.AuditEvent {
	return state.AuditEvent{Time: e.now(), Actor: actor, Action: action, Cluster: op.Cluster, OpID: op.ID,
		Command: op.Command, Result: result, Detail: detail}
}

// ResolveCluster finds the cluster a command names, or the one cluster its
// channel is bound to; the error lists the clusters.
func (e *Engine) ResolveCluster(name, channel string) (*config.Cluster, error) {
	cfg := e.o.Config
	if name != "" {
		if cl := cfg.Cluster(name); cl != nil {
			return cl, nil
		}
		return nil, fmt.Errorf("unknown cluster %s; %s", chat.Echo(name), cfg.ClustersHint(name))
	}
	var bound []*config.Cluster
	for i := range cfg.Clusters {
		for _, ch := range cfg.Clusters[i].Channels {
			if ch == channel {
				bound = append(bound, &cfg.Clusters[i])
			}
		}
	}
	if len(bound) == 1 {
		return bound[0], nil
	}
	return nil, fmt.Errorf("name the cluster: this channel is bound to %s; clusters: %s",
		map[bool]string{true: "no single cluster", false: "no cluster"}[len(bound) > 1], strings.Join(cfg.ClusterNames(), ", "))
}

func (e *Engine) goRun(fn func(ctx context.Context)) {
	e.wg.Add(1)
	go func() {
		defer e.wg.Done()
		fn(e.base)
	}()
}

// request builds the plugin request for op, resolving credentials now (they
// live only in this request, for this call).
func (e *Engine) request(ctx context.Context, op *state.Operation) (*lifecyclev1.OperationRequest, error) {
	cl := e.o.Config.Cluster(op.Cluster)
	if cl == nil {
		return nil, fmt.Errorf("cluster %q is no longer configured", op.Cluster)
	}
	creds, err := e.o.Credentials.Resolve(ctx, cl)
	if err != nil {
		return nil, fmt.Errorf("credentials for %s: %w", cl.Name, err)
	}
	declared := map[string]string{}
	for k, v := range cl.Declared {
		declared[k] = v
	}
	for k, v := range creds.Declared {
		declared[k] = v
	}
	pc := &lifecyclev1.Cluster{Name: cl.Name, Environment: cl.Environment, Endpoints: cl.Endpoints, Declared: declared}
	for _, n := range cl.Nodes {
		pc.Nodes = append(pc.Nodes, &lifecyclev1.Node{Name: n.Name, Address: n.Address, Role: n.Role, Host: n.Host, Platform: n.Platform, InstallerClass: n.InstallerClass})
	}
	c := e.o.Config
	ev := &lifecyclev1.Evidence{Releases: e.releaseEvidence(ctx, cl.Name), GitFollowups: e.gitFollowups(ctx, cl.Name),
		Terraform: credentials.TerraformSettings(c, cl)}
	if op.Disruptive {
		// Where the plugin looks for a pause between nodes (sdk.PauseRequested).
		ev.PauseMark = e.pauseMark(op.ID)
	}
	if spec, ok := e.grammar.Lookup(op.Command); ok && slices.Contains(spec.GetNeeds(), lifecyclev1.Need_NEED_STAGING_DRILLS) {
		if ev.StagingDrills, err = e.stagingDrills(ctx); err != nil {
			return nil, err
		}
	}
	if ev.Backups, err = e.backupSettings(ctx, cl); err != nil {
		return nil, err
	}
	// The plugin's own section, unread (config check had the plugin validate it).
	section, err := c.Plugins.PluginSection(e.pluginFor(op))
	if err != nil {
		return nil, fmt.Errorf("plugins.%s: %w", e.pluginFor(op), err)
	}
	pcreds := &lifecyclev1.Credentials{Talosconfig: creds.Talosconfig, Kubeconfig: creds.Kubeconfig}
	if err := e.backupCredentials(op, pcreds); err != nil {
		return nil, err
	}
	return &lifecyclev1.OperationRequest{
		OperationId: op.ID, Command: op.Command, Args: pluginArgs(op.Args), Cluster: pc, Requester: op.Requester,
		// The attempt tells a plugin that it resumes an interrupted run, so it
		// can wait for a node the interrupted run left rebooting.
		Attempt:     int32(max(op.Attempts, 1)),
		Credentials: pcreds,
		Config:      section,
		// A resume: the steps the stopped run left in flight (resume.go).
		InterruptedSteps: interruptedSteps(op),
		Settings: &lifecyclev1.Settings{
			GateTimeoutMs: c.Timeouts.Gate.D().Milliseconds(), NodeTimeoutMs: c.Timeouts.Node.D().Milliseconds(),
			GateAfterTimeoutMs: c.Timeouts.GateAfter.D().Milliseconds(), HealthTimeoutMs: c.Timeouts.Health.D().Milliseconds(),
		},
		Evidence: ev,
	}, nil
}

func (e *Engine) pluginFor(op *state.Operation) string {
	if s, ok := e.grammar.Lookup(op.Command); ok {
		return s.Plugin
	}
	return ""
}

// planAndProceed plans a new operation and moves it to running, awaiting
// approval, or failed (plan error or refusal).
func (e *Engine) planAndProceed(ctx context.Context, id string) {
	op, err := e.Operation(ctx, id)
	if err != nil {
		e.log.Error("load operation", "op", id, "err", err)
		return
	}
	plan, err := e.plan(ctx, op)
	if err != nil {
		e.finish(ctx, id, "system", state.StateFailed, "plan failed", err.Error(), nil)
		return
	}
	if r := plan.GetRefusal(); r != nil {
		e.finish(ctx, id, "system", state.StateRefused, "refused", refusalText(r), nil)
		return
	}
	digest := host.Digest(plan)
	planJSON, _ := protojson.Marshal(plan)
	setPlan := func(o *state.Operation) {
		o.Digest, o.Plan, o.Target = digest, planJSON, plan.GetTarget()
		o.Steps = stepsFromPlan(plan)
	}
	if !op.Disruptive {
		e.transition(ctx, id, state.StateRunning, "system", "started", "", nil, setPlan)
		e.execute(ctx, id)
		return
	}
	// R6: production needs the same change to have succeeded on staging.
	op.Target = plan.GetTarget()
	flags, err := e.o.Policy.Promotion(op, e.stagingLookup(ctx), e.now())
	if err != nil {
		e.finish(ctx, id, "system", state.StateRefused, "refused", err.Error(), nil)
		return
	}
	if len(flags) > 0 {
		prev := setPlan
		setPlan = func(o *state.Operation) { prev(o); o.Flags = append(o.Flags, flags...) }
		op.Flags = append(op.Flags, flags...)
	}
	need := e.requiredApprovals(op)
	if need > 0 {
		exp := e.o.Policy.Expiry(op)
		var buttons []Button
		updated, err := e.transitionTx(ctx, id, state.StateAwaitingApproval, "system", "approval requested", "",
			map[string]string{"digest": digest, "required": fmt.Sprint(need), "flags": strings.Join(op.Flags, ",")}, func(o *state.Operation) {
				setPlan(o)
				o.ExpiresAt = e.now().Add(exp)
			}, func(tx *state.Tx, o *state.Operation) error {
				var err error
				labels, kinds := approvalButtons()
				buttons, err = e.mintButtons(tx, o, labels, kinds...)
				return err
			})
		if err == nil {
			e.emit(ctx, Update{Op: updated, Plan: plan, Buttons: buttons})
		}
		return
	}
	_, err = e.transitionTx(ctx, id, state.StateApproved, "system", "approved", "", map[string]string{"reason": "policy requires no approval", "flags": strings.Join(op.Flags, ",")}, setPlan,
		func(tx *state.Tx, o *state.Operation) error {
			return tx.AcquireLock(state.Lock{Cluster: o.Cluster, OpID: o.ID, Holder: o.Requester, Command: o.Command, Since: e.now()})
		})
	if err != nil {
		e.finish(ctx, id, "system", state.StateRefused, "refused", err.Error(), nil)
		return
	}
	e.execute(ctx, id)
}

func (e *Engine) plan(ctx context.Context, op *state.Operation) (*lifecyclev1.OperationPlan, error) {
	req, err := e.request(ctx, op)
	if err != nil {
		return nil, err
	}
	return e.o.Plugins.Plan(ctx, e.pluginFor(op), req)
}

func refusalText(r *lifecyclev1.Refusal) string {
	s := r.GetReason()
	if r.GetRule() != "" {
		s = r.GetRule() + ": " + s
	}
	if r.GetFix() != "" {
		s += " — " + r.GetFix()
	}
	return s
}

func stepsFromPlan(p *lifecyclev1.OperationPlan) []state.Step {
	out := make([]state.Step, 0, len(p.GetSteps()))
	for _, s := range p.GetSteps() {
		title := s.GetTitle()
		out = append(out, state.Step{ID: s.GetId(), Title: title, Node: s.GetNode(), Status: "pending"})
	}
	return out
}

// transition moves op to a new state with its audit record in one transaction.
func (e *Engine) transition(ctx context.Context, id string, to state.OpState, actor, action, result string, detail map[string]string, mutate func(*state.Operation)) (*state.Operation, error) {
	return e.transitionTx(ctx, id, to, actor, action, result, detail, mutate, nil)
}

func (e *Engine) transitionTx(ctx context.Context, id string, to state.OpState, actor, action, result string, detail map[string]string,
	mutate func(*state.Operation), extra func(*state.Tx, *state.Operation) error) (*state.Operation, error) {
	return e.transitionFrom(ctx, id, nil, to, actor, action, result, detail, mutate, extra)
}

// errStateMoved is returned by transitionFrom when the operation is no longer
// in one of the expected states.
var errStateMoved = errors.New("the operation changed state meanwhile")

// transitionFrom is transitionTx that only moves the operation when it is
// still in one of from (nil: any state), checked inside the transaction.
func (e *Engine) transitionFrom(ctx context.Context, id string, from []state.OpState, to state.OpState, actor, action, result string, detail map[string]string,
	mutate func(*state.Operation), extra func(*state.Tx, *state.Operation) error) (*state.Operation, error) {
	var out *state.Operation
	err := e.o.Store.Update(ctx, func(tx *state.Tx) error {
		if from != nil {
			cur, err := tx.Operation(id)
			if err != nil {
				return err
			}
			if !slices.Contains(from, cur.State) {
				return fmt.Errorf("operation %s is %s: %w", id, cur.State, errStateMoved)
			}
		}
		op, err := tx.Transition(id, to, func(o *state.Operation) {
			o.UpdatedAt = e.now()
			if mutate != nil {
				mutate(o)
			}
		})
		if err != nil {
			return err
		}
		if extra != nil {
			if err := extra(tx, op); err != nil {
				return err
			}
			// extra may have changed the operation.
			if op, err = tx.Operation(id); err != nil {
				return err
			}
		}
		if result == "" {
			result = string(to)
		}
		if _, err := tx.Append(e.event(actor, action, op, result, detail)); err != nil {
			return err
		}
		out = op
		return nil
	})
	if err != nil {
		e.log.Warn("transition refused", "op", id, "to", to, "err", err)
		return nil, err
	}
	e.notifyChanged()
	if out.State.Terminal() {
		e.o.Observer.OperationEnded(out)
	}
	e.emit(ctx, Update{Op: out})
	return out, nil
}

// finish ends an operation: terminal state, lock released, audit record.
func (e *Engine) finish(ctx context.Context, id, actor string, to state.OpState, summary, errText string, lines []string) {
	e.finishRun(ctx, id, actor, to, summary, errText, lines, RunOutput{})
}

// finishRun is finish with the run's output, for the hooks.
func (e *Engine) finishRun(ctx context.Context, id, actor string, to state.OpState, summary, errText string, lines []string, out RunOutput) {
	op, err := e.transitionTx(ctx, id, to, actor, string(to), "", map[string]string{"summary": summary, "error": errText},
		// Entering a terminal state releases the cluster lock (state.Tx.Transition).
		func(o *state.Operation) {
			o.Result, o.Error = summary, errText
			if len(lines) > 0 {
				o.Result = summary + "\n" + strings.Join(lines, "\n")
			}
			// A run that stopped closes the steps it left running and
			// says where it left every node (endings.go).
			closeRunning(o, describeStop(to, actor))
			if o.Disruptive && stoppedRun(to) && !o.StartedAt.IsZero() {
				if end := endingText(o, to); end != "" {
					o.Result += "\n" + end
				}
			}
		}, nil)
	if err != nil {
		e.log.Error("finish operation", "op", id, "err", err)
		return
	}
	e.runEnded(ctx, op, out)
}

// execute runs an approved (or read-only, already running) operation through
// its plugin.
func (e *Engine) execute(ctx context.Context, id string) { e.executeWith(ctx, id, nil) }

// executeWith is execute with the request of a run already marked running
// (a resume, which built it to plan the attempt): the credentials behind it
// (possibly a Terraform outputs read) are then loaded once for the plan and
// the run. An approved operation always builds its own, for its re-plan.
func (e *Engine) executeWith(ctx context.Context, id string, req *lifecyclev1.OperationRequest) {
	op, err := e.Operation(ctx, id)
	if err != nil {
		return
	}
	if req != nil && op.State == state.StateRunning {
		// What request sets from the operation now (the attempt the
		// transition to running counted).
		req.Attempt = int32(max(op.Attempts, 1))
	} else {
		req = nil
	}
	if op.State == state.StateApproved {
		// Re-plan before Run: approvals are bound to the digest. The
		// credentials are read once, for the re-plan and the run.
		if req, err = e.request(ctx, op); err != nil {
			e.finish(ctx, id, "system", state.StateFailed, "could not start", err.Error(), nil)
			return
		}
		// The plan is of the attempt about to run: after a resume whose new
		// plan was approved again, that is a later attempt, and the plugin
		// plans it as a resume (as resumeReplanned asked it to).
		req.Attempt = int32(op.Attempts + 1)
		plan, err := e.o.Plugins.Plan(ctx, e.pluginFor(op), req)
		if err != nil {
			e.finish(ctx, id, "system", state.StateFailed, "re-plan before run failed", err.Error(), nil)
			return
		}
		if r := plan.GetRefusal(); r != nil {
			e.finish(ctx, id, "system", state.StateRefused, "refused", refusalText(r), nil)
			return
		}
		if d := host.Digest(plan); d != op.Digest {
			e.voidApprovals(ctx, op, plan, d, nil)
			return
		}
		// A freeze or the end of the maintenance window since the request
		// stops the run too: policy is checked again right before it starts.
		if err := e.authorizeRun(ctx, op); err != nil {
			e.finish(ctx, id, "system", state.StateRefused, "refused", err.Error(), nil)
			return
		}
		// Entering running sets StartedAt and counts the attempt (state.Tx.Transition).
		if op, err = e.transition(ctx, id, state.StateRunning, "system", "started", "", nil, nil); err != nil {
			return
		}
		req.Attempt = int32(op.Attempts)
	}
	if op.State != state.StateRunning {
		return
	}
	if req == nil {
		if req, err = e.request(ctx, op); err != nil {
			e.finish(ctx, id, "system", state.StateFailed, "could not start", err.Error(), nil)
			return
		}
	}
	// The hooks start (or, on resume, pick up) their work around the run;
	// one may refuse it (a required silence), before the plugin runs.
	// The mark is cleared before the hooks, so one may ask for a pause
	// before the first node (alertpause: an alert firing at start).
	e.clearPause(id)
	defer e.clearPause(id)
	if err := e.runStarting(ctx, op); err != nil {
		e.finish(ctx, id, "system", state.StateRefused, "refused", err.Error(), nil)
		return
	}
	runCtx, cancel := context.WithCancel(ctx)
	e.mu.Lock()
	e.running[id] = cancel
	if e.cancelled[id] {
		delete(e.cancelled, id)
		cancel()
	}
	e.mu.Unlock()
	defer func() {
		e.mu.Lock()
		delete(e.running, id)
		e.mu.Unlock()
		cancel()
	}()
	offered := !op.Disruptive
	res, err := e.o.Plugins.Run(runCtx, e.pluginFor(op), req, func(p *lifecyclev1.Progress) error {
		e.progress(ctx, id, p)
		if !offered {
			// Cancel and Pause appear once the plugin is running (its
			// first event), so a click always reaches a run (pause.go).
			offered = true
			if cur, err := e.Operation(ctx, id); err == nil {
				e.runButtons(ctx, cur)
			}
		}
		return nil
	})
	switch {
	case err == nil && res.GetOk():
		// Finished: even a cancel that raced the last step does not undo it.
		e.finishRun(ctx, id, "system", state.StateSucceeded, res.GetSummary(), "", res.GetLines(), RunOutput{Declared: res.GetDeclared(), Invalidated: res.GetInvalidated()})
	case ctx.Err() != nil:
		// The engine is shutting down: leave the operation running; the next
		// start marks it interrupted and it can be resumed.
		return
	case runCtx.Err() != nil && errors.Is(runCtx.Err(), context.Canceled):
		e.finish(ctx, id, e.cancelledBy(id), state.StateCancelled, "cancelled", "", nil)
	case err != nil:
		e.finish(ctx, id, "system", state.StateFailed, "failed", err.Error(), nil)
	case op.Disruptive && res.GetSummary() == sdk.PausedSummary:
		// Asked (Pause, PauseFor) or the plugin's own (a storage wait
		// past its limit, docs/UPGRADES.md): either way the run stopped
		// between nodes and waits for Resume or Abandon; it did not fail.
		e.paused(ctx, id, res.GetLines())
		return
	default:
		msg, to := res.GetError(), state.StateFailed
		if r := res.GetRefusal(); r != nil {
			msg, to = refusalText(r), state.StateRefused
		}
		// A failed run's declared values are never passed on (R18).
		e.finishRun(ctx, id, "system", to, orDefault(res.GetSummary(), "failed"), msg, res.GetLines(), RunOutput{Invalidated: res.GetInvalidated()})
		e.offerEnding(ctx, id, res.GetSuggestedActions())
		return
	}
	if st := e.stateOf(ctx, id); st == state.StateCancelled || st == state.StateFailed {
		e.offerEnding(ctx, id, nil)
	}
}

func orDefault(s, d string) string {
	if s == "" {
		return d
	}
	return s
}

// stateOf is op's state now ("" if it cannot be read).
func (e *Engine) stateOf(ctx context.Context, id string) state.OpState {
	op, err := e.Operation(ctx, id)
	if err != nil {
		return ""
	}
	return op.State
}

// cancelledBy returns who cancelled a run (recorded by Cancel).
func (e *Engine) cancelledBy(id string) string {
	var who string
	_ = e.o.Store.View(context.Background(), func(tx *state.Tx) error {
		b, _ := tx.GetKV(cancelBucket, id)
		who = string(b)
		return nil
	})
	return orDefault(who, "system")
}

// progress records one plugin event on the operation and forwards it to chat.
func (e *Engine) progress(ctx context.Context, id string, p *lifecyclev1.Progress) {
	var op *state.Operation
	var threadLine string
	err := e.o.Store.Update(ctx, func(tx *state.Tx) error {
		o, err := tx.Operation(id)
		if err != nil {
			return err
		}
		now := e.now()
		switch ev := p.GetEvent().(type) {
		case *lifecyclev1.Progress_Step:
			s := ev.Step
			applyStep(o, s, now)
			if threadWorthy(o, s) {
				st, detail := chat.ShownStatus(stepStatus(s.GetStatus()), s.GetDetail())
				threadLine = fmt.Sprintf("%s %s · %s: %s", chat.StatusMark(st), chat.StatusLabel(st), stepTitle(o, s.GetStepId()), detail)
			}
		case *lifecyclev1.Progress_Log:
			return tx.AppendLog(id, ev.Log.GetLevel()+" "+ev.Log.GetMessage())
		case *lifecyclev1.Progress_Artifact:
			a := ev.Artifact
			o.Artifacts = append(o.Artifacts, state.Artifact{ID: a.GetId(), Name: a.GetName(), SHA256: a.GetSha256(), Size: a.GetSize(), Location: a.GetLocation(), Revision: a.GetRevision()})
			threadLine = fmt.Sprintf("📦 %s %s (%d bytes, sha256 %s)", a.GetName(), a.GetId(), a.GetSize(), a.GetSha256())
			if _, err := tx.Append(e.event("system", "artifact", o, "ok", map[string]string{"id": a.GetId(), "sha256": a.GetSha256(), "location": a.GetLocation()})); err != nil {
				return err
			}
		default:
			return nil
		}
		o.UpdatedAt = now
		op = o
		return tx.PutOperation(o)
	})
	if err != nil {
		e.log.Warn("record progress", "op", id, "err", err)
		return
	}
	if op == nil {
		return
	}
	e.notifyChanged()
	e.emit(ctx, Update{Op: op})
	if threadLine != "" {
		e.o.Sink.Thread(ctx, op, threadLine)
	}
	e.runProgress(ctx, op)
}

// threadWorthy says whether a finished step goes to the operation's thread:
// what a person needs later, not every line (the message shows each step's
// state). A failure or a warning (a detail starting with ⚠️) always goes; a
// success only when it is the last step of its node, the node's result.
func threadWorthy(o *state.Operation, s *lifecyclev1.StepEvent) bool {
	if s.GetDetail() == "" || s.GetStatus() == lifecyclev1.StepStatus_STEP_STATUS_RUNNING {
		return false
	}
	if s.GetStatus() == lifecyclev1.StepStatus_STEP_STATUS_FAILED || strings.HasPrefix(s.GetDetail(), "⚠️") {
		return true
	}
	last := ""
	node := s.GetNode()
	for _, st := range o.Steps {
		if st.ID == s.GetStepId() && node == "" {
			node = st.Node
		}
		if node != "" && st.Node == node {
			last = st.ID
		}
	}
	return node != "" && last == s.GetStepId() && s.GetStatus() == lifecyclev1.StepStatus_STEP_STATUS_OK
}

func applyStep(o *state.Operation, s *lifecyclev1.StepEvent, now time.Time) {
	status, detail := stepStatus(s.GetStatus()), s.GetDetail()
	if n := o.DoneIn(s.GetStepId()); status == "skipped" && n > 0 {
		// A resumed run skips what this operation did before the stop: that
		// step was done, by an earlier attempt, not found done.
		status, detail = "ok", fmt.Sprintf("done in attempt %d (now: %s)", n, orDefault(detail, "nothing left to do"))
	}
	for i := range o.Steps {
		if o.Steps[i].ID == s.GetStepId() {
			st := &o.Steps[i]
			st.Status, st.Detail = status, detail
			if status == "running" && st.StartedAt.IsZero() {
				st.StartedAt = now
			}
			if status != "running" {
				st.EndedAt = now
			}
			return
		}
	}
	// A step the plan did not list (e.g. a retention note): append it.
	st := state.Step{ID: s.GetStepId(), Title: s.GetStepId(), Node: s.GetNode(), Status: status, Detail: detail, StartedAt: now}
	if status != "running" {
		st.EndedAt = now
	}
	o.Steps = append(o.Steps, st)
}

func stepTitle(o *state.Operation, id string) string {
	for _, s := range o.Steps {
		if s.ID == id {
			return s.Title
		}
	}
	return id
}

func stepStatus(s lifecyclev1.StepStatus) string {
	switch s {
	case lifecyclev1.StepStatus_STEP_STATUS_RUNNING:
		return "running"
	case lifecyclev1.StepStatus_STEP_STATUS_OK:
		return "ok"
	case lifecyclev1.StepStatus_STEP_STATUS_FAILED:
		return "failed"
	case lifecyclev1.StepStatus_STEP_STATUS_SKIPPED:
		return "skipped"
	}
	return "pending"
}

// voidApprovals handles a changed digest at re-plan: approvals are dropped, the
// lock is released, and the operation asks for approval again.
// mutate, if set, changes the operation in the same transaction (a resume
// keeps the interrupted attempt's steps in its history).
func (e *Engine) voidApprovals(ctx context.Context, op *state.Operation, plan *lifecyclev1.OperationPlan, digest string, mutate func(*state.Operation)) {
	planJSON, _ := protojson.Marshal(plan)
	why := fmt.Sprintf("the plan changed since it was approved (digest %s → %s); approvals are void, approve the new plan", host.ShortDigest(op.Digest), host.ShortDigest(digest))
	changes := planChanges(op.Plan, plan)
	if len(changes) > 0 {
		why += "\nWhat changed:\n" + strings.Join(changes, "\n")
	}
	// The new plan may have a new target: the promotion gate (R6) decides
	// again, from scratch.
	next := *op
	next.Target, next.Flags = plan.GetTarget(), nil
	for _, f := range op.Flags {
		if f != FlagSkipStaging && !strings.HasPrefix(f, FlagPromotedFrom) {
			next.Flags = append(next.Flags, f)
		}
	}
	flags, err := e.o.Policy.Promotion(&next, e.stagingLookup(ctx), e.now())
	if err != nil {
		e.finish(ctx, op.ID, "system", state.StateRefused, "refused", "the re-planned target needs staging first: "+err.Error(), nil)
		return
	}
	next.Flags = append(next.Flags, flags...)
	var buttons []Button
	updated, err := e.transitionTx(ctx, op.ID, state.StateAwaitingApproval, "system", "approvals voided", "voided",
		map[string]string{"old_digest": op.Digest, "new_digest": digest, "flags": strings.Join(next.Flags, ","), "changes": strings.Join(changes, "; ")}, func(o *state.Operation) {
			if mutate != nil {
				mutate(o)
			}
			o.Digest, o.Plan, o.Target, o.Steps = digest, planJSON, plan.GetTarget(), stepsFromPlan(plan)
			o.Result = "⚠️ " + why
			o.Flags = next.Flags
			o.ExpiresAt = e.now().Add(e.o.Policy.Expiry(o))
		}, func(tx *state.Tx, o *state.Operation) error {
			// Transition already deleted the approvals; the lock goes too, so
			// the cluster is not held while nobody has approved the new plan.
			if err := tx.ReleaseLock(o.Cluster, o.ID); err != nil {
				return err
			}
			var err error
			labels, kinds := approvalButtons()
			buttons, err = e.mintButtons(tx, o, labels, kinds...)
			return err
		})
	if err != nil {
		return
	}
	e.o.Sink.Thread(ctx, updated, "⚠️ "+why)
	e.emit(ctx, Update{Op: updated, Plan: plan, Buttons: buttons})
}

// stagingDrills is the newest succeeded, non-dry-run staging operation of
// every command whose manifest declares it a drill (Command.drill), for a
// command that needs them (the readiness gates). The engine knows neither
// the drills nor the commands: both come from the manifests.
func (e *Engine) stagingDrills(ctx context.Context) (*lifecyclev1.StagingDrills, error) {
	out := &lifecyclev1.StagingDrills{}
	newest := map[lifecyclev1.Drill]*state.Operation{}
	err := e.o.Store.View(ctx, func(tx *state.Tx) error {
		for _, spec := range e.grammar.Specs() {
			if spec.Plugin == "" || spec.GetDrill() == lifecyclev1.Drill_DRILL_UNSPECIFIED {
				continue
			}
			ops, err := tx.Operations(state.OpFilter{Command: spec.Name, States: []state.OpState{state.StateSucceeded}})
			if err != nil {
				return err
			}
			for _, o := range ops {
				if o.Environment != config.EnvStaging || dryRun(o) {
					continue
				}
				// Two commands may prove the same drill: the newest counts.
				if prev := newest[spec.GetDrill()]; prev == nil || o.EndedAt.After(prev.EndedAt) {
					newest[spec.GetDrill()] = o
				}
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	for drill, o := range newest {
		out.Drills = append(out.Drills, &lifecyclev1.DrillEvidence{Drill: drill, OperationId: o.ID, Command: o.Command, EndedUnix: o.EndedAt.Unix()})
	}
	// Deterministic order: the drills are part of the gates' plan digest.
	slices.SortFunc(out.Drills, func(a, b *lifecyclev1.DrillEvidence) int { return int(a.Drill - b.Drill) })
	return out, nil
}

// dryRun reports whether op changed nothing by request (--dry-run): it
// proves nothing for the promotion gate or the staging drills.
func dryRun(op *state.Operation) bool { return op.Args[sdk.ArgDryRun] == "true" }

// authorizeRun applies the request-time policy again (freeze, window, role)
// to an operation about to run.
func (e *Engine) authorizeRun(ctx context.Context, op *state.Operation) error {
	cl := e.o.Config.Cluster(op.Cluster)
	if cl == nil {
		return fmt.Errorf("cluster %q is no longer configured", op.Cluster)
	}
	frozen, err := e.Freeze(ctx, cl.Name)
	if err != nil {
		return err
	}
	return e.o.Policy.Authorize(ctx, PolicyRequest{User: op.Requester, Cluster: cl, Command: op.Command,
		Disruptive: op.Disruptive, Args: op.Args, Now: e.now(), Frozen: frozen, System: slices.Contains(op.Flags, approvals.FlagScheduled)})
}

// stagingLookup finds succeeded staging operations for the promotion gate.
func (e *Engine) stagingLookup(ctx context.Context) StagingLookup {
	return func(command, target string, since time.Time) (*state.Operation, error) {
		var found *state.Operation
		err := e.o.Store.View(ctx, func(tx *state.Tx) error {
			ops, err := tx.Operations(state.OpFilter{Command: command, States: []state.OpState{state.StateSucceeded}, Since: since})
			if err != nil {
				return err
			}
			for _, o := range ops {
				if stagingEvidence(o, target, since) {
					found = o
					return nil
				}
			}
			return nil
		})
		return found, err
	}
}

// stagingEvidence reports whether o (a succeeded operation of the command)
// proves target on staging for R6: it ran in the staging environment, on the
// same target, ended no earlier than since, and really ran (a dry run proves
// nothing). A production success is never staging evidence.
func stagingEvidence(o *state.Operation, target string, since time.Time) bool {
	return o.Environment == config.EnvStaging && o.Target == target && !o.EndedAt.Before(since) && !dryRun(o)
}

// Recover marks operations that were running when the bot stopped as
// interrupted. Their cluster locks stay until /talos resume or /talos abandon.
// It then posts every interrupted operation, and every one still awaiting
// approval, to its channel again: a restart strands no request.
func (e *Engine) Recover(ctx context.Context) ([]string, error) {
	var ids []string
	err := e.o.Store.Update(ctx, func(tx *state.Tx) error {
		ops, err := tx.Operations(state.OpFilter{States: []state.OpState{state.StateRunning}})
		if err != nil {
			return err
		}
		for _, op := range ops {
			o, err := tx.Transition(op.ID, state.StateInterrupted, func(o *state.Operation) {
				o.UpdatedAt = e.now()
				closeRunning(o, describeStop(state.StateInterrupted, "system"))
				o.Result = "interrupted: talosbot stopped while this was running"
				if end := endingText(o, state.StateInterrupted); end != "" {
					o.Result += "\n" + end
				}
			})
			if err != nil {
				return err
			}
			if _, err := tx.Append(e.event("system", "interrupted", o, "interrupted",
				map[string]string{"reason": "talosbot stopped while the operation was running"})); err != nil {
				return err
			}
			ids = append(ids, op.ID)
		}
		return nil
	})
	if err == nil && len(ids) > 0 {
		e.notifyChanged()
	}
	sort.Strings(ids)
	if err == nil {
		err = e.recoverUnstarted(ctx)
	}
	if err == nil {
		// Every interrupted operation, from this stop or an earlier one, is
		// posted to its channel with Resume and Abandon (endings.go).
		err = e.announceInterrupted(ctx)
	}
	if err == nil {
		// Every operation awaiting approval is posted again with its card
		// and buttons, or marked expired if its request ran out meanwhile
		// (awaiting.go).
		err = e.announceAwaiting(ctx)
	}
	return ids, err
}

// recoverUnstarted deals with operations a stop caught before their run
// began: an approved one (it holds its cluster lock) goes on to its re-plan
// and run, which check the digest and policy again; one still being planned
// fails and says so, to be requested again.
func (e *Engine) recoverUnstarted(ctx context.Context) error {
	var approved, planned []string
	err := e.o.Store.View(ctx, func(tx *state.Tx) error {
		ops, err := tx.Operations(state.OpFilter{States: []state.OpState{state.StateApproved, state.StatePlanned}})
		for _, op := range ops {
			if op.State == state.StateApproved {
				approved = append(approved, op.ID)
			} else {
				planned = append(planned, op.ID)
			}
		}
		return err
	})
	if err != nil {
		return err
	}
	for _, id := range planned {
		e.finish(ctx, id, "system", state.StateFailed, "stopped while planning", "talosbot stopped before the plan was ready; run the command again", nil)
	}
	for _, id := range approved {
		e.goRun(func(ctx context.Context) { e.execute(ctx, id) })
	}
	return nil
}
