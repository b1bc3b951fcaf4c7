package state

import (
	"testing"

	bolt "go.etcd.io/bbolt"
)

// A head whose seq is right but whose hash was edited is repaired (the
// records verify, none was removed): only a head naming a record past the
// chain's end is refused.
func TestRepairHeadWithTheRightSeqAndAnEditedHash(t *testing.T) {
	path, recs := buildChain(t, 3)
	broken := tamperTx(t, path, func(tx *bolt.Tx) error {
		return writeHead(tx.Bucket(bMeta), auditHead{Seq: 3, Time: recs[2].Time, Hash: recs[0].Hash})
	})
	rep, err := RepairHeadFile(t.Context(), broken, "os:carol", testOptions(newFakeClock()))
	if err != nil || !rep.Repaired || rep.FromSeq != 3 || rep.FromHash != recs[0].Hash || rep.ToHash != recs[2].Hash {
		t.Fatalf("repair: %+v %v", rep, err)
	}
	if v, err := VerifyFile(t.Context(), broken); err != nil || v.Records != 4 {
		t.Fatalf("verify after the repair: %+v %v", v, err)
	}
}
