// Package alertpause pauses a disruptive roll while the cluster is on fire
// (docs/OPERATIONS.md "Pause on alerts"): before a roll starts or resumes,
// and every alert_pause.every while it runs, it asks Alertmanager's API v2
// for the active alerts of the cluster that match alert_pause.matchers
// (default severity="critical"). A match makes the host pause the run before
// its next node (engine.PauseFor, the same mark the Pause button makes); the
// operation's ending names each alert, its summary and start time, with
// Resume (which asks again) and Abandon. `/talos resume ID --ignore-alert
// NAME` goes on past one named alert (audited). Alerts inside the
// operation's own silence (the ones its work is expected to cause) are
// listed separately and count only with alert_pause.count_silenced.
//
// It implements engine.RunHook. Kept outside the engine: the engine only
// offers PauseFor.
package alertpause

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/talosbot/talosbot/bot/chat"
	"github.com/talosbot/talosbot/bot/engine"
	"github.com/talosbot/talosbot/bot/silence"
	"github.com/talosbot/talosbot/config"
	"github.com/talosbot/talosbot/state"
)

// IgnoreBucket keeps, per operation, the alert names an operator resumed
// past (JSON list), so the check after the resume leaves them out.
const IgnoreBucket = "alertpause-ignore"

// PausedBucket keeps, per operation, the names of the alerts its last
// alert pause named (JSON list): `--ignore-alert NAME` goes on past one of
// those, never a name the run did not pause on.
const PausedBucket = "alertpause-paused"

// ErrNotPausedOn refuses an --ignore-alert naming an alert the operation
// did not pause on (a typo, another case, a pre-emptive ignore).
var ErrNotPausedOn = errors.New("it did not pause on that alert")

// By is who the host's pause is recorded as ("paused by alertmanager").
const By = "alertmanager"

// Alerts is the part of the Alertmanager client the check uses.
type Alerts interface {
	Alerts(ctx context.Context, ms []silence.Matcher) ([]silence.Alert, error)
	URL() string
}

// Host is what the check needs from the engine.
type Host interface {
	PauseFor(ctx context.Context, id, by string, why []string) error
}

// Options configure a Checker.
type Options struct {
	Config       *config.AlertPause
	ClusterLabel string
	Store        *state.Store
	Client       Alerts
	// OwnSilence returns the id of the silence an operation holds ("" for
	// none); nil when silences are off.
	OwnSilence func(ctx context.Context, opID string) string
	Clock      func() time.Time
	Logger     *slog.Logger
	// Sink posts the pause's reason in the operation's thread.
	Sink engine.Sink
}

// Checker implements engine.RunHook.
type Checker struct {
	o   Options
	log *slog.Logger

	mu      sync.Mutex
	host    Host
	pollers map[string]*poller
	warned  map[string]bool // op id + what: a warning posted once per run
	wg      sync.WaitGroup
}

var _ engine.RunHook = (*Checker)(nil)

// New returns a Checker; SetHost must be called before the first run.
func New(o Options) (*Checker, error) {
	if o.Config == nil || o.Store == nil || o.Client == nil || o.ClusterLabel == "" {
		return nil, errors.New("alertpause: Config, Store, Client and ClusterLabel are required")
	}
	if o.Clock == nil {
		o.Clock = time.Now
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return &Checker{o: o, log: o.Logger, pollers: map[string]*poller{}, warned: map[string]bool{}}, nil
}

// SetHost gives the checker the engine (built after its hooks).
func (c *Checker) SetHost(h Host) {
	c.mu.Lock()
	c.host = h
	c.mu.Unlock()
}

func (c *Checker) getHost() Host {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.host
}

// Close stops the checks of running operations.
func (c *Checker) Close() {
	c.mu.Lock()
	for id, p := range c.pollers {
		p.stop()
		delete(c.pollers, id)
	}
	c.mu.Unlock()
	c.wg.Wait()
}

// RunStarting checks once before the run starts (or resumes): a match
// pauses it before its first node. Then it checks every alert_pause.every
// while the run goes on.
func (c *Checker) RunStarting(ctx context.Context, op *state.Operation) ([]string, error) {
	if c.check(ctx, op) {
		return nil, nil
	}
	c.startPoller(op.ID)
	return nil, nil
}

// RunProgress does nothing: the poller asks on its own schedule, so a node
// that reboots for minutes (no progress) is still covered.
func (c *Checker) RunProgress(context.Context, *state.Operation) {}

// RunEnded stops the checks and forgets the ignored alerts.
func (c *Checker) RunEnded(ctx context.Context, op *state.Operation, _ engine.RunOutput) []string {
	c.stopPoller(op.ID)
	if err := c.o.Store.Update(ctx, func(tx *state.Tx) error {
		if err := tx.DeleteKV(PausedBucket, op.ID); err != nil {
			return err
		}
		return tx.DeleteKV(IgnoreBucket, op.ID)
	}); err != nil && !errors.Is(err, state.ErrNotFound) {
		c.log.Warn("forget ignored alerts", "op", op.ID, "err", err)
	}
	c.mu.Lock()
	for k := range c.warned {
		if strings.HasPrefix(k, op.ID+"/") {
			delete(c.warned, k)
		}
	}
	c.mu.Unlock()
	return nil
}

func (c *Checker) startPoller(opID string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.pollers[opID]; ok {
		return
	}
	ctx, stop := context.WithCancel(context.Background())
	p := &poller{stop: stop}
	c.pollers[opID] = p
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		// Forget this poller only: once stopped, a resume may already
		// have started the next one for the same operation.
		defer c.forgetPoller(opID, p)
		t := time.NewTicker(c.o.Config.Every.D())
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			op, err := c.operation(ctx, opID)
			if err != nil || op.State != state.StateRunning {
				return // paused, ended or gone: a resume starts a new poller
			}
			if c.check(ctx, op) {
				return
			}
		}
	}()
}

func (c *Checker) stopPoller(opID string) {
	c.mu.Lock()
	if p, ok := c.pollers[opID]; ok {
		p.stop()
		delete(c.pollers, opID)
	}
	c.mu.Unlock()
}

// poller is one running check loop of an operation.
type poller struct{ stop context.CancelFunc }

// forgetPoller stops p and removes it if it is still opID's poller.
func (c *Checker) forgetPoller(opID string, p *poller) {
	p.stop()
	c.mu.Lock()
	if c.pollers[opID] == p {
		delete(c.pollers, opID)
	}
	c.mu.Unlock()
}

// matchers are the cluster label and the configured pause matchers.
func (c *Checker) matchers(cluster string) []silence.Matcher {
	ms := []silence.Matcher{{Name: c.o.ClusterLabel, Value: cluster, IsEqual: true}}
	for _, m := range c.o.Config.PauseMatchers() {
		ms = append(ms, silence.Matcher{Name: m.Name, Value: m.Value, IsRegex: m.IsRegex, IsEqual: m.IsEqual})
	}
	return ms
}

// Verdict sorts the matching alerts of one check.
type Verdict struct {
	// Pausing alerts stop the roll.
	Pausing []silence.Alert
	// Own alerts are inside the operation's silence (counted only with
	// count_silenced, then they are in Pausing too).
	Own []silence.Alert
	// Ignored alerts were resumed past with --ignore-alert.
	Ignored []silence.Alert
}

// Judge sorts alerts for an operation holding the silence own (maybe "")
// whose operator ignored the names in ignored. Alerts silenced by someone
// else's silence or inhibited ("suppressed") are muted on purpose and do not
// count. Every other state counts: "active", "unprocessed" (firing, not yet
// through Alertmanager's pipeline) and a state this version does not know,
// so an answer the bot cannot read pauses rather than goes on.
func Judge(alerts []silence.Alert, own string, ignored []string, countSilenced bool) Verdict {
	var v Verdict
	for _, a := range alerts {
		mine := own != "" && slices.Contains(a.Status.SilencedBy, own)
		switch {
		case slices.Contains(ignored, a.Labels["alertname"]):
			v.Ignored = append(v.Ignored, a)
		case mine:
			v.Own = append(v.Own, a)
			if countSilenced {
				v.Pausing = append(v.Pausing, a)
			}
		case a.Status.State != "suppressed":
			v.Pausing = append(v.Pausing, a)
		}
	}
	for _, l := range [][]silence.Alert{v.Pausing, v.Own, v.Ignored} {
		sort.SliceStable(l, func(i, j int) bool { return l[i].StartsAt.Before(l[j].StartsAt) })
	}
	return v
}

// check asks Alertmanager once for op and pauses it on a match; it reports
// whether it asked for the pause.
func (c *Checker) check(ctx context.Context, op *state.Operation) bool {
	if !op.Disruptive {
		return false
	}
	qctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	alerts, err := c.o.Client.Alerts(qctx, c.matchers(op.Cluster))
	cancel()
	if err != nil {
		return c.unreachable(ctx, op, err)
	}
	own := ""
	if c.o.OwnSilence != nil {
		own = c.o.OwnSilence(ctx, op.ID)
	}
	ignored, err := Ignored(ctx, c.o.Store, op.ID)
	if err != nil {
		c.log.Warn("read ignored alerts", "op", op.ID, "err", err)
	}
	v := Judge(alerts, own, ignored, c.o.Config.CountSilenced)
	if len(v.Pausing) == 0 {
		return false
	}
	c.recordPaused(ctx, op.ID, v.Pausing)
	return c.pause(ctx, op, c.why(op, v), "alert/"+v.Pausing[0].Labels["alertname"])
}

// unreachable pauses (default) or goes on, audited, when Alertmanager
// cannot be asked.
func (c *Checker) unreachable(ctx context.Context, op *state.Operation, err error) bool {
	if c.o.Config.OnUnreachable == config.AlertPauseOnUnreachableContinue {
		c.audit(ctx, op, "alert check skipped", "failed", map[string]string{"error": err.Error(), "alertmanager": c.o.Client.URL(), "setting": "alert_pause.on_unreachable: continue"})
		c.warnOnce(ctx, op, "unreachable", fmt.Sprintf("⚠️ could not ask Alertmanager for firing alerts (%s); going on, as alert_pause.on_unreachable is continue", chat.Clip(err.Error())))
		return false
	}
	c.recordPaused(ctx, op.ID, nil)
	return c.pause(ctx, op, []string{
		fmt.Sprintf("⚠️ could not ask Alertmanager at %s for firing alerts: %s", c.o.Client.URL(), chat.Clip(err.Error())),
		"Resume asks again once it answers; set alert_pause.on_unreachable: continue to go on without it",
	}, "unreachable")
}

// pause asks the host for the pause; a run that cannot pause is warned
// about once instead.
func (c *Checker) pause(ctx context.Context, op *state.Operation, why []string, what string) bool {
	h := c.getHost()
	if h == nil {
		c.log.Error("alert pause has no host (SetHost was not called)", "op", op.ID)
		return false
	}
	err := h.PauseFor(ctx, op.ID, By, why)
	if errors.Is(err, engine.ErrNotPausable) {
		c.warnOnce(ctx, op, what, strings.Join(why, "\n")+"\n⚠️ this run cannot pause between nodes (its plugin does not stop there), so it goes on; `/talos cancel "+op.ID+"` stops it")
		return false
	}
	if err != nil {
		c.log.Warn("pause on alert", "op", op.ID, "err", err)
		return false
	}
	return true
}

func (c *Checker) warnOnce(ctx context.Context, op *state.Operation, what, text string) {
	key := op.ID + "/" + what
	c.mu.Lock()
	seen := c.warned[key]
	c.warned[key] = true
	c.mu.Unlock()
	if seen {
		return
	}
	if c.o.Sink != nil {
		c.o.Sink.Thread(ctx, op, text)
	}
}

// why is the ending's text: each pausing alert with its summary and start,
// then the operation's own alerts apart, then how to go on.
func (c *Checker) why(op *state.Operation, v Verdict) []string {
	var lines []string
	for i, a := range v.Pausing {
		if i == 5 {
			lines = append(lines, fmt.Sprintf("…and %d more firing", len(v.Pausing)-5))
			break
		}
		lines = append(lines, "🚨 "+describe(a))
	}
	if len(v.Own) > 0 {
		var names []string
		for _, a := range v.Own {
			names = append(names, chat.Clip(a.Labels["alertname"]))
		}
		counted := "not counted"
		if c.o.Config.CountSilenced {
			counted = "counted, as alert_pause.count_silenced is set"
		}
		lines = append(lines, fmt.Sprintf("🔕 inside this operation's own silence (%s): %s", counted, strings.Join(names, ", ")))
	}
	lines = append(lines, fmt.Sprintf("Resume asks Alertmanager again; `/talos resume %s --ignore-alert %s` goes on past that alert (audited)",
		op.ID, chat.Clip(v.Pausing[0].Labels["alertname"])))
	return lines
}

func describe(a silence.Alert) string {
	s := "alert " + chat.Clip(a.Labels["alertname"])
	var where []string
	for _, k := range []string{"severity", "node", "instance"} {
		if v := a.Labels[k]; v != "" {
			where = append(where, k+"="+chat.Clip(v))
		}
	}
	if len(where) > 0 {
		s += " (" + strings.Join(where, ", ") + ")"
	}
	if !a.StartsAt.IsZero() {
		s += " firing since " + a.StartsAt.UTC().Format("2006-01-02 15:04 UTC")
	}
	if sum := a.Annotations["summary"]; sum != "" {
		s += ": " + chat.Clip(sum)
	}
	return s
}

// recordPaused keeps the names of the alerts a pause names (none for a
// pause on an unreachable Alertmanager), for Ignore.
func (c *Checker) recordPaused(ctx context.Context, opID string, alerts []silence.Alert) {
	names := []string{}
	for _, a := range alerts {
		if n := a.Labels["alertname"]; n != "" && !slices.Contains(names, n) {
			names = append(names, n)
		}
	}
	raw, err := json.Marshal(names)
	if err == nil {
		err = c.o.Store.Update(ctx, func(tx *state.Tx) error { return tx.PutKV(PausedBucket, opID, raw) })
	}
	if err != nil {
		c.log.Warn("record the alerts of a pause", "op", opID, "err", err)
	}
}

// Ignore records that user resumes op past the alert name (audited). The
// name must be one op's last alert pause named, exactly (ErrNotPausedOn
// otherwise). It reports whether it added the name: false when an earlier
// resume already ignores it.
func Ignore(ctx context.Context, st *state.Store, op *state.Operation, name, user string, now time.Time) (bool, error) {
	added := false
	err := st.Update(ctx, func(tx *state.Tx) error {
		paused, err := namesTx(tx, PausedBucket, op.ID)
		if err != nil {
			return err
		}
		if !slices.Contains(paused, name) {
			if len(paused) == 0 {
				return fmt.Errorf("%w: operation %s was not paused by an alert; a plain resume asks Alertmanager again", ErrNotPausedOn, op.ID)
			}
			clipped := make([]string, len(paused))
			for i, n := range paused {
				clipped[i] = chat.Clip(n)
			}
			return fmt.Errorf("%w: operation %s paused on %s (names are exact, case included)", ErrNotPausedOn, op.ID, strings.Join(clipped, ", "))
		}
		names, err := ignoredTx(tx, op.ID)
		if err != nil {
			return err
		}
		if slices.Contains(names, name) {
			return nil
		}
		added = true
		raw, err := json.Marshal(append(names, name))
		if err != nil {
			return err
		}
		if err := tx.PutKV(IgnoreBucket, op.ID, raw); err != nil {
			return err
		}
		_, err = tx.Append(state.AuditEvent{Time: now, Actor: user, Action: "alert ignored", Cluster: op.Cluster, OpID: op.ID,
			Command: op.Command, Result: "ok", Detail: map[string]string{"alertname": name}})
		return err
	})
	if err != nil {
		return false, fmt.Errorf("record --ignore-alert %s: %w", name, err)
	}
	return added, nil
}

// Unignore takes back an Ignore that added name, when the resume it was
// for did not happen (audited, so the trail does not end at "alert
// ignored"). Only a name that Ignore added may be taken back: one an
// earlier resume ignored stays.
func Unignore(ctx context.Context, st *state.Store, op *state.Operation, name, user string, now time.Time) error {
	return st.Update(ctx, func(tx *state.Tx) error {
		names, err := ignoredTx(tx, op.ID)
		if err != nil {
			return err
		}
		names = slices.DeleteFunc(names, func(n string) bool { return n == name })
		raw, err := json.Marshal(names)
		if err != nil {
			return err
		}
		if err := tx.PutKV(IgnoreBucket, op.ID, raw); err != nil {
			return err
		}
		_, err = tx.Append(state.AuditEvent{Time: now, Actor: user, Action: "alert ignore withdrawn", Cluster: op.Cluster, OpID: op.ID,
			Command: op.Command, Result: "refused", Detail: map[string]string{"alertname": name, "why": "the resume did not happen"}})
		return err
	})
}

// Ignored lists the alert names op was resumed past.
func Ignored(ctx context.Context, st *state.Store, opID string) ([]string, error) {
	var names []string
	err := st.View(ctx, func(tx *state.Tx) error {
		var err error
		names, err = ignoredTx(tx, opID)
		return err
	})
	return names, err
}

func ignoredTx(tx *state.Tx, opID string) ([]string, error) { return namesTx(tx, IgnoreBucket, opID) }

// namesTx reads the JSON list of alert names kept under opID in bucket.
func namesTx(tx *state.Tx, bucket, opID string) ([]string, error) {
	raw, err := tx.GetKV(bucket, opID)
	if errors.Is(err, state.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var names []string
	if err := json.Unmarshal(raw, &names); err != nil {
		return nil, fmt.Errorf("decode %s/%s: %w", bucket, opID, err)
	}
	return names, nil
}

func (c *Checker) operation(ctx context.Context, id string) (*state.Operation, error) {
	var op *state.Operation
	err := c.o.Store.View(ctx, func(tx *state.Tx) error {
		var err error
		op, err = tx.Operation(id)
		return err
	})
	return op, err
}

func (c *Checker) audit(ctx context.Context, op *state.Operation, action, result string, detail map[string]string) {
	if _, err := c.o.Store.AppendAudit(ctx, state.AuditEvent{Time: c.o.Clock().UTC(), Actor: "system", Action: action, Cluster: op.Cluster,
		OpID: op.ID, Command: op.Command, Result: result, Detail: detail}); err != nil {
		c.log.Error("audit alert pause event", "op", op.ID, "action", action, "err", err)
	}
}
