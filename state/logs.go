package state

import (
	"context"
	"encoding/json"
	"fmt"
	"time"
)

// MaxLogLine bounds one stored log line; longer lines are cut and marked.
const MaxLogLine = 16 << 10

// AppendLog stores one verbose log line of an operation. Logs live outside
// the audit chain (they are bulky and pruned by age); the chain records what
// happened, the logs how.
func (t *Tx) AppendLog(opID string, line string) error {
	if err := t.writable("append log"); err != nil {
		return err
	}
	if opID == "" {
		return fmt.Errorf("append log: operation id is required")
	}
	if len(line) > MaxLogLine {
		line = line[:MaxLogLine] + " …[truncated]"
	}
	logs, err := t.bucket(bLogs)
	if err != nil {
		return err
	}
	b, err := logs.CreateBucketIfNotExists([]byte(opID))
	if err != nil {
		return fmt.Errorf("append log of %s: %w", opID, err)
	}
	seq, err := b.NextSequence()
	if err != nil {
		return fmt.Errorf("append log of %s: %w", opID, err)
	}
	raw, err := json.Marshal(LogLine{Time: t.now(), Line: line})
	if err != nil {
		return fmt.Errorf("encode log line: %w", err)
	}
	b.FillPercent = 1 // append-only
	if err := b.Put(u64(seq), raw); err != nil {
		return fmt.Errorf("append log of %s: %w", opID, err)
	}
	return nil
}

// Logs returns an operation's log lines in the order they were appended.
func (s *Store) Logs(ctx context.Context, opID string) ([]LogLine, error) {
	var out []LogLine
	err := s.View(ctx, func(tx *Tx) error {
		logs, err := tx.bucket(bLogs)
		if err != nil {
			return err
		}
		b := logs.Bucket([]byte(opID))
		if b == nil {
			return nil
		}
		return b.ForEach(func(k, v []byte) error {
			var l LogLine
			if err := json.Unmarshal(v, &l); err != nil {
				return fmt.Errorf("decode log line %x of %s: %w", k, opID, err)
			}
			l.Seq = getU64(k)
			out = append(out, l)
			return nil
		})
	})
	return out, err
}

// PruneLogs deletes log lines written before olderThan, in one transaction,
// and drops operations left with no lines. It returns how many lines went.
func (s *Store) PruneLogs(ctx context.Context, olderThan time.Time) (int, error) {
	n := 0
	err := s.Update(ctx, func(tx *Tx) error {
		n = 0 // bbolt does not retry, but keep the count honest if it ever did
		logs, err := tx.bucket(bLogs)
		if err != nil {
			return err
		}
		var ops [][]byte
		if err := logs.ForEachBucket(func(k []byte) error {
			ops = append(ops, clone(k))
			return nil
		}); err != nil {
			return err
		}
		for _, op := range ops {
			if err := ctx.Err(); err != nil {
				return fmt.Errorf("prune logs: %w", err)
			}
			b := logs.Bucket(op)
			var old [][]byte
			total := 0
			if err := b.ForEach(func(k, v []byte) error {
				total++
				var l LogLine
				if err := json.Unmarshal(v, &l); err != nil {
					return fmt.Errorf("decode log line %x of %s: %w", k, op, err)
				}
				if l.Time.Before(olderThan) {
					old = append(old, clone(k))
				}
				return nil
			}); err != nil {
				return err
			}
			if len(old) == total {
				if err := logs.DeleteBucket(op); err != nil {
					return fmt.Errorf("prune logs of %s: %w", op, err)
				}
			} else {
				for _, k := range old {
					if err := b.Delete(k); err != nil {
						return fmt.Errorf("prune logs of %s: %w", op, err)
					}
				}
			}
			n += len(old)
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	return n, nil
}
