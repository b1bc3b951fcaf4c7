package storage

import "fmt"

// primaryPDBSuffix names CloudNativePG's budget for a cluster's primary,
// "<cluster>-primary" (cloudnative-pg v1.30.0 api/v1/cluster_types.go
// PrimaryPodDisruptionBudgetSuffix; pkg/specs/poddisruptionbudget.go
// BuildPrimaryPodDisruptionBudget: minAvailable 1 over the pods labelled
// cnpg.io/instanceRole=primary). With one primary it always allows 0
// disruptions, so it blocks every drain of the primary's node, and it
// moves with the label when the primary is switched over.
const primaryPDBSuffix = "-primary"

// MovedPDBs are the CloudNativePG primary budgets the bot moves off node by
// switching the primary over before the drain (Settings.Switchover is
// switchover and a ready instance runs elsewhere): "namespace/name" → the
// primary pod, the only pod the budget may cover on node for the excuse
// to hold. The gate's PDB probe and the forecast excuse these and only these.
func (st State) MovedPDBs(node string, s Settings) map[string]string {
	if s.Switchover != SwitchoverFirst {
		return nil
	}
	out := map[string]string{}
	for _, p := range st.Postgres {
		if p.PrimaryNode() == node && p.Candidate(node) != "" {
			out[p.Namespace+"/"+p.Name+primaryPDBSuffix] = p.CurrentPrimary
		}
	}
	return out
}

// movedPDBLine is how the forecast's input (gate.PDBsByNode) names a
// budget that covers only pod on a node.
func movedPDBLine(key, pod string) string { return fmt.Sprintf("PDB %s (%s)", key, pod) }
