package drill

import (
	"strings"
	"testing"
)

// TestCompare: counts that match pass whatever they are (0 Deployments live and 0 in the
// snapshot is a cluster without Deployments, not a failed drill); a Required resource the
// live cluster has must be in the snapshot even when the tolerance would allow its absence;
// other differences fail beyond the tolerance.
func TestCompare(t *testing.T) {
	res := Resources()

	for _, tc := range []struct {
		name       string
		snap, live map[string]int64
		tolerance  float64
		want       string // "" passes
	}{
		{"all match, none of some kinds", map[string]int64{"namespaces": 4}, map[string]int64{"namespaces": 4}, 0, ""},
		{"bootstrap manifests", map[string]int64{"namespaces": 4, "deployments": 1, "secrets": 1, "configmaps": 6, "serviceaccounts": 3},
			map[string]int64{"namespaces": 4, "deployments": 1, "secrets": 1, "configmaps": 6, "serviceaccounts": 3}, 10, ""},
		{"empty snapshot", map[string]int64{}, map[string]int64{"namespaces": 4}, 10, "no namespaces in the restored etcd, 4 live"},
		{"required absent under a full tolerance", map[string]int64{"namespaces": 4}, map[string]int64{"namespaces": 4, "deployments": 1}, 100,
			"no deployments in the restored etcd, 1 live"},
		{"churn within tolerance", map[string]int64{"namespaces": 10, "configmaps": 19}, map[string]int64{"namespaces": 10, "configmaps": 20}, 10, ""},
		{"missing beyond tolerance", map[string]int64{"namespaces": 4}, map[string]int64{"namespaces": 5}, 0, "namespaces: 4 in the snapshot, 5 live: 1 missing (tolerance 0)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Compare(res, tc.snap, tc.live, tc.tolerance)

			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("want a pass, got %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("want %q, got %v", tc.want, err)
			}
		})
	}
}
