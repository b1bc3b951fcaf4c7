package state

import (
	"fmt"
	"testing"

	bolt "go.etcd.io/bbolt"
)

// The verifier's own comparison of the chain's end with the head in meta:
// each case below is caught by that comparison itself, named by its wording
// ("but meta records head"), not by the time-index check that also says
// "records were removed from the end" (issue 34: that check masked a broken
// head comparison).
func TestVerifyComparesTheHeadItself(t *testing.T) {
	path, recs := buildChain(t, 10)
	cases := []struct {
		name   string
		fn     func(tx *bolt.Tx) error
		reason string
	}{
		{"last record deleted, head left naming it", func(tx *bolt.Tx) error { return tx.Bucket(bAudit).Delete(u64(10)) },
			fmt.Sprintf("chain ends at record 9 (%s) but meta records head 10 (%s)", short(recs[8].Hash), short(recs[9].Hash))},
		{"head's hash edited, seq right", func(tx *bolt.Tx) error {
			return writeHead(tx.Bucket(bMeta), auditHead{Seq: 10, Time: recs[9].Time, Hash: recs[3].Hash})
		}, fmt.Sprintf("chain ends at record 10 (%s) but meta records head 10 (%s)", short(recs[9].Hash), short(recs[3].Hash))},
		{"head's seq edited, hash right", func(tx *bolt.Tx) error {
			return writeHead(tx.Bucket(bMeta), auditHead{Seq: 7, Time: recs[9].Time, Hash: recs[9].Hash})
		}, fmt.Sprintf("chain ends at record 10 (%s) but meta records head 7 (%s)", short(recs[9].Hash), short(recs[9].Hash))},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := VerifyFile(t.Context(), tamperTx(t, path, c.fn))
			wantChainError(t, err, c.reason)
		})
	}
	if _, err := VerifyFile(t.Context(), path); err != nil {
		t.Fatalf("the untouched chain does not verify: %v", err)
	}
}
