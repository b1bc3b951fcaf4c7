package host

import (
	"crypto/sha256"
	"encoding/hex"

	lifecyclev1 "github.com/talosbot/talosbot/plugins/sdk/proto/lifecycle/v1"
)

// Digest returns the plan digest that approvals are bound to: the lower-case
// hex SHA-256 of exactly the bytes of p.canonical_inputs, nothing else (no
// prefix, no length, no other plan field). It can be reproduced with
// `sha256sum` over those bytes. Everything that would change what Run does
// must therefore be inside canonical_inputs; the summary, step titles and
// warnings are display only. A nil plan or empty canonical_inputs hashes the
// empty input (e3b0c442…); a plugin that returns no canonical inputs is
// broken and callers should refuse to bind an approval to such a plan.
func Digest(p *lifecyclev1.OperationPlan) string {
	sum := sha256.Sum256(p.GetCanonicalInputs())
	return hex.EncodeToString(sum[:])
}

// ShortDigest returns the first 12 hex characters of a digest, for display.
func ShortDigest(d string) string {
	if len(d) <= 12 {
		return d
	}
	return d[:12]
}
