package render

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/talosbot/talosbot/bot/chat"
	"github.com/talosbot/talosbot/bot/engine"
	"github.com/talosbot/talosbot/plugins/host"
	lifecyclev1 "github.com/talosbot/talosbot/plugins/sdk/proto/lifecycle/v1"
	"github.com/talosbot/talosbot/state"
)

// The card is written for a tired person who must decide in 30 seconds
// (docs/MESSAGES.md): what happens where, the nodes in order, the risks,
// the evidence, who may approve, when it expires, how long it takes. Every
// step stays available behind the "Details" thread post.

// node is one node of an operation: its plan and its progress.
type node struct {
	name, role, from, to string
	skip                 bool // already at the target when planned
	steps                []state.Step
	// current: the operation's most recently started step is this node's.
	// Only the current node is "running" between two of its steps: the
	// pulls on every node before the first cordon left each node half
	// done, and every one of them showed "running" at once (issue 31).
	current bool
}

// nodesOf returns the operation's nodes in plan order.
func nodesOf(op *state.Operation, p *lifecyclev1.OperationPlan, f *engine.Facts) []*node {
	var out []*node
	byName := map[string]*node{}
	get := func(name string) *node {
		n := byName[name]
		if n == nil {
			n = &node{name: name}
			if f != nil {
				n.role = f.Roles[name]
			}
			byName[name] = n
			out = append(out, n)
		}
		return n
	}
	for _, s := range p.GetSteps() {
		if s.GetNode() == "" {
			continue
		}
		n := get(s.GetNode())
		if s.GetFromVersion() != "" && n.from == "" {
			n.from, n.to = s.GetFromVersion(), s.GetToVersion()
			if n.to == "" && f != nil {
				n.to = f.Previous[n.name]
			}
			n.skip = n.from == n.to && n.to != ""
		}
	}
	for _, s := range op.Steps {
		if s.Node == "" {
			continue
		}
		n := get(s.Node)
		n.steps = append(n.steps, s)
	}
	var latest *state.Step
	for i, s := range op.Steps {
		if !s.StartedAt.IsZero() && (latest == nil || !s.StartedAt.Before(latest.StartedAt)) {
			latest = &op.Steps[i]
		}
	}
	if latest != nil && byName[latest.Node] != nil {
		byName[latest.Node].current = true
	}
	return out
}

// status is a node's state from its steps.
func (n *node) status() string {
	if len(n.steps) == 0 {
		return "pending"
	}
	var done, skipped, pending int
	for _, s := range n.steps {
		switch s.Status {
		case "failed":
			return "failed"
		case "running":
			return "running"
		case engine.StepStopped:
			// The run ended with this step unfinished (bot/engine/endings.go).
			return engine.StepStopped
		case "ok":
			done++
		case "skipped":
			skipped++
		default:
			pending++
		}
	}
	switch {
	case pending == len(n.steps):
		return "pending"
	case pending > 0 && n.current:
		return "running" // between two of its steps
	case pending > 0:
		return "pending" // its work is ahead: another node runs
	case done == 0:
		return "skipped"
	}
	return "ok"
}

// span is the time from the node's first step's start to its last step's end
// (now while it runs); zero before it starts.
func (n *node) span(now time.Time) time.Duration {
	var start, end time.Time
	for _, s := range n.steps {
		if !s.StartedAt.IsZero() && (start.IsZero() || s.StartedAt.Before(start)) {
			start = s.StartedAt
		}
		if s.EndedAt.After(end) {
			end = s.EndedAt
		}
	}
	if start.IsZero() {
		return 0
	}
	if n.status() == "running" || end.IsZero() {
		end = now
	}
	return end.Sub(start)
}

// mark is "✅ done": the emoji and its word, so the state reads without an
// emoji font.
func mark(status string) string { return chat.StatusMark(status) + " " + chat.StatusLabel(status) }

func versions(n *node) string {
	switch {
	case n.from == "" && n.to == "":
		return "—"
	case n.to == "":
		return n.from + " → previous version"
	case n.skip:
		return n.to + " (already there)"
	}
	return n.from + " → " + n.to
}

func nodeTable(nodes []*node, now time.Time) *chat.Table {
	t := &chat.Table{Columns: []string{"Node", "Role", "From → to", "State", "Duration"}}
	for _, n := range nodes {
		d := "—"
		if sp := n.span(now); sp > 0 {
			d = Duration(sp)
		}
		role := n.role
		if role == "" {
			role = "—"
		}
		t.Rows = append(t.Rows, []string{n.name, role, versions(n), mark(n.status()), d})
	}
	return t
}

// median of ds (0 when empty).
func median(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	if len(s)%2 == 0 {
		return (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	return s[len(s)/2]
}

// pastDurations are the past runs' whole durations and their node spans
// (nodes that were skipped take no time and are left out).
func pastDurations(f *engine.Facts) (runs, nodes []time.Duration) {
	if f == nil {
		return nil, nil
	}
	for _, o := range f.Past {
		if !o.EndedAt.IsZero() && !o.StartedAt.IsZero() {
			runs = append(runs, o.EndedAt.Sub(o.StartedAt))
		}
		for _, n := range nodesOf(o, nil, nil) { // the steps name their nodes; no plan to decode
			if n.status() == "ok" {
				if sp := n.span(o.EndedAt); sp > 0 {
					nodes = append(nodes, sp)
				}
			}
		}
	}
	return runs, nodes
}

// estimate is the card's "how long": the median of past runs of this command
// on this cluster, scaled to this plan's node count when node spans exist.
func estimate(nodes []*node, f *engine.Facts) string {
	runs, spans := pastDurations(f)
	if len(runs) == 0 {
		return noPastRuns
	}
	todo := 0
	for _, n := range nodes {
		if !n.skip {
			todo++
		}
	}
	if len(spans) > 0 && todo > 0 {
		return fmt.Sprintf("about %s (%d node(s) × %s per node, median of %d past run(s)%s)", Duration(time.Duration(todo)*median(spans)), todo, Duration(median(spans)), len(runs), pastFrom(f))
	}
	return fmt.Sprintf("about %s (median of %d past run(s)%s)", Duration(median(runs)), len(runs), pastFrom(f))
}

// eta is the time left for the nodes not finished yet, from past node spans.
func eta(nodes []*node, f *engine.Facts, now time.Time) string {
	_, spans := pastDurations(f)
	if len(spans) == 0 {
		return "unknown: " + noPastRuns
	}
	per := median(spans)
	var left time.Duration
	for _, n := range nodes {
		switch n.status() {
		case "pending":
			if !n.skip {
				left += per
			}
		case "running":
			left += max(per-n.span(now), 0)
		}
	}
	if left == 0 {
		return "any moment"
	}
	return fmt.Sprintf("about %s (%s per node, from %d past node run(s)%s)", Duration(left), Duration(per), len(spans), pastFrom(f))
}

// noPastRuns is why there is no estimate: no run on record here, nor on a
// cluster with as many nodes.
const noPastRuns = "no past runs here or on a cluster this size"

// pastFrom says where the past runs came from when not from this cluster:
// " on staging, which has as many nodes".
func pastFrom(f *engine.Facts) string {
	switch len(f.PastFrom) {
	case 0:
		return ""
	case 1:
		return " on " + f.PastFrom[0] + ", which has as many nodes"
	}
	return " on " + strings.Join(f.PastFrom, ", ") + ", which have as many nodes"
}

// approvalLine is "0/2 — bob, dave may approve".
func approvalLine(f *engine.Facts) string {
	if f == nil || f.Required == 0 {
		return ""
	}
	s := fmt.Sprintf("%d/%d", len(f.Approvals), f.Required)
	var got []string
	for _, a := range f.Approvals {
		got = append(got, a.User)
	}
	if len(got) > 0 {
		s += " — approved by " + strings.Join(got, ", ")
	}
	if len(f.Approvals) < f.Required {
		if len(f.Approvers) == 0 {
			s += " — nobody else may approve (policy approvers)"
		} else {
			s += " — may approve: " + strings.Join(f.Approvers, ", ")
		}
	}
	return s
}

// approvedBy is "bob 08:12 UTC, dave 08:14 UTC".
func approvedBy(f *engine.Facts, now time.Time) string {
	if f == nil || len(f.Approvals) == 0 {
		return ""
	}
	var parts []string
	for _, a := range f.Approvals {
		parts = append(parts, a.User+" ("+When(a.At, now)+")")
	}
	return strings.Join(parts, ", ")
}

// installers are the distinct installer images of the plan, in order.
func installers(p *lifecyclev1.OperationPlan) []string {
	var out []string
	for _, s := range p.GetSteps() {
		if img := s.GetImage(); img != "" && !slices.Contains(out, img) {
			out = append(out, img)
		}
	}
	return out
}

// fromTo is the plan's transition(s), each once: "v1.12.6 → v1.13.9".
func fromTo(nodes []*node) string {
	var seen []string
	for _, n := range nodes {
		if n.skip || (n.from == "" && n.to == "") {
			continue
		}
		if v := versions(n); !slices.Contains(seen, v) {
			seen = append(seen, v)
		}
	}
	return strings.Join(seen, ", ")
}

// evMark marks one piece of evidence: "✅ ok", "❌ failed", "❔ not checked".
func evMark(status string) string {
	switch status {
	case "ok":
		return "✅ ok"
	case "failed":
		return "❌ failed"
	}
	return mark("not-checked")
}

// evidence is what the approver is shown to trust the plan: the staging run
// (R6), the snapshot and the gate; the plan's own preconditions are added
// by cardBody (checks). What was
// not checked says so; it never shows as a pass.
func evidence(op *state.Operation, p *lifecyclev1.OperationPlan, f *engine.Facts, now time.Time) []string {
	var out []string
	if f != nil {
		switch {
		case f.Staging != nil:
			out = append(out, fmt.Sprintf("%s staging: %s succeeded on %s %s", evMark("ok"), f.Staging.ID, f.Staging.Cluster, Ago(f.Staging.EndedAt, now)))
		case slices.Contains(op.Flags, engine.FlagSkipStaging):
			out = append(out, evMark("not-checked")+" staging: skipped by --"+engine.FlagSkipStaging+" (one extra approval)")
		case op.Environment == "production":
			out = append(out, evMark("not-checked")+" staging: no staging run on record")
		}
		takesSnapshot := slices.ContainsFunc(p.GetSteps(), func(s *lifecyclev1.Step) bool { return s.GetKind() == "snapshot" })
		snap := ""
		if f.Snapshot != nil {
			snap = fmt.Sprintf("newest %s (%s)", Ago(f.Snapshot.EndedAt, now), f.Snapshot.ID)
		}
		switch {
		case takesSnapshot && snap != "":
			out = append(out, evMark("ok")+" snapshot: a new one is taken first; "+snap)
		case takesSnapshot:
			out = append(out, evMark("ok")+" snapshot: a new one is taken first; none on record before")
		case snap != "":
			out = append(out, evMark("ok")+" snapshot: "+snap)
		default:
			out = append(out, evMark("not-checked")+" snapshot: none on record")
		}
		if g := f.Gate; g != nil {
			st := "ok"
			if g.State != state.StateSucceeded {
				st = "failed"
			}
			out = append(out, fmt.Sprintf("%s gate: /talos %s %s %s", evMark(st), g.Command, g.State, Ago(g.EndedAt, now)))
		} else {
			out = append(out, evMark("not-checked")+" gate: no health run on record; the plan runs the gate before the first node")
		}
	}
	return out
}

// phases summarises the steps that belong to no node ("gate before: ✅ 11
// probes done, ❔ 1 probe not checked"), grouped by the part of their id
// before "/". Every count has its noun: "done 5" alone says nothing.
func phases(op *state.Operation, p *lifecyclev1.OperationPlan) []string {
	kinds := map[string]string{}
	for _, s := range p.GetSteps() {
		kinds[s.GetId()] = s.GetKind()
	}
	type group struct {
		name   string
		noun   string // "probe" for a gate, else "step"
		counts map[string]int
		// details are every failure's and every warning's text: a
		// warning counted and not shown told nobody what it was (issue 31).
		details []string
	}
	var order []*group
	by := map[string]*group{}
	for _, s := range op.Steps {
		if s.Node != "" {
			continue
		}
		key, name := kinds[s.ID], kinds[s.ID]
		switch {
		case key == "gate":
			key, _, _ = strings.Cut(s.ID, "/")
			name = strings.ReplaceAll(key, "-", " ")
		case key == "" || key == "verify" || key == "note":
			key, name = s.ID, s.Title
		}
		g := by[key]
		if g == nil {
			g = &group{name: name, noun: "step", counts: map[string]int{}}
			if kinds[s.ID] == "gate" {
				g.noun = "probe"
			}
			by[key] = g
			order = append(order, g)
		}
		st, _ := chat.ShownStatus(s.Status, s.Detail)
		if st == "skipped" && kinds[s.ID] == "gate" {
			st = "not-checked" // a probe that could not run is not a pass
		}
		g.counts[st]++
		// Failures here, every one; warnings once each, in stepWarnings.
		if st == "failed" {
			g.details = append(g.details, s.Title+": "+engine.FirstLine(s.Detail))
		}
	}
	var out []string
	for _, g := range order {
		var parts []string
		for _, st := range []string{"failed", "running", "ok", "not-checked", "unknown", "skipped", "pending"} {
			if c := g.counts[st]; c > 0 {
				parts = append(parts, counted(st, c, g.noun))
			}
		}
		line := g.name + ": " + strings.Join(parts, ", ")
		if len(g.details) > 0 {
			line += " — " + strings.Join(g.details, "; ")
		}
		out = append(out, line)
	}
	return append(out, stepWarnings(op)...)
}

// cardWarnings is how many step warnings the card shows in full; the rest
// are counted, and every one is in the thread (bot/engine threadWorthy).
const cardWarnings = 3

// stepWarnings are the text of every warning a step of the run reported (a
// detail starting with ⚠️), so a message that counts "1 warning(s)" also
// says which: "⚠️ warning: worker-1, cp-2: Pods: 3 pods; worst: …". The same
// text on several nodes is one line naming them; a long one is cut at a
// word; after cardWarnings lines the rest are counted.
func stepWarnings(op *state.Operation) []string {
	var order []string
	who := map[string][]string{}
	for _, s := range op.Steps {
		if !strings.HasPrefix(s.Detail, "⚠️") {
			continue
		}
		text := strings.TrimSpace(strings.TrimPrefix(engine.FirstLine(s.Detail), "⚠️"))
		name := s.Node
		if name == "" {
			name = s.Title
		}
		if _, seen := who[text]; !seen {
			order = append(order, text)
		}
		if !slices.Contains(who[text], name) {
			who[text] = append(who[text], name)
		}
	}
	var out []string
	for i, text := range order {
		if i == cardWarnings {
			out = append(out, fmt.Sprintf("⚠️ and %d more warning(s): every one is in the thread", len(order)-cardWarnings))
			break
		}
		out = append(out, "⚠️ warning: "+strings.Join(who[text], ", ")+": "+short(text))
	}
	return out
}

// counted is a count with its marker, noun and word: "✅ 5 probes done".
func counted(status string, n int, noun string) string {
	if n != 1 {
		noun += "s"
	}
	return fmt.Sprintf("%s %d %s %s", chat.StatusMark(status), n, noun, chat.StatusLabel(status))
}

// nodeBar is the bar over nodes: finished / all.
func nodeBar(nodes []*node) string {
	done := 0
	for _, n := range nodes {
		if st := n.status(); st == "ok" || st == "skipped" || st == "failed" {
			done++
		}
	}
	return ProgressBar(done, len(nodes)) + " nodes"
}

// cardRisks is how many risks the card shows; the rest are counted and
// left to Details, so a long list cannot push the buttons off the screen.
const cardRisks = 3

// riskWidth is where a risk's first clause is cut on the card; its whole
// text is in Details.
const riskWidth = 110

// risks are the plan's warnings with those that say the same thing merged:
// exact repeats, and a warning whose subject (its text before the first
// ":") another warning also names ("no kubeconfig: …" and "health gate: no
// kubeconfig for this cluster …"). Of two on one subject the shorter stays,
// as the headline; both are in Details.
func risks(ws []string) []string {
	var out []string
	for _, w := range ws {
		w = strings.TrimSpace(w)
		if w == "" {
			continue
		}
		merged := false
		for i, o := range out {
			if o == w {
				merged = true
				break
			}
			if sameSubject(w, o) || sameSubject(o, w) {
				if len(w) < len(o) {
					out[i] = w
				}
				merged = true
				break
			}
		}
		if !merged {
			out = append(out, w)
		}
	}
	return out
}

// sameSubject reports whether b names a's subject, the text of a before its
// first ":" (at least two words, so "health gate" alone does not match
// every gate warning).
func sameSubject(a, b string) bool {
	subj, _, ok := strings.Cut(a, ":")
	subj = strings.ToLower(strings.TrimSpace(subj))
	if !ok || len(strings.Fields(subj)) < 2 {
		return false
	}
	return strings.Contains(strings.ToLower(b), subj)
}

// short is a risk as the card shows it: whole up to riskWidth characters,
// else its first clause (up to ";"), cut at a word near riskWidth.
func short(s string) string {
	if len([]rune(s)) <= riskWidth {
		return s
	}
	first, _, _ := strings.Cut(s, "; ")
	if r := []rune(first); len(r) > riskWidth {
		first = string(r[:riskWidth])
		if i := strings.LastIndex(first, " "); i > riskWidth/2 {
			first = first[:i]
		}
	}
	return strings.TrimRight(first, " ,;:") + " …"
}

// namesWithin joins names for one card line: every plugin may add checks,
// so past width runes the rest are counted, not named (Details lists them).
func namesWithin(names []string, width int) string {
	line := strings.Join(names, ", ")
	if len([]rune(line)) <= width {
		return line
	}
	for n := len(names) - 1; n > 0; n-- {
		line = strings.Join(names[:n], ", ") + fmt.Sprintf(" and %d more (Details)", len(names)-n)
		if len([]rune(line)) <= width {
			return line
		}
	}
	return fmt.Sprintf("%d checks (Details)", len(names))
}

// checks splits the plan's preconditions: those that passed are named on
// one line (their rule codes and details are in Details); the others get a
// line each, in words.
func checks(p *lifecyclev1.OperationPlan) (passed []string, rest []string) {
	for _, pc := range p.GetPreconditions() {
		if pc.GetOk() {
			passed = append(passed, pc.GetName())
			continue
		}
		line := evMark("failed") + " " + pc.GetName()
		if pc.GetDetail() != "" {
			line += ": " + short(pc.GetDetail())
		}
		rest = append(rest, line)
	}
	return passed, rest
}

// cardBody is the approval card's text: what changes, the nodes in order,
// the risks, the evidence, a line each, no headings. With the fields and
// the buttons it must fit 20 lines of one screen
// (bot/chat/web/card_chromium_test.go counts them); the node table (every
// node pending, the same versions as What), the installer image, the steps,
// rule codes and the node identity are in Details.
func cardBody(op *state.Operation, p *lifecyclev1.OperationPlan, nodes []*node, f *engine.Facts, now time.Time) string {
	var b strings.Builder
	if p.GetSummary() != "" {
		b.WriteString(p.GetSummary() + "\n")
	}
	what := "What: "
	if ft := fromTo(nodes); ft != "" {
		where := op.Cluster
		if op.Environment != "" && op.Environment != op.Cluster {
			where += " (" + op.Environment + ")"
		}
		what += ft + " on " + where + " · "
	}
	// The installer image (a 100-character reference) and the step list
	// are in Details; the card says where.
	detail := fmt.Sprintf("%d step(s)", len(p.GetSteps()))
	if len(installers(p)) > 0 {
		detail += " and the installer image"
	}
	b.WriteString(what + detail + ": see Details in the thread\n")
	if len(nodes) > 0 {
		var names []string
		for _, n := range nodes {
			names = append(names, n.name)
		}
		b.WriteString("Order: " + strings.Join(names, " → ") + "\n")
	}
	rs := risks(p.GetWarnings())
	for i, w := range rs {
		if i == cardRisks {
			fmt.Fprintf(&b, "⚠️ and %d more risk(s) in Details\n", len(rs)-cardRisks)
			break
		}
		b.WriteString("⚠️ warning: " + short(w) + "\n")
	}
	ev := evidence(op, p, f, now)
	passed, failed := checks(p)
	if len(passed) > 0 {
		ev = append(ev, evMark("ok")+" checks: "+namesWithin(passed, riskWidth))
	}
	ev = append(ev, failed...)
	for _, l := range ev {
		b.WriteString(l + "\n")
	}
	return b.String()
}

// Details is the thread post behind the card: every step of the plan, once
// each (titles already carry their node and versions).
func Details(op *state.Operation) string {
	p := engine.DecodePlan(op.Plan)
	if p == nil {
		return ""
	}
	var b strings.Builder
	fmt.Fprintf(&b, "Details: the %d steps of plan %s\n", len(p.GetSteps()), host.ShortDigest(op.Digest))
	// The card shortens risks and names passed checks only: here they are
	// whole, with their rule codes, for whoever wants to read them.
	if ws := p.GetWarnings(); len(ws) > 0 {
		b.WriteString("Risks:\n")
		for _, w := range ws {
			b.WriteString("• ⚠️ warning: " + w + "\n")
		}
	}
	if pcs := p.GetPreconditions(); len(pcs) > 0 {
		b.WriteString("Checks:\n")
		for _, pc := range pcs {
			st := "ok"
			if !pc.GetOk() {
				st = "failed"
			}
			line := "• " + evMark(st) + " " + pc.GetName()
			if pc.GetRule() != "" {
				line += " (" + pc.GetRule() + ")"
			}
			if pc.GetDetail() != "" {
				line += ": " + pc.GetDetail()
			}
			b.WriteString(line + "\n")
		}
	}
	if imgs := installers(p); len(imgs) > 0 {
		b.WriteString("Installer: `" + strings.Join(imgs, "`, `") + "`\n")
	}
	b.WriteString("Steps:\n")
	for i, s := range p.GetSteps() {
		line := fmt.Sprintf("%d. %s", i+1, s.GetTitle())
		if s.GetNode() != "" && !strings.Contains(s.GetTitle(), s.GetNode()) {
			line += " [" + s.GetNode() + "]"
		}
		if (s.GetFromVersion() != "" || s.GetToVersion() != "") && !strings.Contains(s.GetTitle(), s.GetFromVersion()+" →") {
			line += " " + s.GetFromVersion() + " → " + orWord(s.GetToVersion(), "previous version")
		}
		b.WriteString(line + "\n")
	}
	return strings.TrimSpace(b.String())
}

func orWord(s, d string) string {
	if s == "" {
		return d
	}
	return s
}
