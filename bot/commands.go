// Package bot is talosbot's command router and the commands the bot answers
// itself: help, status, approve, deny, resume, abandon, cancel, the audit
// commands and the freeze commands. New assembles the engine (package
// engine) with them; everything that does cluster work is a plugin.
package bot

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/talosbot/talosbot/approvals"
	"github.com/talosbot/talosbot/bot/chat"
	"github.com/talosbot/talosbot/bot/engine"
	"github.com/talosbot/talosbot/bot/escalate"
	"github.com/talosbot/talosbot/bot/grammar"
	"github.com/talosbot/talosbot/bot/render"
	"github.com/talosbot/talosbot/config"
	"github.com/talosbot/talosbot/plugins/sdk"
	lifecyclev1 "github.com/talosbot/talosbot/plugins/sdk/proto/lifecycle/v1"
	"github.com/talosbot/talosbot/state"
)

// botCommand is a command the bot serves itself (no plugin).
type botCommand struct {
	spec grammar.CommandSpec
	run  func(ctx context.Context, r *Router, from engine.Origin, inv *grammar.Invocation) error
}

// botCommands lists every bot command. Each feature file contributes its own
// list, so features do not share one switch.
func botCommands() []botCommand {
	var out []botCommand
	out = append(out, coreCommands()...)
	out = append(out, auditCommands()...)
	out = append(out, policyCommands()...)
	out = append(out, releaseCommands()...)
	out = append(out, certCommands()...)
	return out
}

func botCommandSpecs() []grammar.CommandSpec {
	var out []grammar.CommandSpec
	for _, c := range botCommands() {
		out = append(out, c.spec)
	}
	return out
}

func coreCommands() []botCommand {
	ro, dis := lifecyclev1.Effect_EFFECT_READ_ONLY, lifecyclev1.Effect_EFFECT_DISRUPTIVE
	id := func(what string) []*lifecyclev1.Arg {
		return []*lifecyclev1.Arg{{Name: "id", Required: true, Description: "the operation id to " + what}}
	}
	spec := func(c *lifecyclev1.Command) grammar.CommandSpec { return grammar.CommandSpec{Command: c} }
	return []botCommand{
		{grammar.CommandSpec{Rest: true, Command: &lifecyclev1.Command{Name: "help", Summary: "list commands, or show one command's usage", Effect: ro,
			Args: []*lifecyclev1.Arg{{Name: "command", Description: "a command name, e.g. upgrade or upgrade talos"}}, Example: "/talos help upgrade talos"}},
			func(ctx context.Context, r *Router, from engine.Origin, inv *grammar.Invocation) error {
				r.sink.Reply(ctx, from, help(r, inv.Args["command"]))
				return nil
			}},
		{spec(&lifecyclev1.Command{Name: "status", Summary: "per cluster: lock, freeze, maintenance window, running versions, last operation and operations in flight", Effect: ro,
			Args: []*lifecyclev1.Arg{{Name: "cluster"}}, Example: "/talos status production"}),
			func(ctx context.Context, r *Router, from engine.Origin, inv *grammar.Invocation) error {
				cluster := inv.Args["cluster"]
				if cluster != "" && r.cfg.Cluster(cluster) == nil {
					err := fmt.Errorf("unknown cluster %s; %s", chat.Echo(cluster), r.cfg.ClustersHint(cluster))
					r.sink.Reply(ctx, from, err.Error())
					return err
				}
				names, hidden, err := statusAuthorize(ctx, r, from.User, cluster)
				if err != nil {
					r.ops.Refuse(ctx, from, cluster, inv, err)
					return err
				}
				txt, err := status(ctx, r, from.User, names)
				if err != nil {
					r.sink.Reply(ctx, from, err.Error())
					return err
				}
				if len(hidden) > 0 {
					txt += fmt.Sprintf("\n(not shown, as %s may not read them: %s)", from.User, strings.Join(hidden, ", "))
				}
				r.sink.Reply(ctx, from, txt)
				return nil
			}},
		{spec(&lifecyclev1.Command{Name: "approve", Summary: "approve an operation awaiting approval, as its Approve button does (same checks)", Effect: dis, Args: id("approve"), Example: "/talos approve 3f2a9c01bd4e"}),
			func(ctx context.Context, r *Router, from engine.Origin, inv *grammar.Invocation) error {
				return r.ops.Approve(ctx, from, inv.Args["id"])
			}},
		{spec(&lifecyclev1.Command{Name: "deny", Summary: "deny an operation awaiting approval, as its Deny button does", Effect: dis, Args: id("deny"), Example: "/talos deny 3f2a9c01bd4e"}),
			func(ctx context.Context, r *Router, from engine.Origin, inv *grammar.Invocation) error {
				return r.ops.Deny(ctx, from, inv.Args["id"])
			}},
		{spec(&lifecyclev1.Command{Name: "resume", Summary: "continue an interrupted operation (steps already done are skipped)", Effect: dis,
			Args: append(id("resume"), &lifecyclev1.Arg{Name: "ignore-alert", Flag: true,
				Description: "an alert name the resumed roll goes on past (it paused on it; audited); other alerts still pause it"}),
			Example: "/talos resume 3f2a9c01bd4e"}),
			func(ctx context.Context, r *Router, from engine.Origin, inv *grammar.Invocation) error {
				return r.resume(ctx, from, inv)
			}},
		{spec(&lifecyclev1.Command{Name: "abandon", Summary: "give up an interrupted operation and release its cluster lock", Effect: dis, Args: id("abandon"), Example: "/talos abandon 3f2a9c01bd4e"}),
			func(ctx context.Context, r *Router, from engine.Origin, inv *grammar.Invocation) error {
				return r.ops.Abandon(ctx, from, inv.Args["id"])
			}},
		{spec(&lifecyclev1.Command{Name: "pause", Summary: "stop a running roll before its next node (resume continues it)", Effect: dis, Args: id("pause"), Example: "/talos pause 3f2a9c01bd4e"}),
			func(ctx context.Context, r *Router, from engine.Origin, inv *grammar.Invocation) error {
				return r.ops.Pause(ctx, from, inv.Args["id"])
			}},
		{spec(&lifecyclev1.Command{Name: "cancel", Summary: "cancel an operation that has not finished", Effect: dis, Args: id("cancel"), Example: "/talos cancel 3f2a9c01bd4e"}),
			func(ctx context.Context, r *Router, from engine.Origin, inv *grammar.Invocation) error {
				return r.ops.Cancel(ctx, from, inv.Args["id"])
			}},
	}
}

// New builds the engine with the bot's own commands: the talosbot that
// chat adapters talk to. Call Recover once at start-up, before serving.
//
// The router is built here with what its commands read (configuration,
// store, policy, sink, clock: the same values the engine is given, so a
// command answers through the same Sink and asks the same Policy as an
// operation) and, once the engine exists, with the engine's operation
// actions and grammar. The engine hands it an invocation and nothing else:
// it is not reached back through for state.
func New(ctx context.Context, o engine.Options) (*engine.Engine, error) {
	if o.Clock == nil {
		o.Clock = time.Now
	}
	r := &Router{cfg: o.Config, store: o.Store, policy: o.Policy, sink: o.Sink, clock: o.Clock}
	o.Commands = r
	e, err := engine.New(ctx, o)
	if err != nil {
		return nil, err
	}
	// The one place the cycle closes: the engine serves bot commands through
	// the router, and some of them (approve, resume, cancel, …) are the
	// engine's actions. Serve is only called from the engine's Submit, which
	// cannot run before New returns.
	r.ops, r.grammar = e, e.Grammar()
	return e, nil
}

// Catalogue reads every plugin's manifest and returns the whole command
// catalogue (the bot's own commands first), for config.CheckCommands: New
// checks the configuration against it, and so does `talosbot config check`.
func Catalogue(ctx context.Context, plugins engine.Plugins) ([]config.CommandInfo, error) {
	return engine.Catalogue(ctx, plugins, &Router{})
}

// Grammar is the bot's whole grammar (engine.Grammar with its own commands).
func Grammar(ctx context.Context, plugins engine.Plugins) (*grammar.Grammar, error) {
	return engine.Grammar(ctx, plugins, &Router{})
}

// Operations is what the bot's commands ask the engine to do: the actions
// on an operation (the same as its buttons), the refusal path, and the
// reads that belong to the engine (a cluster by name or channel, its
// freeze, the status providers, suggestion buttons). *engine.Engine
// implements it.
type Operations interface {
	Approve(ctx context.Context, from engine.Origin, id string) error
	Deny(ctx context.Context, from engine.Origin, id string) error
	Resume(ctx context.Context, from engine.Origin, id string) error
	Operation(ctx context.Context, id string) (*state.Operation, error)
	Abandon(ctx context.Context, from engine.Origin, id string) error
	Pause(ctx context.Context, from engine.Origin, id string) error
	Cancel(ctx context.Context, from engine.Origin, id string) error
	Refuse(ctx context.Context, from engine.Origin, cluster string, inv *grammar.Invocation, err error)
	ResolveCluster(name, channel string) (*config.Cluster, error)
	Freeze(ctx context.Context, cluster string) (*engine.Freeze, error)
	CommandButtons(ctx context.Context, sugg []engine.Suggestion) ([]engine.Button, error)
	StatusFacts(ctx context.Context, user string, clusters []string) map[string][]string
}

var _ Operations = (*engine.Engine)(nil)

// Router serves the bot's own commands for the engine (engine.Commands).
// Its zero value lists the commands (Specs) but serves none: New builds the
// one that serves.
type Router struct {
	cfg     *config.Config
	store   *state.Store
	policy  engine.Policy
	sink    engine.Sink
	clock   func() time.Time
	ops     Operations
	grammar *grammar.Grammar
}

var _ engine.Commands = (*Router)(nil)

// now is the bot's clock in UTC, as the engine's is.
func (r *Router) now() time.Time { return r.clock().UTC() }

// Specs lists the bot's own commands for the grammar.
func (*Router) Specs() []grammar.CommandSpec { return botCommandSpecs() }

// Serve runs the bot command inv names.
func (r *Router) Serve(ctx context.Context, from engine.Origin, inv *grammar.Invocation) error {
	if r.ops == nil {
		// A router that New did not build: fail closed rather than panic.
		return fmt.Errorf("bot command %q: the router was not built by bot.New", inv.Spec.Name)
	}
	for _, c := range botCommands() {
		if c.spec.Name == inv.Spec.Name {
			return c.run(ctx, r, from, inv)
		}
	}
	return fmt.Errorf("bot command %q has no handler", inv.Spec.Name)
}

func help(r *Router, name string) string {
	if name != "" {
		if s, ok := r.grammar.Lookup(name); ok {
			return helpFor(s)
		}
		// "help upgrade" lists every command starting with that word.
		var b strings.Builder
		for _, s := range r.grammar.Specs() {
			if strings.HasPrefix(s.Name, name+" ") {
				b.WriteString(helpFor(s) + "\n")
			}
		}
		if b.Len() > 0 {
			return strings.TrimSpace(b.String())
		}
		return fmt.Sprintf("unknown command %s. %s", chat.Echo(name), r.grammar.CommandList())
	}
	var b strings.Builder
	b.WriteString("talosbot commands:\n")
	for _, s := range r.grammar.Specs() {
		tag := ""
		switch {
		case s.GetEffect() == lifecyclev1.Effect_EFFECT_DISRUPTIVE && s.Plugin != "":
			tag = " ⚠️ disruptive"
		case s.GetEffect() == lifecyclev1.Effect_EFFECT_WRITE:
			tag = " ✏️ operators only (writes files)"
		}
		fmt.Fprintf(&b, "• `%s` — %s%s\n", grammar.Usage(s.Command), s.GetSummary(), tag)
	}
	return strings.TrimSpace(b.String())
}

func helpFor(s grammar.CommandSpec) string {
	var b strings.Builder
	fmt.Fprintf(&b, "`%s` — %s", grammar.Usage(s.Command), s.GetSummary())
	for _, a := range s.GetArgs() {
		if a.GetDescription() != "" {
			n := a.GetName()
			if a.GetFlag() {
				n = "--" + n
			}
			fmt.Fprintf(&b, "\n  %s: %s", n, a.GetDescription())
		}
	}
	if s.GetExample() != "" {
		fmt.Fprintf(&b, "\n  example: %s", s.GetExample())
	}
	return b.String()
}

// statusAuthorize returns the clusters user may read the status of, and the
// ones left out. Status reads each cluster through its plugins (credentials
// loaded, a Plan against the cluster) and shows what runs there, so, like
// audit, it needs a role that may read: a named cluster the policy refuses,
// or no readable cluster at all, refuses the command; otherwise the clusters
// refused are left out, and never asked.
func statusAuthorize(ctx context.Context, r *Router, user, cluster string) (readable, hidden []string, err error) {
	names := r.cfg.ClusterNames()
	if cluster != "" {
		names = []string{cluster}
	}
	var firstErr error
	for _, n := range names {
		cl := r.cfg.Cluster(n)
		if cl == nil {
			return nil, nil, fmt.Errorf("unknown cluster %s; %s", chat.Echo(n), r.cfg.ClustersHint(n))
		}
		if err := r.policy.Authorize(ctx, engine.PolicyRequest{User: user, Cluster: cl, Command: "status", Now: r.now()}); err != nil {
			hidden = append(hidden, n)
			if firstErr == nil {
				firstErr = err
			}
			continue
		}
		readable = append(readable, n)
	}
	switch {
	case len(readable) > 0:
		return readable, hidden, nil
	case firstErr == nil:
		return nil, nil, errors.New("no cluster is configured")
	case len(names) > 1:
		return nil, nil, fmt.Errorf("%s may read the status of no cluster: %w", user, firstErr)
	}
	return nil, nil, firstErr
}

// status shows, per cluster: the lock (holder, age), the freeze (who, why,
// since), the maintenance window (open now, or when it next opens), what the
// status providers read from the cluster (the running Talos and Kubernetes
// versions; engine.StatusFacts, each bounded by timeouts.status, "not read
// (why)" when the cluster does not answer), the last change that succeeded
// (its target and age, from the store), the last operation with its result,
// and the operations in flight with their next commands.
// It shows only names, the clusters the user may read (statusAuthorize).
func status(ctx context.Context, r *Router, user string, names []string) (string, error) {
	now := r.now()
	// Every cluster's providers at once, before the store is read, so that
	// status costs one timeout at most, and no store transaction waits on a
	// cluster.
	facts := r.ops.StatusFacts(ctx, user, names)
	// Late steps (bot/escalate), read before the loop's transactions.
	lateByOp := map[string][]string{}
	if late, err := escalate.LateSteps(ctx, r.cfg, r.store, now); err == nil {
		for _, l := range late {
			lateByOp[l.Op.ID] = append(lateByOp[l.Op.ID], l.Text())
		}
	}
	ago := func(t time.Time) string { return render.Ago(t, now) }
	var b strings.Builder
	for _, n := range names {
		fr, err := r.ops.Freeze(ctx, n)
		if err != nil {
			return "", err
		}
		err = r.store.View(ctx, func(tx *state.Tx) error {
			l, err := tx.Lock(n)
			if err != nil {
				return err
			}
			cl := r.cfg.Cluster(n)
			fmt.Fprintf(&b, "*%s* (%s)\n", n, cl.Environment)
			if l == nil {
				b.WriteString("  lock: free\n")
			} else {
				fmt.Fprintf(&b, "  lock: held by `%s` (%s) for %s, requested by %s\n", l.OpID, l.Command, chat.Duration(now.Sub(l.Since)), l.Holder)
			}
			if fr != nil {
				fmt.Fprintf(&b, "  🧊 frozen by %s since %s (%s): %q — `/talos unfreeze %s`\n", fr.By, fr.Since.UTC().Format("2006-01-02 15:04 MST"), ago(fr.Since), fr.Reason, n)
			} else {
				b.WriteString("  freeze: none\n")
			}
			if ws := r.cfg.Policy[cl.Environment].Windows; len(ws) > 0 {
				open := "closed now"
				if approvals.InWindow(ws, now) {
					open = "open now"
				} else if next, ok := approvals.NextOpening(ws, now); ok {
					open = fmt.Sprintf("closed now, next opens %s (in %s)", next.Format("Mon 2006-01-02 15:04 MST"), chat.Duration(next.Sub(now)))
				}
				fmt.Fprintf(&b, "  maintenance window: %s (%s)\n", open, approvals.DescribeWindows(ws))
			}
			for _, l := range facts[n] {
				b.WriteString("  " + l + "\n")
			}
			all, err := tx.Operations(state.OpFilter{Cluster: n})
			if err != nil {
				return err
			}
			var last, lastChange *state.Operation
			for _, op := range all {
				if !op.State.Terminal() {
					continue
				}
				if last == nil || op.EndedAt.After(last.EndedAt) {
					last = op
				}
				if op.State == state.StateSucceeded && op.Disruptive && op.Target != "" && op.Args[sdk.ArgDryRun] != "true" &&
					(lastChange == nil || op.EndedAt.After(lastChange.EndedAt)) {
					lastChange = op
				}
			}
			if lastChange != nil {
				fmt.Fprintf(&b, "  last change: /talos %s → %s, succeeded %s (`%s`)\n", lastChange.Command, lastChange.Target, ago(lastChange.EndedAt), lastChange.ID)
			}
			if last != nil {
				fmt.Fprintf(&b, "  last operation: `%s` /talos %s — %s %s, by %s", last.ID, last.Command, last.State, ago(last.EndedAt), last.Requester)
				if r := strings.SplitN(last.Result, "\n", 2)[0]; r != "" && r != string(last.State) {
					b.WriteString(": " + r)
				}
				b.WriteString("\n")
			}
			for _, op := range all {
				switch op.State {
				case state.StateAwaitingApproval, state.StateApproved, state.StateRunning, state.StateInterrupted:
				default:
					continue
				}
				fmt.Fprintf(&b, "  • `%s` %s — %s, by %s, %s\n", op.ID, op.Command, op.State, op.Requester, ago(op.CreatedAt))
				if op.State == state.StateInterrupted {
					fmt.Fprintf(&b, "    interrupted: `/talos resume %s` or `/talos abandon %s`\n", op.ID, op.ID)
				}
				for _, l := range lateByOp[op.ID] {
					b.WriteString("    " + l + "\n")
				}
			}
			return nil
		})
		if err != nil {
			return "", err
		}
	}
	return strings.TrimSpace(b.String()), nil
}
