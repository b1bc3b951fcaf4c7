package state

import (
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"time"
)

func randString(rng *rand.Rand, plain bool) string {
	alphabet := []string{"a", "Z", "0", " ", "-", "/", "\"", "\\", "<", ">", "&", "é", "😀", "\n", "\t", "\x00", "\u2028", "\ufffd"}
	var b strings.Builder
	for range rng.IntN(8) {
		if !plain && rng.IntN(3) == 0 {
			b.WriteString(alphabet[rng.IntN(len(alphabet))])
		} else {
			b.WriteByte(byte('a' + rng.IntN(26)))
		}
	}
	return b.String()
}

// TestFastDecodeMatchesJSON: whenever the fast decoder accepts bytes, the
// result equals encoding/json's; and it accepts ordinary records.
func TestFastDecodeMatchesJSON(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	fast := 0
	for i := range 3000 {
		plain := i%2 == 0 // half the records need no escaping
		randString := func(rng *rand.Rand) string { return randString(rng, plain) }
		ev := AuditEvent{
			Time:  time.Unix(rng.Int64N(4e9), rng.Int64N(1e9)),
			Actor: randString(rng), Action: randString(rng), Cluster: randString(rng),
			OpID: randString(rng), Command: randString(rng), Result: randString(rng),
		}
		if rng.IntN(2) == 0 {
			ev.Detail = map[string]string{randString(rng): randString(rng), randString(rng): randString(rng)}
		}
		rec := AuditRecord{Seq: rng.Uint64() >> rng.IntN(64), AuditEvent: normaliseEvent(ev), PrevHash: randString(rng)}
		rec.Time = rec.Time.UTC()
		raw, err := encodeRecord(&rec)
		if err != nil {
			t.Fatal(err)
		}
		inputs := [][]byte{raw}
		// Tampered variants: flipped, dropped and inserted bytes.
		for range 3 {
			m := append([]byte(nil), raw...)
			j := rng.IntN(len(m))
			switch rng.IntN(3) {
			case 0:
				m[j] ^= byte(1 << rng.IntN(8))
			case 1:
				m = append(m[:j], m[j+1:]...)
			default:
				const junk = "0\"{},:\\ a9"
				m = append(m[:j], append([]byte{junk[rng.IntN(len(junk))]}, m[j:]...)...)
			}
			inputs = append(inputs, m)
		}
		for k, in := range inputs {
			got, ok := fastDecodeRecord(in)
			want, err := decodeRecordJSON(in)
			if k == 0 {
				if err != nil {
					t.Fatalf("record %d does not decode: %v", i, err)
				}
				if ok {
					fast++
				}
			}
			if !ok {
				continue
			}
			if err != nil {
				t.Fatalf("fast path accepted %q which encoding/json rejects: %v", in, err)
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("fast and json decode differ for %q:\nfast %+v\njson %+v", in, got, want)
			}
		}
	}
	if fast < 1400 {
		t.Errorf("fast path took only %d of 3000 records", fast)
	}
	plain := AuditRecord{Seq: 42, AuditEvent: AuditEvent{Time: time.Now().UTC(), Actor: "alice", Action: "op.run", Detail: map[string]string{"k": "v"}}}
	raw, _ := encodeRecord(&plain)
	if _, ok := fastDecodeRecord(raw); !ok {
		t.Errorf("fast path rejected a plain record %s", raw)
	}
}
