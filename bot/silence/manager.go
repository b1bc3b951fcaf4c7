package silence

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/talosbot/talosbot/bot/engine"
	"github.com/talosbot/talosbot/config"
	"github.com/talosbot/talosbot/state"
)

// Bucket is the kv bucket holding one record per operation that holds a
// silence: the silence id lives with the operation, so a restart finds it.
const Bucket = "silences"

// Record is what the store keeps for an operation's silence.
type Record struct {
	OpID       string    `json:"op_id"`
	Cluster    string    `json:"cluster"`
	SilenceID  string    `json:"silence_id"`
	Matchers   []Matcher `json:"matchers"`
	StartsAt   time.Time `json:"starts_at"`
	EndsAt     time.Time `json:"ends_at"`
	ExtendedAt time.Time `json:"extended_at"`
	CreatedBy  string    `json:"created_by"`
	Comment    string    `json:"comment"`
}

// Options configure a Manager.
type Options struct {
	Config *config.Silences
	Store  *state.Store
	Client *Client
	Clock  func() time.Time
	Logger *slog.Logger
	// KeepaliveEvery is how often a running operation's silence is
	// extended when no progress arrives (default Duration/3). Progress
	// events extend it on the same schedule.
	KeepaliveEvery time.Duration
}

// Manager implements engine.RunHook for silences.
type Manager struct {
	o   Options
	log *slog.Logger

	mu         sync.Mutex
	keepalives map[string]context.CancelFunc // op id → stop its keepalive
	wg         sync.WaitGroup
	// work serialises the changes to silences and their records: an
	// extension racing the end would otherwise re-create a silence that was
	// just expired.
	work sync.Mutex
}

var _ engine.RunHook = (*Manager)(nil)

// New returns a Manager.
func New(o Options) (*Manager, error) {
	if o.Config == nil || o.Store == nil || o.Client == nil {
		return nil, errors.New("silence: Config, Store and Client are required")
	}
	if o.Clock == nil {
		o.Clock = time.Now
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.KeepaliveEvery <= 0 {
		o.KeepaliveEvery = o.Config.Duration.D() / 3
	}
	return &Manager{o: o, log: o.Logger, keepalives: map[string]context.CancelFunc{}}, nil
}

// Close stops the keepalives; the silences stay (they lapse at their end,
// or the next start finds them).
func (m *Manager) Close() {
	m.mu.Lock()
	for id, stop := range m.keepalives {
		stop()
		delete(m.keepalives, id)
	}
	m.mu.Unlock()
	m.wg.Wait()
}

func (m *Manager) now() time.Time { return m.o.Clock().UTC() }

// matchers scopes the silence: the cluster label, and with node_label set
// the operation's nodes.
func (m *Manager) matchers(op *state.Operation) []Matcher {
	ms := []Matcher{{Name: m.o.Config.ClusterLabel, Value: op.Cluster, IsEqual: true}}
	if m.o.Config.NodeLabel == "" {
		return ms
	}
	seen := map[string]bool{}
	var nodes []string
	for _, s := range op.Steps {
		if s.Node != "" && !seen[s.Node] {
			seen[s.Node] = true
			nodes = append(nodes, regexp.QuoteMeta(s.Node))
		}
	}
	if len(nodes) == 0 {
		return ms // no node named: the whole cluster is being worked on
	}
	sort.Strings(nodes)
	return append(ms, Matcher{Name: m.o.Config.NodeLabel, Value: strings.Join(nodes, "|"), IsRegex: true, IsEqual: true})
}

func comment(op *state.Operation) string {
	return fmt.Sprintf("talosbot operation %s (%s on %s), requested by %s; expires when the operation ends", op.ID, op.Command, op.Cluster, op.Requester)
}

// RunStarting creates the operation's silence, or extends the one a resumed
// operation already holds. When Alertmanager cannot be reached the run goes
// on with a warning, unless the environment requires a silence.
func (m *Manager) RunStarting(ctx context.Context, op *state.Operation) ([]string, error) {
	m.work.Lock()
	defer m.work.Unlock()
	rec, err := m.load(ctx, op.ID)
	if err != nil {
		return nil, err
	}
	now := m.now()
	var action string
	if rec != nil {
		action = "silence extended"
		err = m.extend(ctx, rec, now)
	} else {
		action = "silence created"
		rec = &Record{OpID: op.ID, Cluster: op.Cluster, Matchers: m.matchers(op), StartsAt: now, CreatedBy: "talosbot for " + op.Requester, Comment: comment(op)}
		err = m.post(ctx, rec, now)
	}
	if err != nil {
		m.audit(ctx, op, "silence failed", "failed", map[string]string{"error": err.Error(), "alertmanager": m.o.Client.URL()})
		if m.o.Config.Required(op.Environment) {
			return nil, fmt.Errorf("%s requires an Alertmanager silence before a disruptive run (silences.require_in) and none could be made: %w; "+
				"fix Alertmanager at %s, or remove %s from silences.require_in", op.Environment, err, m.o.Client.URL(), op.Environment)
		}
		return []string{fmt.Sprintf("⚠️ no Alertmanager silence for this run (%v): alerts it causes will notify as usual", err)}, nil
	}
	m.audit(ctx, op, action, "ok", map[string]string{"silence": rec.SilenceID, "matchers": matcherText(rec.Matchers), "ends_at": rec.EndsAt.Format(time.RFC3339)})
	m.startKeepalive(op.ID)
	return []string{fmt.Sprintf("🔕 Alertmanager silence %s holds %s until the operation ends (now until %s)", rec.SilenceID, matcherText(rec.Matchers), rec.EndsAt.Format("15:04 MST"))}, nil
}

// post writes rec to Alertmanager with a new end and stores it.
func (m *Manager) post(ctx context.Context, rec *Record, now time.Time) error {
	ends := now.Add(m.o.Config.Duration.D())
	id, err := m.o.Client.Post(ctx, Silence{ID: rec.SilenceID, Matchers: rec.Matchers, StartsAt: rec.StartsAt, EndsAt: ends, CreatedBy: rec.CreatedBy, Comment: rec.Comment})
	if err != nil {
		return err
	}
	rec.SilenceID, rec.EndsAt, rec.ExtendedAt = id, ends, now
	return m.save(ctx, rec)
}

// extend moves an existing silence's end. A silence Alertmanager no longer
// knows (it lapsed while the bot was down, or was deleted by hand) is made
// again from the record.
func (m *Manager) extend(ctx context.Context, rec *Record, now time.Time) error {
	err := m.post(ctx, rec, now)
	if errors.Is(err, ErrNotFound) || (err != nil && strings.Contains(err.Error(), "HTTP 400")) {
		rec.SilenceID, rec.StartsAt = "", now
		err = m.post(ctx, rec, now)
	}
	return err
}

// RunProgress extends the silence when it is due.
func (m *Manager) RunProgress(ctx context.Context, op *state.Operation) {
	m.extendIfDue(ctx, op.ID)
}

func (m *Manager) extendIfDue(ctx context.Context, opID string) {
	m.work.Lock()
	defer m.work.Unlock()
	rec, err := m.load(ctx, opID)
	if err != nil || rec == nil {
		return
	}
	now := m.now()
	if now.Sub(rec.ExtendedAt) < m.o.KeepaliveEvery {
		return
	}
	if err := m.extend(ctx, rec, now); err != nil {
		m.log.Warn("extend alertmanager silence", "op", opID, "silence", rec.SilenceID, "err", err)
		return
	}
	m.log.Debug("alertmanager silence extended", "op", opID, "silence", rec.SilenceID, "ends_at", rec.EndsAt)
}

// startKeepalive extends the silence on a timer while the run is quiet (a
// node rebooting for minutes sends no progress).
func (m *Manager) startKeepalive(opID string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.keepalives[opID]; ok {
		return
	}
	ctx, stop := context.WithCancel(context.Background())
	m.keepalives[opID] = stop
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		t := time.NewTicker(m.o.KeepaliveEvery)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				m.extendIfDue(ctx, opID)
			}
		}
	}()
}

func (m *Manager) stopKeepalive(opID string) {
	m.mu.Lock()
	if stop, ok := m.keepalives[opID]; ok {
		stop()
		delete(m.keepalives, opID)
	}
	m.mu.Unlock()
}

// RunEnded reports the alerts still firing under the silence and expires it.
func (m *Manager) RunEnded(ctx context.Context, op *state.Operation, _ engine.RunOutput) []string {
	m.stopKeepalive(op.ID)
	m.work.Lock()
	defer m.work.Unlock()
	rec, err := m.load(ctx, op.ID)
	if err != nil || rec == nil {
		return nil
	}
	var lines []string
	if alerts, err := m.o.Client.Alerts(ctx, rec.Matchers); err == nil && len(alerts) > 0 {
		lines = append(lines, fmt.Sprintf("🔔 %d alert(s) still firing as the silence ends: %s", len(alerts), alertList(alerts)))
	}
	if err := m.expire(ctx, op, rec, "operation "+string(op.State)); err != nil {
		lines = append(lines, fmt.Sprintf("⚠️ could not expire Alertmanager silence %s (%v): expire it by hand, or it lapses at %s",
			rec.SilenceID, err, rec.EndsAt.Format(time.RFC3339)))
	} else {
		lines = append(lines, fmt.Sprintf("🔔 Alertmanager silence %s expired", rec.SilenceID))
	}
	return lines
}

// expire ends the silence in Alertmanager and drops its record. The record
// stops suppressing first: Alertmanager may flush the group the moment the
// silence ends, and a notification the bot then kept quiet would count as
// sent in Alertmanager's notification log, so the alert still firing would
// not reach the channel until repeat_interval. If Alertmanager refuses, the
// record is put back as it was: the silence still holds there until its end.
func (m *Manager) expire(ctx context.Context, op *state.Operation, rec *Record, why string) error {
	ending := *rec
	ending.EndsAt = m.now()
	if err := m.save(ctx, &ending); err != nil {
		return fmt.Errorf("mark silence %s as ending: %w", rec.SilenceID, err)
	}
	if err := m.o.Client.Expire(ctx, rec.SilenceID); err != nil {
		m.audit(ctx, op, "silence expire failed", "failed", map[string]string{"silence": rec.SilenceID, "error": err.Error(), "reason": why})
		if serr := m.save(ctx, rec); serr != nil {
			m.log.Error("restore silence record after a failed expiry", "op", op.ID, "silence", rec.SilenceID, "err", serr)
		}
		return err
	}
	m.audit(ctx, op, "silence expired", "ok", map[string]string{"silence": rec.SilenceID, "reason": why})
	return m.o.Store.Update(ctx, func(tx *state.Tx) error { return tx.DeleteKV(Bucket, op.ID) })
}

// Recover runs at start-up, after the engine's recovery: a silence whose
// operation ended while the bot could not expire it (a crash between the
// end and the expiry) is expired now; an interrupted operation keeps its
// silence until it is resumed (extended again) or abandoned (expired); it
// lapses at its end meanwhile. It returns one line per silence handled.
func (m *Manager) Recover(ctx context.Context) ([]string, error) {
	var recs []Record
	err := m.o.Store.View(ctx, func(tx *state.Tx) error {
		return tx.ForEachKV(Bucket, func(_ string, v []byte) error {
			var r Record
			if err := json.Unmarshal(v, &r); err != nil {
				return fmt.Errorf("decode silence record: %w", err)
			}
			recs = append(recs, r)
			return nil
		})
	})
	if err != nil {
		return nil, err
	}
	m.work.Lock()
	defer m.work.Unlock()
	var lines []string
	for i := range recs {
		rec := &recs[i]
		op, err := m.operation(ctx, rec.OpID)
		switch {
		case err != nil || op.State.Terminal():
			if op == nil {
				op = &state.Operation{ID: rec.OpID, Cluster: rec.Cluster}
			}
			if err := m.expire(ctx, op, rec, "found at start-up after its operation ended"); err != nil {
				lines = append(lines, fmt.Sprintf("silence %s of operation %s: could not expire it: %v", rec.SilenceID, rec.OpID, err))
				continue
			}
			lines = append(lines, fmt.Sprintf("silence %s of ended operation %s expired", rec.SilenceID, rec.OpID))
		default:
			lines = append(lines, fmt.Sprintf("silence %s is held for %s operation %s until it is resumed or abandoned (it lapses at %s)",
				rec.SilenceID, op.State, op.ID, rec.EndsAt.Format(time.RFC3339)))
		}
	}
	return lines, nil
}

// Suppressing returns the operation whose silence matches an alert with
// these labels, if one is active. The alert receiver uses it to keep quiet
// about what the bot's own operation caused.
func (m *Manager) Suppressing(ctx context.Context, labels map[string]string) (string, bool) {
	var found string
	_ = m.o.Store.View(ctx, func(tx *state.Tx) error {
		return tx.ForEachKV(Bucket, func(_ string, v []byte) error {
			var r Record
			if json.Unmarshal(v, &r) == nil && found == "" && m.now().Before(r.EndsAt) && Matches(r.Matchers, labels) {
				found = r.OpID
			}
			return nil
		})
	})
	return found, found != ""
}

// Matches applies Alertmanager's matcher semantics: every matcher must
// hold; regexes are anchored; a missing label is the empty string.
func Matches(ms []Matcher, labels map[string]string) bool {
	for _, m := range ms {
		v := labels[m.Name]
		ok := v == m.Value
		if m.IsRegex {
			re, err := regexp.Compile("^(?:" + m.Value + ")$")
			if err != nil {
				return false
			}
			ok = re.MatchString(v)
		}
		if ok != m.IsEqual {
			return false
		}
	}
	return true
}

func (m *Manager) load(ctx context.Context, opID string) (*Record, error) {
	var rec *Record
	err := m.o.Store.View(ctx, func(tx *state.Tx) error {
		raw, err := tx.GetKV(Bucket, opID)
		if errors.Is(err, state.ErrNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		var r Record
		if err := json.Unmarshal(raw, &r); err != nil {
			return fmt.Errorf("decode silence record of %s: %w", opID, err)
		}
		rec = &r
		return nil
	})
	return rec, err
}

func (m *Manager) save(ctx context.Context, rec *Record) error {
	raw, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	return m.o.Store.Update(ctx, func(tx *state.Tx) error { return tx.PutKV(Bucket, rec.OpID, raw) })
}

func (m *Manager) operation(ctx context.Context, id string) (*state.Operation, error) {
	var op *state.Operation
	err := m.o.Store.View(ctx, func(tx *state.Tx) error {
		var err error
		op, err = tx.Operation(id)
		return err
	})
	return op, err
}

func (m *Manager) audit(ctx context.Context, op *state.Operation, action, result string, detail map[string]string) {
	_, err := m.o.Store.AppendAudit(ctx, state.AuditEvent{Time: m.now(), Actor: "system", Action: action, Cluster: op.Cluster,
		OpID: op.ID, Command: op.Command, Result: result, Detail: detail})
	if err != nil {
		m.log.Error("audit silence event", "op", op.ID, "action", action, "err", err)
	}
}

func matcherText(ms []Matcher) string {
	parts := make([]string, 0, len(ms))
	for _, m := range ms {
		parts = append(parts, m.String())
	}
	return "{" + strings.Join(parts, ", ") + "}"
}

func alertList(as []Alert) string {
	const max = 5
	var parts []string
	for i, a := range as {
		if i == max {
			parts = append(parts, fmt.Sprintf("and %d more", len(as)-max))
			break
		}
		s := a.Labels["alertname"]
		for _, k := range []string{"node", "instance"} {
			if v := a.Labels[k]; v != "" {
				s += " " + k + "=" + v
				break
			}
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, ", ")
}

// SilenceID returns the id of the silence opID holds ("" without one): the
// alert pause (bot/alertpause) lists the alerts inside it separately.
func (m *Manager) SilenceID(ctx context.Context, opID string) string {
	rec, err := m.load(ctx, opID)
	if err != nil || rec == nil {
		return ""
	}
	return rec.SilenceID
}
