package bot

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/talosbot/talosbot/bot/auditview"
	"github.com/talosbot/talosbot/bot/chat"
	"github.com/talosbot/talosbot/bot/engine"
	"github.com/talosbot/talosbot/bot/grammar"
	"github.com/talosbot/talosbot/config"
	lifecyclev1 "github.com/talosbot/talosbot/plugins/sdk/proto/lifecycle/v1"
	"github.com/talosbot/talosbot/state"
)

// Page sizes of /talos audit: chat tables stay short; "more" pages on.
const (
	auditDefaultLimit = 15
	auditMaxLimit     = 100
)

// auditCommands are the audit-trail commands (/talos audit, /talos audit
// head, /talos op).
func auditCommands() []botCommand {
	ro := lifecyclev1.Effect_EFFECT_READ_ONLY
	flag := func(name, desc string) *lifecyclev1.Arg {
		return &lifecyclev1.Arg{Name: name, Flag: true, Description: desc}
	}
	return []botCommand{
		{grammar.CommandSpec{Command: &lifecyclev1.Command{Name: "audit", Summary: "audit trail, newest first, with a button for the next page", Effect: ro,
			Args: []*lifecyclev1.Arg{
				flag("cluster", "only this cluster"),
				flag("user", "only what this user did"),
				flag("op", "only this operation type: a command name as /talos help lists it"),
				flag("result", "only this result, e.g. failed, refused, succeeded"),
				flag("action", "only this action, e.g. approval, refused"),
				flag("op_id", "only this operation's records"),
				flag("since", "only records younger than this (7d, 12h) or after a time (2026-05-01)"),
				flag("until", "only records older than this (a duration back, or a time)"),
				flag("limit", fmt.Sprintf("records per page (default %d, at most %d)", auditDefaultLimit, auditMaxLimit)),
				flag("before", "paging cursor set by the More button: records with a smaller seq"),
			},
			Example: `/talos audit --cluster production --result failed --since 7d`}},
			func(ctx context.Context, r *Router, from engine.Origin, inv *grammar.Invocation) error {
				return auditQuery(ctx, r, from, inv)
			}},
		{grammar.CommandSpec{Command: &lifecyclev1.Command{Name: "audit head", Effect: ro,
			Summary: "verify the audit chain and post its head (seq and hash) to pin outside the bot; check it later with `talosbot audit verify --expect-head HASH`",
			Example: "/talos audit head"}},
			func(ctx context.Context, r *Router, from engine.Origin, inv *grammar.Invocation) error {
				return auditHead(ctx, r, from, inv)
			}},
		{grammar.CommandSpec{Command: &lifecyclev1.Command{Name: "op", Summary: "an operation's maintenance record: who, plan, snapshot, steps, validation", Effect: ro,
			Args:    []*lifecyclev1.Arg{{Name: "id", Required: true, Description: "the operation id"}},
			Example: "/talos op 3f2a9c01bd4e"}},
			func(ctx context.Context, r *Router, from engine.Origin, inv *grammar.Invocation) error {
				return maintenanceRecord(ctx, r, from, inv)
			}},
	}
}

// auditAuthorize lets a user read the audit of cluster, or of every cluster
// when cluster is "": reading needs a role (viewer or better) in each
// environment whose records would be shown.
func auditAuthorize(ctx context.Context, r *Router, user, cluster string) error {
	var cls []*config.Cluster
	if cluster != "" {
		cl := r.cfg.Cluster(cluster)
		if cl == nil {
			return fmt.Errorf("unknown cluster %s; %s", chat.Echo(cluster), r.cfg.ClustersHint(cluster))
		}
		cls = append(cls, cl)
	} else {
		for i := range r.cfg.Clusters {
			cls = append(cls, &r.cfg.Clusters[i])
		}
	}
	var readable, refused []string
	var firstErr error
	for _, cl := range cls {
		err := r.policy.Authorize(ctx, engine.PolicyRequest{User: user, Cluster: cl, Command: "audit", Disruptive: false, Now: r.now()})
		if err != nil {
			refused = append(refused, cl.Name)
			if firstErr == nil {
				firstErr = err
			}
			continue
		}
		readable = append(readable, cl.Name)
	}
	switch {
	case len(refused) == 0:
		return nil
	case cluster != "" || len(readable) == 0:
		return firstErr
	}
	return fmt.Errorf("%s may not read the audit of %s; name a cluster you can read: --cluster %s",
		user, strings.Join(refused, ", "), strings.Join(readable, " or --cluster "))
}

func auditQuery(ctx context.Context, r *Router, from engine.Origin, inv *grammar.Invocation) error {
	q, err := auditview.ParseFilter(func(k string) string { return inv.Args[k] }, r.now(), auditDefaultLimit, auditMaxLimit)
	if err != nil {
		r.sink.Reply(ctx, from, (&grammar.UsageError{Msg: err.Error(), Usage: grammar.Usage(inv.Spec.Command)}).Error())
		return err
	}
	if err := auditAuthorize(ctx, r, from.User, q.Cluster); err != nil {
		r.ops.Refuse(ctx, from, q.Cluster, inv, err)
		return err
	}
	page := q
	page.Limit = q.Limit + 1 // one extra record says whether there is a next page
	recs, err := r.store.QueryAudit(ctx, page)
	if err != nil {
		r.sink.Reply(ctx, from, "could not read the audit trail: "+err.Error())
		return err
	}
	more := len(recs) > q.Limit
	if more {
		recs = recs[:q.Limit]
	}
	var b strings.Builder
	desc := auditview.DescribeFilter(state.AuditQuery{Cluster: q.Cluster, Actor: q.Actor, Command: q.Command, Result: q.Result, Action: q.Action, OpID: q.OpID, Since: q.Since, Until: q.Until})
	if desc == "" {
		desc = "all records"
	}
	fmt.Fprintf(&b, "*Audit* (%s), newest first", desc)
	if q.BeforeSeq > 0 {
		fmt.Fprintf(&b, ", before seq %d", q.BeforeSeq)
	}
	b.WriteString(":\n")
	if len(recs) == 0 {
		b.WriteString("no audit records match")
		r.sink.Reply(ctx, from, b.String())
		return nil
	}
	b.WriteString("```\n" + auditview.ChatTable(recs) + "\n```")
	if !more {
		r.sink.Reply(ctx, from, b.String())
		return nil
	}
	next := q
	next.BeforeSeq = recs[len(recs)-1].Seq
	buttons, err := r.ops.CommandButtons(ctx, []engine.Suggestion{{Label: "More", Command: "/talos audit " + auditview.FilterArgs(next)}})
	if err != nil {
		r.sink.Reply(ctx, from, b.String()+"\n(could not offer the next page: "+err.Error()+")")
		return nil
	}
	r.sink.ReplyButtons(ctx, from, b.String(), buttons)
	return nil
}

func maintenanceRecord(ctx context.Context, r *Router, from engine.Origin, inv *grammar.Invocation) error {
	id := inv.Args["id"]
	var (
		op   *state.Operation
		apps []state.Approval
	)
	err := r.store.View(ctx, func(tx *state.Tx) error {
		var err error
		if op, err = tx.Operation(id); err != nil {
			return err
		}
		apps, err = tx.Approvals(id)
		return err
	})
	if errors.Is(err, state.ErrNotFound) {
		r.sink.Reply(ctx, from, fmt.Sprintf("no operation %s; find ids with /talos audit or /talos status", chat.Echo(id)))
		return err
	}
	if err != nil {
		r.sink.Reply(ctx, from, "could not read operation "+id+": "+err.Error())
		return err
	}
	if cl := r.cfg.Cluster(op.Cluster); cl != nil {
		if err := r.policy.Authorize(ctx, engine.PolicyRequest{User: from.User, Cluster: cl, Command: "op", Disruptive: false, Now: r.now()}); err != nil {
			r.ops.Refuse(ctx, from, op.Cluster, inv, err)
			return err
		}
	} else if err := auditAuthorize(ctx, r, from.User, ""); err != nil {
		// A cluster removed from the config: only users who can read every
		// configured cluster see its records.
		r.ops.Refuse(ctx, from, op.Cluster, inv, err)
		return err
	}
	recs, err := r.store.QueryAudit(ctx, state.AuditQuery{OpID: id, Limit: 100000})
	if err != nil {
		r.sink.Reply(ctx, from, "could not read the audit trail: "+err.Error())
		return err
	}
	r.sink.Reply(ctx, from, auditview.MaintenanceRecord(op, recs, apps))
	return nil
}

// auditHead verifies the chain and posts its head, for an operator to copy
// somewhere the bot cannot write (a ticket, a password manager): a later
// `talosbot audit verify --expect-head HASH` then detects a chain rewritten
// or cut back as a whole, which the chain alone cannot show. The head
// reveals nothing about the records, so any role in any cluster may ask.
func auditHead(ctx context.Context, r *Router, from engine.Origin, inv *grammar.Invocation) error {
	var err error
	for i := range r.cfg.Clusters {
		cl := &r.cfg.Clusters[i]
		if err = r.policy.Authorize(ctx, engine.PolicyRequest{User: from.User, Cluster: cl, Command: inv.Spec.Name, Now: r.now()}); err == nil {
			break
		}
	}
	if err != nil {
		r.ops.Refuse(ctx, from, "", inv, err)
		return err
	}
	rep, err := r.store.VerifyAudit(ctx)
	if err != nil {
		r.sink.Reply(ctx, from, "⚠️ the audit chain does not verify, so there is no head to pin: "+err.Error())
		return err
	}
	if rep.Records == 0 {
		r.sink.Reply(ctx, from, "the audit trail is empty: there is no head to pin yet")
		return nil
	}
	r.sink.Reply(ctx, from, fmt.Sprintf("🔗 Audit head: record %d of %d, sha256 `%s`\n"+
		"Copy it somewhere the bot cannot write. Later, `talosbot audit verify --url URL --expect-head %s` fails if the chain was rewritten or cut back below this record.",
		rep.HeadSeq, rep.Records, rep.Head, rep.Head))
	return nil
}
