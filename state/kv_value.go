package state

import (
	"context"
	"errors"
)

// LoadKV reads one value of the generic KV buckets in its own read
// transaction: nil (and no error) when it is absent. With SaveKV it lets a
// package below the bot keep a small cache through a two-method interface
// (e.g. internal/releases.KVStore) without linking this package.
func (s *Store) LoadKV(ctx context.Context, bucket, key string) ([]byte, error) {
	var val []byte
	err := s.View(ctx, func(tx *Tx) error {
		v, err := tx.GetKV(bucket, key)
		if errors.Is(err, ErrNotFound) {
			return nil
		}
		val = v
		return err
	})
	return val, err
}

// SaveKV stores one value of the generic KV buckets in its own write
// transaction (Tx.PutKV).
func (s *Store) SaveKV(ctx context.Context, bucket, key string, val []byte) error {
	return s.Update(ctx, func(tx *Tx) error { return tx.PutKV(bucket, key, val) })
}
