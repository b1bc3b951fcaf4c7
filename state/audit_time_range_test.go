package state

import (
	"testing"
	"time"
)

// The time index stores nanoseconds since 1970 in an int64, so an audit
// time must lie in years 1678–2261 inclusive: both end years are accepted,
// the years outside refused with the range named.
func TestAppendAcceptsTheWholeRepresentableYearRange(t *testing.T) {
	s, _, _ := openTest(t)
	for _, c := range []struct {
		at time.Time
		ok bool
	}{
		{time.Date(1678, 6, 1, 0, 0, 0, 0, time.UTC), true},
		{time.Date(2261, 6, 1, 0, 0, 0, 0, time.UTC), true},
		{time.Date(2262, 6, 1, 0, 0, 0, 0, time.UTC), false},
	} {
		_, err := s.AppendAudit(t.Context(), AuditEvent{Actor: "a", Action: "x", Time: c.at})
		if (err == nil) != c.ok {
			t.Errorf("append at %s: err %v, want ok=%t", c.at, err, c.ok)
		}
	}
}
