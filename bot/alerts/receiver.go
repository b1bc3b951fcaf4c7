package alerts

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/talosbot/talosbot/bot/chat"
	"github.com/talosbot/talosbot/bot/engine"
	"github.com/talosbot/talosbot/config"
	"github.com/talosbot/talosbot/state"
)

// Bucket is the kv bucket holding one record per alert group.
const Bucket = "alerts"

// ButtonMinter mints buttons that run commands as the clicking user through
// the engine's policy (engine.Engine.CommandButtons).
type ButtonMinter interface {
	CommandButtons(ctx context.Context, sugg []engine.Suggestion) ([]engine.Button, error)
}

// Observer counts handled notifications (bot/metrics implements it).
type Observer interface {
	AlertSuggestion(rule, outcome string)
}

// Outcomes of one notification.
const (
	OutcomePosted    = "posted"    // a new message for the group
	OutcomeUpdated   = "updated"   // the group's message was edited
	OutcomeResolved  = "resolved"  // the group's message now says resolved
	OutcomeUnchanged = "unchanged" // a repeat with nothing new
	OutcomeUnmatched = "unmatched" // no rule matches a new group
	OutcomeIgnored   = "ignored"   // resolved before we ever posted it
	OutcomeNoChannel = "no_channel"
	OutcomeSilenced  = "silenced" // caused by the bot's own operation, under its silence
)

// Silences tells which alerts a running operation of the bot holds an
// Alertmanager silence for (bot/silence implements it).
type Silences interface {
	Suppressing(ctx context.Context, labels map[string]string) (opID string, ok bool)
}

// Options configure a Receiver.
type Options struct {
	Config *config.Config
	// Rules default to Config.Alerts.Rules.
	Rules   []config.AlertRule
	Store   *state.Store
	Chat    chat.Adapter
	Buttons ButtonMinter
	// Token authenticates Alertmanager: "Authorization: Bearer TOKEN" or
	// basic auth with TOKEN as the password. Empty refuses every request.
	Token string
	// FallbackChannel receives alerts whose cluster has no channel (or whose
	// cluster label is missing or unknown). Empty: such alerts are dropped
	// with a warning.
	FallbackChannel string
	Clock           func() time.Time
	Logger          *slog.Logger
	Observer        Observer
	// Silences, when set, keeps quiet about new alert groups whose every
	// firing alert matches an active operation's silence; optional.
	Silences Silences
}

// Receiver handles Alertmanager notifications.
type Receiver struct {
	o     Options
	rules []Rule
	// mu serialises notifications: two deliveries for one group must not
	// both post a message.
	mu sync.Mutex
}

type nopObserver struct{}

func (nopObserver) AlertSuggestion(string, string) {}

// New compiles the rules and returns a Receiver.
func New(o Options) (*Receiver, error) {
	if o.Config == nil || o.Store == nil || o.Chat == nil || o.Buttons == nil {
		return nil, errors.New("alerts: Config, Store, Chat and Buttons are required")
	}
	if o.Rules == nil {
		o.Rules = o.Config.Alerts.Rules
	}
	rules, err := CompileRules(o.Rules)
	if err != nil {
		return nil, err
	}
	if o.Clock == nil {
		o.Clock = time.Now
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Observer == nil {
		o.Observer = nopObserver{}
	}
	return &Receiver{o: o, rules: rules}, nil
}

// Path is where Handler listens.
const Path = "/api/alerts/alertmanager"

// Handler serves POST /api/alerts/alertmanager. A wrong or missing token is
// answered 401 before the body is read, and changes nothing.
func (r *Receiver) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST "+Path, func(w http.ResponseWriter, req *http.Request) {
		if !r.authorized(req) {
			w.Header().Set("WWW-Authenticate", `Bearer realm="talosbot alerts"`)
			writeJSON(w, http.StatusUnauthorized, map[string]string{"error": "missing or wrong credentials: configure the webhook's http_config with authorization (Bearer alerts.token) or basic_auth (password alerts.token)"})
			return
		}
		if req.ContentLength > MaxPayload {
			writeJSON(w, http.StatusRequestEntityTooLarge, map[string]string{"error": fmt.Sprintf("body of %d bytes is larger than %d; lower max_alerts in the webhook config", req.ContentLength, MaxPayload)})
			return
		}
		p, err := Decode(http.MaxBytesReader(w, req.Body, MaxPayload))
		if err != nil {
			code := http.StatusBadRequest
			var mbe *http.MaxBytesError
			if errors.As(err, &mbe) {
				code = http.StatusRequestEntityTooLarge
			}
			writeJSON(w, code, map[string]string{"error": err.Error()})
			return
		}
		// Detached from the request: a notification half-handled because
		// Alertmanager hung up would post a message and lose its record.
		outcome, err := r.Handle(context.WithoutCancel(req.Context()), p)
		if err != nil {
			r.o.Logger.Error("alert notification", "group", shortKey(p.GroupKey), "err", err)
			// 5xx makes Alertmanager retry the notification.
			writeJSON(w, http.StatusInternalServerError, map[string]string{"error": err.Error()})
			return
		}
		writeJSON(w, http.StatusOK, map[string]string{"outcome": outcome})
	})
	return mux
}

func (r *Receiver) authorized(req *http.Request) bool {
	tok := []byte(r.o.Token)
	if len(tok) == 0 {
		return false
	}
	if _, pass, ok := req.BasicAuth(); ok {
		return subtle.ConstantTimeCompare([]byte(pass), tok) == 1
	}
	got, ok := strings.CutPrefix(req.Header.Get("Authorization"), "Bearer ")
	return ok && subtle.ConstantTimeCompare([]byte(strings.TrimSpace(got)), tok) == 1
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

// group is what the alerts bucket keeps per alert group.
type group struct {
	GroupKey  string          `json:"group_key"`
	Rule      string          `json:"rule"`
	Cluster   string          `json:"cluster,omitempty"`
	Channel   string          `json:"channel"`
	Ref       string          `json:"ref"`
	Status    string          `json:"status"`
	Commands  []string        `json:"commands,omitempty"`
	Buttons   []engine.Button `json:"buttons,omitempty"`
	Digest    string          `json:"digest"` // of the last message sent: repeats are not re-sent
	FirstSeen time.Time       `json:"first_seen"`
	UpdatedAt time.Time       `json:"updated_at"`
}

// groupID is the kv key of a group: group keys are long and contain label
// values, so they are hashed.
func groupID(key string) string {
	h := sha256.Sum256([]byte(key))
	return "group:" + hex.EncodeToString(h[:16])
}

func shortKey(key string) string { return groupID(key)[6:18] }

// Group returns the stored record of an alert group: its channel, message
// reference and status. ok is false when the group has no message.
func (r *Receiver) Group(ctx context.Context, groupKey string) (channel, ref, status string, ok bool, err error) {
	g, err := r.load(ctx, groupKey)
	if err != nil || g == nil {
		return "", "", "", false, err
	}
	return g.Channel, g.Ref, g.Status, true, nil
}

func (r *Receiver) load(ctx context.Context, groupKey string) (*group, error) {
	var g *group
	err := r.o.Store.View(ctx, func(tx *state.Tx) error {
		raw, err := tx.GetKV(Bucket, groupID(groupKey))
		if errors.Is(err, state.ErrNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		var v group
		if err := json.Unmarshal(raw, &v); err != nil {
			return fmt.Errorf("decode alert group record: %w", err)
		}
		g = &v
		return nil
	})
	return g, err
}

// Handle applies one notification: post the group's message, edit it, mark
// it resolved, or do nothing. It returns the outcome.
func (r *Receiver) Handle(ctx context.Context, p *Payload) (string, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	prev, err := r.load(ctx, p.GroupKey)
	if err != nil {
		return "", err
	}
	rule, labels := match(r.rules, p)
	if rule == nil && prev != nil {
		// The group's alerts changed so that no rule matches now: keep
		// updating the message under the rule it was posted with.
		for i := range r.rules {
			if r.rules[i].Name == prev.Rule {
				rule = &r.rules[i]
			}
		}
	}
	if prev == nil || prev.Status == StatusResolved {
		switch {
		case p.Status == StatusResolved:
			r.o.Observer.AlertSuggestion(ruleName(rule), OutcomeIgnored)
			return OutcomeIgnored, nil
		case rule == nil:
			r.o.Logger.Debug("no alert rule matches", "group", shortKey(p.GroupKey), "labels", p.CommonLabels)
			r.o.Observer.AlertSuggestion("", OutcomeUnmatched)
			return OutcomeUnmatched, nil
		}
		if opID, ok := r.silenced(ctx, p); ok {
			return OutcomeSilenced, r.recordSilenced(ctx, p, rule, opID)
		}
	}
	cluster := r.clusterOf(p, labels)
	channel := r.channelFor(cluster)
	if prev != nil && prev.Status != StatusResolved {
		channel = prev.Channel // a group's message stays where it was posted
	}
	if channel == "" {
		r.o.Logger.Warn("alert has no channel: its cluster has no channels and no fallback channel is set",
			"group", shortKey(p.GroupKey), "cluster", cluster, "label", r.o.Config.Alerts.ClusterLabel)
		r.o.Observer.AlertSuggestion(ruleName(rule), OutcomeNoChannel)
		return OutcomeNoChannel, nil
	}

	now := r.o.Clock().UTC()
	g := &group{GroupKey: p.GroupKey, Rule: ruleName(rule), Cluster: cluster, Channel: channel, Status: p.Status, FirstSeen: now, UpdatedAt: now}
	fresh := prev == nil || prev.Status == StatusResolved
	if !fresh {
		g.Ref, g.FirstSeen, g.Buttons, g.Commands = prev.Ref, prev.FirstSeen, prev.Buttons, prev.Commands
	}
	cmds := r.commands(rule, cluster, labels)
	if fresh || !equal(cmds, g.Commands) {
		sugg := make([]engine.Suggestion, 0, len(cmds))
		for _, c := range cmds {
			sugg = append(sugg, engine.Suggestion{Label: strings.TrimPrefix(c, "/talos "), Command: c})
		}
		g.Buttons = nil
		if len(sugg) > 0 {
			if g.Buttons, err = r.o.Buttons.CommandButtons(ctx, sugg); err != nil {
				return "", fmt.Errorf("mint alert buttons: %w", err)
			}
		}
		g.Commands = cmds
	}
	msg := render(p, rule, cluster, r.known(cluster), g.Buttons)
	g.Digest = digest(msg)

	outcome := OutcomeUpdated
	switch {
	case fresh:
		ref, err := r.o.Chat.Post(ctx, channel, "", msg)
		if err != nil {
			return "", fmt.Errorf("post alert to %s: %w", channel, err)
		}
		g.Ref, outcome = ref, OutcomePosted
	case g.Digest == prev.Digest:
		outcome = OutcomeUnchanged
	default:
		if err := r.o.Chat.Edit(ctx, channel, g.Ref, msg); err != nil {
			// The message is gone (deleted, or the platform forgot it):
			// post a new one for the group rather than failing forever.
			r.o.Logger.Warn("edit alert message failed; posting a new one", "group", shortKey(p.GroupKey), "ref", g.Ref, "err", err)
			ref, perr := r.o.Chat.Post(ctx, channel, "", msg)
			if perr != nil {
				return "", fmt.Errorf("edit alert message %s in %s: %w; post a new one: %w", g.Ref, channel, err, perr)
			}
			g.Ref = ref
		}
		if p.Status == StatusResolved {
			outcome = OutcomeResolved
		}
	}
	raw, err := json.Marshal(g)
	if err != nil {
		return "", err
	}
	err = r.o.Store.Update(ctx, func(tx *state.Tx) error {
		if err := tx.PutKV(Bucket, groupID(p.GroupKey), raw); err != nil {
			return err
		}
		if outcome != OutcomePosted && outcome != OutcomeResolved {
			return nil
		}
		_, err := tx.Append(state.AuditEvent{Time: now, Actor: "alertmanager", Action: "alert " + outcome, Cluster: cluster,
			Result: p.Status, Detail: map[string]string{"rule": g.Rule, "alertname": alertName(p), "group": shortKey(p.GroupKey), "channel": channel, "message": g.Ref}})
		return err
	})
	if err != nil {
		return "", fmt.Errorf("record alert group: %w", err)
	}
	r.o.Observer.AlertSuggestion(g.Rule, outcome)
	return outcome, nil
}

func ruleName(r *Rule) string {
	if r == nil {
		return ""
	}
	return r.Name
}

// clusterOf reads the cluster label: common labels, group labels, then the
// matched alert.
func (r *Receiver) clusterOf(p *Payload, matched map[string]string) string {
	l := r.o.Config.Alerts.ClusterLabel
	if l == "" {
		l = config.DefaultClusterLabel
	}
	for _, m := range []map[string]string{p.CommonLabels, p.GroupLabels, matched} {
		if v := m[l]; v != "" {
			return v
		}
	}
	return ""
}

func (r *Receiver) known(cluster string) bool {
	return cluster != "" && r.o.Config.Cluster(cluster) != nil
}

func (r *Receiver) channelFor(cluster string) string {
	if cl := r.o.Config.Cluster(cluster); cluster != "" && cl != nil && len(cl.Channels) > 0 {
		return cl.Channels[0]
	}
	return r.o.FallbackChannel
}

// commands expands the rule's commands; {{cluster}} needs a configured
// cluster, so an alert from an unknown cluster offers no cluster commands.
func (r *Receiver) commands(rule *Rule, cluster string, labels map[string]string) []string {
	if rule == nil {
		return nil
	}
	if !r.known(cluster) {
		cluster = ""
	}
	var out []string
	for _, c := range rule.Commands {
		if s, ok := expand(c, cluster, labels); ok {
			out = append(out, s)
		}
	}
	return out
}

func equal(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func alertName(p *Payload) string {
	if n := p.CommonLabels["alertname"]; n != "" {
		return n
	}
	if n := p.GroupLabels["alertname"]; n != "" {
		return n
	}
	names := map[string]bool{}
	for _, a := range p.Alerts {
		names[a.Labels["alertname"]] = true
	}
	list := make([]string, 0, len(names))
	for n := range names {
		list = append(list, n)
	}
	sort.Strings(list)
	return strings.Join(list, ", ")
}

// maxListed bounds the alerts listed in one message.
const maxListed = 10

func render(p *Payload, rule *Rule, cluster string, known bool, buttons []engine.Button) chat.Message {
	firing := 0
	for _, a := range p.Alerts {
		if a.Status == StatusFiring {
			firing++
		}
	}
	where := cluster
	if where == "" {
		where = "unknown cluster"
	}
	m := chat.Message{}
	if p.Status == StatusResolved {
		m.Title = fmt.Sprintf("✅ [RESOLVED] %s · %s", alertName(p), where)
	} else {
		m.Title = fmt.Sprintf("🔥 [FIRING:%d] %s · %s", firing, alertName(p), where)
	}
	var b strings.Builder
	if rule != nil && rule.Text != "" {
		b.WriteString(strings.ReplaceAll(rule.Text, "{{cluster}}", where) + "\n")
	}
	if rule != nil && rule.Runbook != "" {
		fmt.Fprintf(&b, "Runbook: %s\n", rule.Runbook)
	}
	if cluster != "" && !known {
		fmt.Fprintf(&b, "⚠️ cluster %q is not configured in talosbot, so no cluster commands are offered\n", cluster)
	}
	alerts := append([]Alert(nil), p.Alerts...)
	sort.SliceStable(alerts, func(i, j int) bool {
		if (alerts[i].Status == StatusFiring) != (alerts[j].Status == StatusFiring) {
			return alerts[i].Status == StatusFiring
		}
		return alerts[i].StartsAt.Before(alerts[j].StartsAt)
	})
	b.WriteString("Alerts:\n")
	for i, a := range alerts {
		if i == maxListed {
			fmt.Fprintf(&b, "… and %d more\n", len(alerts)-maxListed)
			break
		}
		mark := "🔥"
		when := "since " + a.StartsAt.UTC().Format("2006-01-02 15:04 MST")
		if a.Status == StatusResolved {
			mark, when = "✅", "resolved "+a.EndsAt.UTC().Format("2006-01-02 15:04 MST")
		}
		line := fmt.Sprintf("%s %s%s (%s)", mark, a.Labels["alertname"], ident(a.Labels), when)
		if s := summary(a); s != "" {
			line += " — " + s
		}
		b.WriteString("• " + line + "\n")
	}
	if p.TruncatedAlerts > 0 {
		fmt.Fprintf(&b, "(%d more alerts were truncated by Alertmanager)\n", p.TruncatedAlerts)
	}
	m.Text = strings.TrimSpace(b.String())
	m.Fields = []chat.Field{{Label: "Status", Value: p.Status}, {Label: "Cluster", Value: where}}
	if sev := p.CommonLabels["severity"]; sev != "" {
		m.Fields = append(m.Fields, chat.Field{Label: "Severity", Value: sev})
	}
	if rule != nil {
		m.Fields = append(m.Fields, chat.Field{Label: "Rule", Value: rule.Name})
	}
	for _, bt := range buttons {
		m.Buttons = append(m.Buttons, chat.Button{ActionID: bt.ID, Label: bt.Label, Style: bt.Style})
	}
	return m
}

// ident names the alert's object: node, instance, pod or member labels.
func ident(l map[string]string) string {
	var parts []string
	for _, k := range []string{"node", "instance", "pod", "namespace", "member"} {
		if v := l[k]; v != "" {
			parts = append(parts, k+"="+v)
		}
	}
	if len(parts) == 0 {
		return ""
	}
	return " " + strings.Join(parts, " ")
}

func summary(a Alert) string {
	for _, k := range []string{"summary", "description", "message"} {
		if v := a.Annotations[k]; v != "" {
			return strings.SplitN(v, "\n", 2)[0]
		}
	}
	return ""
}

func digest(m chat.Message) string {
	// The message holds no "now": a repeated notification renders the same.
	raw, _ := json.Marshal(m)
	h := sha256.Sum256(raw)
	return hex.EncodeToString(h[:])
}

// silenced reports the operation whose silence covers every firing alert
// of p: the bot does not suggest commands about what its own run causes.
func (r *Receiver) silenced(ctx context.Context, p *Payload) (string, bool) {
	if r.o.Silences == nil || p.Status != StatusFiring {
		return "", false
	}
	op := ""
	for _, a := range p.Alerts {
		if a.Status != StatusFiring {
			continue
		}
		labels := map[string]string{}
		for k, v := range p.CommonLabels {
			labels[k] = v
		}
		for k, v := range a.Labels {
			labels[k] = v
		}
		id, ok := r.o.Silences.Suppressing(ctx, labels)
		if !ok {
			return "", false
		}
		op = id
	}
	return op, op != ""
}

func (r *Receiver) recordSilenced(ctx context.Context, p *Payload, rule *Rule, opID string) error {
	r.o.Logger.Info("alert suppressed: the bot's own operation holds a silence for it", "group", shortKey(p.GroupKey), "op", opID)
	r.o.Observer.AlertSuggestion(ruleName(rule), OutcomeSilenced)
	_, err := r.o.Store.AppendAudit(ctx, state.AuditEvent{Time: r.o.Clock().UTC(), Actor: "alertmanager", Action: "alert silenced", OpID: opID,
		Cluster: p.CommonLabels[r.o.Config.Alerts.ClusterLabel], Result: p.Status,
		Detail: map[string]string{"rule": ruleName(rule), "alertname": alertName(p), "group": shortKey(p.GroupKey)}})
	return err
}
