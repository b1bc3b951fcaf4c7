package engine

import (
	"context"
	"encoding/json"
	"errors"

	"github.com/talosbot/talosbot/state"
)

// freezesBucket holds one Freeze per frozen cluster. The engine reads it for
// every policy check; the freeze and unfreeze commands (package bot) write it
// through PutFreeze and DeleteFreeze, so the bucket is named in one place.
const freezesBucket = "freezes"

// Freeze returns the cluster's freeze, or nil.
func (e *Engine) Freeze(ctx context.Context, cluster string) (*Freeze, error) {
	var f *Freeze
	err := e.o.Store.View(ctx, func(tx *state.Tx) error {
		raw, err := tx.GetKV(freezesBucket, cluster)
		if errors.Is(err, state.ErrNotFound) || (err == nil && raw == nil) {
			return nil
		}
		if err != nil {
			return err
		}
		f = &Freeze{}
		return json.Unmarshal(raw, f)
	})
	return f, err
}

// PutFreeze freezes cluster inside tx.
func PutFreeze(tx *state.Tx, cluster string, f Freeze) error {
	raw, err := json.Marshal(f)
	if err != nil {
		return err
	}
	return tx.PutKV(freezesBucket, cluster, raw)
}

// DeleteFreeze unfreezes cluster inside tx.
func DeleteFreeze(tx *state.Tx, cluster string) error {
	return tx.DeleteKV(freezesBucket, cluster)
}
