package engine

import (
	"context"
	"fmt"
	"sort"
	"time"

	"github.com/talosbot/talosbot/config"
	lifecyclev1 "github.com/talosbot/talosbot/plugins/sdk/proto/lifecycle/v1"
	"github.com/talosbot/talosbot/state"
)

// backupSettings is what a plugin needs to know about backups: snapshot_dir,
// the retention policies, encryption recipients, the off-site target, and,
// because plugins never read the store, the artifact ids that operation
// records of cl still name (docs/BACKUPS.md). The bot keeps these settings
// (its scheduler and secret references read them); plugins get them as
// evidence.
func (e *Engine) backupSettings(ctx context.Context, cl *config.Cluster) (*lifecyclev1.Backups, error) {
	s := e.o.Config.Snapshots
	b := &lifecyclev1.Backups{Local: retentionMsg(s.Local()), Dir: e.o.Config.SnapshotDir}
	var err error
	if b.ProtectedBy, err = e.protectedArtifacts(ctx, cl.Name, s.Soak.D()); err != nil {
		return nil, err
	}
	for id := range b.ProtectedBy {
		b.ProtectedSnapshots = append(b.ProtectedSnapshots, id)
	}
	sort.Strings(b.ProtectedSnapshots)
	if b.LastDrill, err = e.lastDrill(ctx, cl.Name); err != nil {
		return nil, err
	}
	if enc := s.Encryption; enc != nil {
		b.AgeRecipients = append([]string(nil), enc.Recipients...)
	}
	if o := s.Offsite; o != nil {
		b.Offsite = &lifecyclev1.Offsite{Endpoint: o.Endpoint, Bucket: o.Bucket, Prefix: o.Prefix, Region: o.Region, Insecure: o.Insecure}
		b.OffsiteRetention = retentionMsg(o.Retention)
	}
	return b, nil
}

func retentionMsg(r config.Retention) *lifecyclev1.Retention {
	return &lifecyclev1.Retention{Keep: int32(r.Keep), MaxAgeSeconds: int64(r.MaxAge.D().Seconds()),
		Hourly: int32(r.Hourly), Daily: int32(r.Daily), Weekly: int32(r.Weekly), Monthly: int32(r.Monthly)}
}

// protectedArtifacts maps the artifact ids ("<cluster>/...") named by the
// records of disruptive operations on cluster that have not ended, or ended
// less than soak ago, to the operation. Those records are the maintenance
// records whose rollback depends on the snapshot taken before them; a plain
// snapshot operation's own record does not protect its output, or retention
// could never thin out a schedule within the soak period.
func (e *Engine) protectedArtifacts(ctx context.Context, cluster string, soak time.Duration) (map[string]string, error) {
	now := e.now()
	ids := map[string]string{}
	err := e.o.Store.View(ctx, func(tx *state.Tx) error {
		ops, err := tx.Operations(state.OpFilter{Cluster: cluster})
		if err != nil {
			return err
		}
		for _, o := range ops {
			if !o.Disruptive || len(o.Artifacts) == 0 {
				continue
			}
			if o.State.Terminal() && !o.EndedAt.IsZero() && now.Sub(o.EndedAt) > soak {
				continue
			}
			for _, a := range o.Artifacts {
				if a.SnapshotOf(cluster) {
					ids[a.ID] = o.ID
				}
			}
		}
		return nil
	})
	return ids, err
}

// lastDrill describes the latest restore drill on cluster: the latest run
// of any command whose manifest declares DRILL_ETCD_RESTORE (the engine
// knows no command name).
func (e *Engine) lastDrill(ctx context.Context, cluster string) (string, error) {
	var out string
	err := e.o.Store.View(ctx, func(tx *state.Tx) error {
		var latest *state.Operation
		for _, spec := range e.grammar.Specs() {
			if spec.Plugin == "" || spec.GetDrill() != lifecyclev1.Drill_DRILL_ETCD_RESTORE {
				continue
			}
			ops, err := tx.Operations(state.OpFilter{Cluster: cluster, Command: spec.Name})
			if err != nil {
				return err
			}
			for _, o := range ops {
				if latest == nil || o.CreatedAt.After(latest.CreatedAt) {
					latest = o
				}
			}
		}
		if latest != nil {
			at := latest.EndedAt
			if at.IsZero() {
				at = latest.CreatedAt
			}
			out = fmt.Sprintf("%s %s %s", latest.ID, latest.State, at.UTC().Format(time.RFC3339))
		}
		return nil
	})
	return out, err
}

// backupCredentials adds the off-site credentials to the credentials of an
// operation whose command takes a snapshot (manifest needs_snapshot) or
// reads one back (reads_snapshot), and the age identity to the latter only:
// a health check never holds the bucket's keys, and taking a snapshot never
// needs the key that decrypts it.
func (e *Engine) backupCredentials(op *state.Operation, c *lifecyclev1.Credentials) error {
	s := e.o.Config.Snapshots
	spec, ok := e.grammar.Lookup(op.Command)
	if !ok || !(spec.GetNeedsSnapshot() || spec.GetReadsSnapshot()) {
		return nil
	}
	var err error
	if o := s.Offsite; o != nil {
		if c.OffsiteAccessKeyId, err = o.AccessKeyID.Resolve(); err != nil {
			return fmt.Errorf("snapshots.offsite.access_key_id: %w", err)
		}
		if c.OffsiteSecretAccessKey, err = o.SecretAccessKey.Resolve(); err != nil {
			return fmt.Errorf("snapshots.offsite.secret_access_key: %w", err)
		}
	}
	// The identity only to a command that reads a snapshot back and is not
	// read-only (the drill), never to a list or to one that takes snapshots.
	if enc := s.Encryption; spec.GetReadsSnapshot() && spec.GetEffect() != lifecyclev1.Effect_EFFECT_READ_ONLY && enc != nil && !enc.Identity.Empty() {
		if c.AgeIdentity, err = enc.Identity.Resolve(); err != nil {
			return fmt.Errorf("snapshots.encryption.identity: %w", err)
		}
	}
	return nil
}
