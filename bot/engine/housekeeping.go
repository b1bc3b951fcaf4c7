package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/talosbot/talosbot/state"
)

// cancelBucket records who cancelled a run (op id → user); the run's end
// reads it to say who stopped it.
const cancelBucket = "cancel"

// TokenRetention is how long button tokens (the actions bucket) and cancel
// marks are kept after they were written. Records of an operation that has
// not ended are kept whatever their age, so a long wait for approval never
// loses its buttons; a click on a pruned button is refused as unknown, like
// any stale one. The same 30 days as the default operation-log retention.
const TokenRetention = 30 * 24 * time.Hour

// PruneInterval is how often the engine prunes when Options.PruneTicks is nil.
const PruneInterval = time.Hour

// Prune deletes button tokens and cancel marks older than TokenRetention
// whose operation has ended or is gone (command buttons belong to no
// operation and go by age alone). It returns how many records went.
func (e *Engine) Prune(ctx context.Context) (int, error) {
	cutoff := e.now().Add(-TokenRetention)
	ended := func(tx *state.Tx, id string) (bool, error) {
		op, err := tx.Operation(id)
		if errors.Is(err, state.ErrNotFound) {
			return true, nil
		}
		if err != nil {
			return false, err
		}
		return op.State.Terminal(), nil
	}
	tokens, err := e.o.Store.PruneKV(ctx, actionsBucket, cutoff, func(tx *state.Tx, _ string, val []byte) (bool, error) {
		var rec actionRecord
		if json.Unmarshal(val, &rec) != nil || rec.OpID == "" {
			return false, nil
		}
		done, err := ended(tx, rec.OpID)
		return !done, err
	})
	if err != nil {
		return 0, fmt.Errorf("prune button tokens older than %s: %w", TokenRetention, err)
	}
	marks, err := e.o.Store.PruneKV(ctx, cancelBucket, cutoff, func(tx *state.Tx, id string, _ []byte) (bool, error) {
		done, err := ended(tx, id)
		return !done, err
	})
	if err != nil {
		return tokens, fmt.Errorf("prune cancel marks older than %s: %w", TokenRetention, err)
	}
	return tokens + marks, nil
}

// pruneLoop prunes once at start and then on every tick until ctx ends.
func (e *Engine) pruneLoop(ctx context.Context, ticks <-chan time.Time) {
	if ticks == nil {
		t := time.NewTicker(PruneInterval)
		defer t.Stop()
		ticks = t.C
	}
	for {
		switch n, err := e.Prune(ctx); {
		case err != nil && ctx.Err() == nil:
			e.log.Warn("pruning button tokens and cancel marks failed", "err", err)
		case n > 0:
			e.log.Info("pruned button tokens and cancel marks", "records", n, "older_than", TokenRetention.String())
		}
		select {
		case <-ctx.Done():
			return
		case <-ticks:
		}
	}
}
