package config

import (
	"fmt"
	"slices"
	"sort"
	"strings"
)

// Everyone, written out as the only entry of operators or viewers, gives that
// role to every user. Open access has to be written: an empty or missing list
// gives the role to no one, so a typo can only narrow access.
const Everyone = "*"

// AllCommands in approval_commands or no_approval_commands stands for every
// disruptive command.
const AllCommands = "*"

// Members expands a policy list: "group:NAME" becomes the group's members and
// everyone reports whether the list contains Everyone. Undefined groups
// expand to nothing (Validate rejects them).
func (c *Config) Members(list []string) (users []string, everyone bool) {
	for _, m := range list {
		switch g, isGroup := strings.CutPrefix(m, "group:"); {
		case m == Everyone:
			everyone = true
		case isGroup:
			users = append(users, c.Groups[g]...)
		default:
			users = append(users, m)
		}
	}
	return users, everyone
}

// NeedsApproval reports whether the disruptive command needs approval in env
// by the written policy: in production always, unless no_approval_commands
// names it (or is "*"); in staging only when approval_commands names it (or
// is "*"). Flags that force approval (--outside-window, --skip-staging) are
// the caller's business.
func (p Policy) NeedsApproval(env, command string) bool {
	in := func(list []string) bool { return slices.Contains(list, AllCommands) || slices.Contains(list, command) }
	if in(p.NoApproval) {
		return false
	}
	if env == EnvProduction {
		return true
	}
	return p.Approval != nil && in(*p.Approval)
}

// environments returns the environments that have clusters, sorted.
func (c *Config) environments() []string {
	var out []string
	for _, cl := range c.Clusters {
		if (cl.Environment == EnvStaging || cl.Environment == EnvProduction) && !slices.Contains(out, cl.Environment) {
			out = append(out, cl.Environment)
		}
	}
	sort.Strings(out)
	return out
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// validatePolicy checks groups, roles and approval rules. Everything that
// could make a list silently empty (an undefined or empty group, a
// misspelled entry) is an error, and so is a policy no one can act under.
func (c *Config) validatePolicy() []FieldError {
	var errs []FieldError
	add := func(path, format string, args ...any) {
		errs = append(errs, FieldError{Path: path, Msg: fmt.Sprintf(format, args...)})
	}
	for _, g := range sortedKeys(c.Groups) {
		p := "groups." + g
		if len(c.Groups[g]) == 0 {
			add(p, "group %q is empty; list its user ids or remove it", g)
		}
		for i, m := range c.Groups[g] {
			switch {
			case strings.TrimSpace(m) == "":
				add(fmt.Sprintf("%s[%d]", p, i), "is empty; write a user id")
			case strings.HasPrefix(m, "group:"):
				add(fmt.Sprintf("%s[%d]", p, i), "%q: groups cannot contain groups; list the user ids", m)
			case m == Everyone:
				add(fmt.Sprintf("%s[%d]", p, i), `"*" is not allowed in a group; write operators: ["*"] or viewers: ["*"] to give everyone a role`)
			}
		}
	}
	members := func(path string, list []string, star bool) {
		for i, m := range list {
			ip := fmt.Sprintf("%s[%d]", path, i)
			switch g, isGroup := strings.CutPrefix(m, "group:"); {
			case strings.TrimSpace(m) == "":
				add(ip, "is empty; write a user id or group:NAME")
			case m == Everyone && !star:
				add(ip, `"*" is not allowed here: approvers must be named (user ids or group:NAME)`)
			case isGroup:
				if _, ok := c.Groups[g]; !ok {
					msg := fmt.Sprintf("group %q is not defined under groups", g)
					if best := Closest(g, sortedKeys(c.Groups)); best != "" {
						msg += fmt.Sprintf("; did you mean group:%s?", best)
					}
					add(ip, "%s", msg)
				}
			}
		}
	}
	commands := func(path string, list []string) {
		for i, m := range list {
			if strings.TrimSpace(m) == "" {
				add(fmt.Sprintf("%s[%d]", path, i), "is empty; write a command name such as \"upgrade talos\", or \"*\"")
			}
		}
	}
	for _, env := range sortedKeys(c.Policy) {
		pol, p := c.Policy[env], "policy."+env
		if env != EnvStaging && env != EnvProduction {
			add(p, "unknown environment %q (use staging or production)", env)
			continue
		}
		if pol.MinApprovals < 1 {
			add(p+".min_approvals", "must be at least 1")
		}
		if pol.Expiry < 0 {
			add(p+".expiry", "must be positive")
		}
		for j, w := range pol.Windows {
			errs = append(errs, validateWindow(fmt.Sprintf("%s.maintenance_windows[%d]", p, j), w)...)
		}
		members(p+".operators", pol.Operators, true)
		members(p+".viewers", pol.Viewers, true)
		members(p+".approvers", pol.Approvers, false)
		if pol.Approval != nil {
			commands(p+".approval_commands", *pol.Approval)
		}
		commands(p+".no_approval_commands", pol.NoApproval)
	}
	for _, env := range c.environments() {
		pol, p := c.Policy[env], "policy."+env
		ops, allOps := c.Members(pol.Operators)
		viewers, allViewers := c.Members(pol.Viewers)
		approvers, _ := c.Members(pol.Approvers)
		if len(ops)+len(viewers)+len(approvers) == 0 && !allOps && !allViewers {
			add(p+".operators", `no one has a role in %s: list user ids or group:NAME under operators (and viewers), or write operators: ["*"] to let every user operate`, env)
		}
		slices.Sort(approvers)
		approvers = slices.Compact(approvers)
		if c.approvalPossible(env, pol) && pol.MinApprovals >= 1 && len(approvers) < pol.MinApprovals {
			add(p+".approvers", "%d approver(s) cannot give the %d approval(s) that %s requires: name more approvers, lower min_approvals, or exempt commands under no_approval_commands", len(approvers), pol.MinApprovals, env)
		}
	}
	return errs
}

// approvalPossible reports whether some disruptive command may need
// approval in env under pol (ignoring the catalogue).
func (c *Config) approvalPossible(env string, pol Policy) bool {
	if slices.Contains(pol.NoApproval, AllCommands) {
		return false
	}
	if env == EnvProduction {
		return true
	}
	return pol.Approval != nil && len(*pol.Approval) > 0
}

// CommandInfo describes one command of the catalogue (the bot's own commands
// and every plugin's manifest), for CheckCommands.
type CommandInfo struct {
	Name string
	// Operation is true for plugin commands (they become operations and may
	// wait for approval); bot commands never do.
	Operation  bool
	Disruptive bool
	// Writes marks a command that changes no cluster but writes files the
	// bot keeps (operators only, no approval).
	Writes bool
}

// CheckCommands checks every command name the configuration uses (approval
// rules and alert rule suggestions) against the catalogue. `talosbot config
// check` and `talosbot serve` both call it with the same catalogue, so serve
// never rejects a name config check accepted.
func (c *Config) CheckCommands(cat []CommandInfo) []FieldError {
	var errs []FieldError
	add := func(path, format string, args ...any) {
		errs = append(errs, FieldError{Path: path, Msg: fmt.Sprintf(format, args...)})
	}
	byName := map[string]CommandInfo{}
	var ops []string
	for _, ci := range cat {
		byName[ci.Name] = ci
		if ci.Operation && ci.Disruptive {
			ops = append(ops, ci.Name)
		}
	}
	sort.Strings(ops)
	check := func(path string, list []string) {
		for i, name := range list {
			ip := fmt.Sprintf("%s[%d]", path, i)
			ci, ok := byName[name]
			switch {
			case name == AllCommands || strings.TrimSpace(name) == "":
			case !ok:
				msg := fmt.Sprintf("unknown command %q", name)
				if best := Closest(name, ops); best != "" {
					msg += fmt.Sprintf("; did you mean %q?", best)
				}
				add(ip, "%s (disruptive commands: %s)", msg, strings.Join(ops, ", "))
			case !ci.Operation:
				add(ip, "%q is a bot command and never waits for approval; list disruptive plugin commands (%s)", name, strings.Join(ops, ", "))
			case !ci.Disruptive:
				add(ip, "%q is read-only and never needs approval; list disruptive commands (%s)", name, strings.Join(ops, ", "))
			}
		}
	}
	for _, env := range sortedKeys(c.Policy) {
		pol, p := c.Policy[env], "policy."+env
		if pol.Approval != nil {
			check(p+".approval_commands", *pol.Approval)
		}
		check(p+".no_approval_commands", pol.NoApproval)
	}
	names := make([]string, 0, len(byName))
	for n := range byName {
		names = append(names, n)
	}
	for i, r := range c.Alerts.Rules {
		for j, cmd := range r.Commands {
			rest, ok := strings.CutPrefix(cmd, "/talos ")
			if !ok {
				continue // Validate reports it
			}
			if !slices.ContainsFunc(names, func(n string) bool { return rest == n || strings.HasPrefix(rest, n+" ") }) {
				words := strings.Fields(rest)
				msg := fmt.Sprintf("%q names no command", cmd)
				if len(words) > 0 {
					if best := Closest(words[0], names); best != "" {
						msg += fmt.Sprintf("; did you mean /talos %s?", best)
					}
				}
				add(fmt.Sprintf("alerts.rules[%d].commands[%d]", i, j), "%s", msg)
			}
		}
	}
	return errs
}
