package bot

import (
	"context"
	"fmt"
	"strings"
	"time"

	lifecyclev1 "github.com/talosbot/talosbot/plugins/proto/lifecycle/v1"
	"github.com/talosbot/talosbot/state"
)

// botCommand is a command the bot serves itself (no plugin).
type botCommand struct {
	spec CommandSpec
	run  func(e *Engine, ctx context.Context, from Origin, inv *Invocation) error
}

// botCommands lists every bot command. Each feature file contributes its own
// list, so features do not share one switch.
func botCommands() []botCommand {
	var out []botCommand
	out = append(out, coreCommands()...)
	out = append(out, auditCommands()...)
	out = append(out, policyCommands()...)
	return out
}

func botCommandSpecs() []CommandSpec {
	var out []CommandSpec
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
	spec := func(c *lifecyclev1.Command) CommandSpec { return CommandSpec{Command: c} }
	return []botCommand{
		{spec(&lifecyclev1.Command{Name: "help", Summary: "list commands, or show one command's usage", Effect: ro,
			Args: []*lifecyclev1.Arg{{Name: "command", Description: "a command name, e.g. upgrade"}}, Example: "/talos help upgrade talos"}),
			func(e *Engine, ctx context.Context, from Origin, inv *Invocation) error {
				e.o.Sink.Reply(ctx, from, e.help(inv.Args["command"]))
				return nil
			}},
		{spec(&lifecyclev1.Command{Name: "status", Summary: "cluster locks and operations in flight", Effect: ro,
			Args: []*lifecyclev1.Arg{{Name: "cluster"}}, Example: "/talos status production"}),
			func(e *Engine, ctx context.Context, from Origin, inv *Invocation) error {
				txt, err := e.status(ctx, inv.Args["cluster"])
				if err != nil {
					e.o.Sink.Reply(ctx, from, err.Error())
					return err
				}
				e.o.Sink.Reply(ctx, from, txt)
				return nil
			}},
		{spec(&lifecyclev1.Command{Name: "resume", Summary: "continue an interrupted operation (steps already done are skipped)", Effect: dis, Args: id("resume"), Example: "/talos resume 3f2a9c01bd4e"}),
			func(e *Engine, ctx context.Context, from Origin, inv *Invocation) error {
				return e.Resume(ctx, from, inv.Args["id"])
			}},
		{spec(&lifecyclev1.Command{Name: "abandon", Summary: "give up an interrupted operation and release its cluster lock", Effect: dis, Args: id("abandon"), Example: "/talos abandon 3f2a9c01bd4e"}),
			func(e *Engine, ctx context.Context, from Origin, inv *Invocation) error {
				return e.Abandon(ctx, from, inv.Args["id"])
			}},
		{spec(&lifecyclev1.Command{Name: "cancel", Summary: "cancel an operation that has not finished", Effect: dis, Args: id("cancel"), Example: "/talos cancel 3f2a9c01bd4e"}),
			func(e *Engine, ctx context.Context, from Origin, inv *Invocation) error {
				return e.Cancel(ctx, from, inv.Args["id"])
			}},
	}
}

func (e *Engine) botCommand(ctx context.Context, from Origin, inv *Invocation) error {
	for _, c := range botCommands() {
		if c.spec.Name == inv.Spec.Name {
			return c.run(e, ctx, from, inv)
		}
	}
	return fmt.Errorf("bot command %q has no handler", inv.Spec.Name)
}

func (e *Engine) help(name string) string {
	if name != "" {
		if s, ok := e.grammar.Lookup(name); ok {
			return helpFor(s)
		}
		// "help upgrade" lists every command starting with that word.
		var b strings.Builder
		for _, s := range e.grammar.Specs() {
			if strings.HasPrefix(s.Name, name+" ") {
				b.WriteString(helpFor(s) + "\n")
			}
		}
		if b.Len() > 0 {
			return strings.TrimSpace(b.String())
		}
		return fmt.Sprintf("unknown command %q. %s", name, e.grammar.commandList())
	}
	var b strings.Builder
	b.WriteString("talosbot commands:\n")
	for _, s := range e.grammar.Specs() {
		tag := ""
		switch {
		case s.GetEffect() == lifecyclev1.Effect_EFFECT_DISRUPTIVE && s.Plugin != "":
			tag = " ⚠️ disruptive"
		case s.GetEffect() == lifecyclev1.Effect_EFFECT_WRITE:
			tag = " ✏️ operators only (writes files)"
		}
		fmt.Fprintf(&b, "• `%s` — %s%s\n", Usage(s.Command), s.GetSummary(), tag)
	}
	return strings.TrimSpace(b.String())
}

func helpFor(s CommandSpec) string {
	var b strings.Builder
	fmt.Fprintf(&b, "`%s` — %s", Usage(s.Command), s.GetSummary())
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

// status shows each cluster's lock (holder, age, requester) and operations in
// flight.
func (e *Engine) status(ctx context.Context, cluster string) (string, error) {
	names := e.o.Config.ClusterNames()
	if cluster != "" {
		if e.o.Config.Cluster(cluster) == nil {
			return "", fmt.Errorf("unknown cluster %q; clusters: %s", cluster, strings.Join(names, ", "))
		}
		names = []string{cluster}
	}
	var b strings.Builder
	err := e.o.Store.View(ctx, func(tx *state.Tx) error {
		for _, n := range names {
			l, err := tx.Lock(n)
			if err != nil {
				return err
			}
			if l == nil {
				fmt.Fprintf(&b, "*%s*: unlocked\n", n)
			} else {
				fmt.Fprintf(&b, "*%s*: locked by `%s` (%s) for %s, requested by %s\n", n, l.OpID, l.Command, e.now().Sub(l.Since).Truncate(time.Second), l.Holder)
			}
			ops, err := tx.Operations(state.OpFilter{Cluster: n, States: []state.OpState{state.StateAwaitingApproval, state.StateApproved, state.StateRunning, state.StateInterrupted}})
			if err != nil {
				return err
			}
			for _, op := range ops {
				fmt.Fprintf(&b, "  • `%s` %s — %s, by %s, %s ago\n", op.ID, op.Command, op.State, op.Requester, e.now().Sub(op.CreatedAt).Truncate(time.Second))
				if op.State == state.StateInterrupted {
					fmt.Fprintf(&b, "    interrupted: `/talos resume %s` or `/talos abandon %s`\n", op.ID, op.ID)
				}
			}
		}
		return nil
	})
	return strings.TrimSpace(b.String()), err
}
