#!/usr/bin/env bash
# mutate-rules.sh: prove that each runbook rule's one enforcing line is
# caught by the tests docs/RUNBOOK.md names for it, in every plugin or package
# that relies on it.
#
# For each row below it copies the working tree (tracked and untracked, not
# ignored files) into a temporary directory once, disables the marked line
# (`// rule:<id>` in the code; perl substitution), runs the named tests of one
# package there, and restores the file. The good outcome is that the tests
# FAIL ("killed"). A mutation whose tests pass ("SURVIVED"), a marker that is
# not found, or a mutation that does not compile makes the script exit 1.
# The working tree is never modified.
#
#   hack/mutate-rules.sh            every row (several minutes)
#   hack/mutate-rules.sh R1 R16     only rows whose id starts with R1 or R16
#
# Tests that need kube-apiserver or OpenTofu source ~/.cache/talosbot/tools/env
# (make tools) when it exists.
set -uo pipefail

root=$(git -C "$(dirname "$0")/.." rev-parse --show-toplevel)
filters=("$@")
tmp=$(mktemp -d "${TMPDIR:-/tmp}/mutate-rules.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
(cd "$root" && git ls-files -z --cached --others --exclude-standard | tar --null -T - -cf -) | tar -C "$tmp" -xf -
if [ -f "$HOME/.cache/talosbot/tools/env" ]; then
	set -a; . "$HOME/.cache/talosbot/tools/env"; set +a
fi
export TALOSBOT_TALOSCTL=${TALOSBOT_TALOSCTL:-/work/shared/tools/talosctl}

bad=0
killed=0
# mutate ID FILE PERL-SUBSTITUTION PACKAGE TEST-REGEX
mutate() {
	local id=$1 file=$2 subst=$3 pkg=$4 run=$5
	if [ ${#filters[@]} -gt 0 ]; then
		local f hit=0
		for f in "${filters[@]}"; do [[ $id == "$f"* ]] && hit=1; done
		[ $hit = 1 ] || return 0
	fi
	local src="$tmp/$file"
	cp "$src" "$src.orig"
	perl -pi -e "$subst" "$src"
	if cmp -s "$src" "$src.orig"; then
		echo "ERROR    $id: the substitution changed nothing in $file (marker moved?)"
		bad=1
		mv "$src.orig" "$src"
		return
	fi
	local out
	out=$(cd "$tmp" && go test -count=1 -timeout 15m -run "$run" "$pkg" 2>&1)
	local rc=$?
	mv "$src.orig" "$src"
	if grep -q '\[build failed\]\|\[setup failed\]' <<<"$out"; then
		echo "ERROR    $id: the mutated $file does not compile:"
		grep -v '^ok\|^FAIL$' <<<"$out" | head -5
		bad=1
	elif [ $rc = 0 ]; then
		if grep -q 'no tests to run' <<<"$out"; then
			echo "ERROR    $id: no test in $pkg matches $run"
		else
			echo "SURVIVED $id: $file disabled, $pkg -run '$run' still passes"
		fi
		bad=1
	else
		echo "killed   $id: $pkg -run '$run' fails with $file disabled"
		killed=$((killed + 1))
	fi
}

# Substitutions. never: the refusal's condition is false. always: the
# early "all is well" return always taken.
never() { echo "s/\\bif ((?:[^;{]*; )?)(.*) \\{ (\\/\\/ rule:$1)\$/if \$1false \\&\\& (\$2) { \$3/"; }
always() { echo "s/\\bif ((?:[^;{]*; )?)(.*) \\{ (\\/\\/ rule:$1)\$/if \$1true || (\$2) { \$3/"; }

# R23-role: the one role check (cluster.CheckRole) every disruptive plugin runs at Plan.
mutate R23-role/cluster plugins/cluster/roles.go "$(always R23-role)" ./plugins/cluster '^TestCheckRole$'
mutate R23-role/builtin plugins/cluster/roles.go "$(always R23-role)" ./plugins/builtin '^TestDisruptivePluginsRefuseATalosconfigWithoutTheRole$'
mutate R23-role/talosupgrade plugins/cluster/roles.go "$(always R23-role)" ./plugins/talosupgrade '^TestRefusesATalosconfigWithoutAdmin$'

# R23 (policy): Terraform's private run directory (it holds the variables file with the secrets) is 0700 while Terraform runs, and removed after.
mutate R23-private/terraform internal/terraform/terraform.go 's/os\.Chmod\(dir, 0o700\)(; err != nil \{ \/\/ rule:R23-private)$/os.Chmod(dir, 0o755)$1/' ./internal/terraform '^TestRunDirectoryIsOwnerOnlyWhileTerraformRuns$'
mutate R23-removed/terraform internal/terraform/terraform.go 's/os\.RemoveAll\(dir\)(; rmErr != nil \{ \/\/ rule:R23-removed)$/error(nil)$1/' ./internal/terraform '^TestRunDirectoryIsOwnerOnlyWhileTerraformRuns$'
# R1: the one gate-before refusal, cluster.CheckGateBefore, in each plugin that runs it.
mutate R1/cluster plugins/cluster/rules.go "$(always R1)" ./plugins/cluster '^TestCheckGateBefore$'
mutate R1/talosupgrade plugins/cluster/rules.go "$(always R1)" ./plugins/talosupgrade '^TestFailingBeforeGateRefuses$'
mutate R1/k8supgrade plugins/cluster/rules.go "$(always R1)" ./plugins/k8supgrade '^TestUpgradeK8s$/gate_before_fails'
mutate R1/noderemove plugins/cluster/rules.go "$(always R1)" ./plugins/noderemove '^TestFailingBeforeGateRefusesRemoval$'
mutate R1/rollback plugins/cluster/rules.go "$(always R1)" ./plugins/rollback '^TestFailingBeforeGateRefusesRollback$'
# R2: the gate runs one probe per runbook item (gate.Run's probe list); the mutation drops the first (Talos version).
mutate R2/gate plugins/cluster/gate/gate.go 's/probes\(\) (\/\/ rule:R2)$/probes()[1:] $1/' ./plugins/cluster/gate '^TestGateReportsOneLinePerRunbookItem$'
# R3: a failing probe is a reason and fails the gate (gate.Run's verdict).
mutate R3/gate plugins/cluster/gate/gate.go "$(never R3)" ./plugins/cluster/gate '^TestGateFailsWithEveryReason$'
# R4 at the quorum read: only the first control plane asked.
mutate R4/etcd plugins/cluster/etcd/quorum.go 's/EtcdTargets\(inv\) (\/\/ rule:R4-quorum)$/EtcdTargets(inv)[:1] $1/' ./plugins/cluster/etcd '^TestReadQuorumAsksEveryControlPlane$'
# R5: the one plan guard before an upgrade, planguard.BeforeUpgrade, in each upgrade that runs it.
mutate R5/talosupgrade plugins/cluster/planguard/planguard.go "$(never R5)" ./plugins/talosupgrade '^TestPlanGuardBeforeUpgradeRefuses$'
mutate R5/k8supgrade plugins/cluster/planguard/planguard.go "$(never R5)" ./plugins/k8supgrade '^TestUpgradeK8s$/plan_guard'
# R7: wait-member passes only once every member reports one agreed leader
# (Quorum.CheckRestored); the mutation keeps the node's own member and voting
# checks and drops that half.
mutate R7/waitmember plugins/waitmember/waitmember.go 's/restored == nil \{ (\/\/ rule:R7)$/(restored == nil || true) { $1/' ./plugins/waitmember '^TestWaitMemberNeedsEveryMemberUnderOneLeader$'
# R8: a node the inventory no longer has is never reset (noderemove's check).
mutate R8/noderemove plugins/noderemove/noderemove.go "$(never R8)" ./plugins/noderemove '^TestRemovalOfUnknownNodeRefused$'
# R9: removal leaving fewer healthy members than a majority.
mutate R9/etcd plugins/cluster/etcd/quorum.go 's/case (.*): (\/\/ rule:R9)$/case false \&\& ($1): $2/' ./plugins/cluster/etcd '^TestQuorumRules$'
mutate R9/noderemove plugins/cluster/etcd/quorum.go 's/case (.*): (\/\/ rule:R9)$/case false \&\& ($1): $2/' ./plugins/noderemove '^TestRemovalRefusedWhileAMemberIsDown$'
# R10: the adjacent-minor rule's one place, versions.SkipsMinor (plugins/sdk/versions), for a node's step (talos.CheckUpgradePath)
# and for the path's hops (talosupgrade's pathCheck).
mutate R10/talos plugins/sdk/versions/versions.go "$(never R10)" ./plugins/cluster/talos '^TestCheckUpgradePath$'
mutate R10/talosupgrade plugins/sdk/versions/versions.go "$(never R10)" ./plugins/talosupgrade '^TestMultiHopPlan$'
# R10 pre-flight of a hop into v1.14 (talosupgrade/preflight.go): etcd below 3.6, tls-min-version in extraArgs.
mutate R10-etcd36/talosupgrade plugins/talosupgrade/preflight.go 's/case (.*): (\/\/ rule:R10-etcd36)$/case false \&\& ($1): $2/' ./plugins/talosupgrade '^TestPreflightChecksOnFacts$'
mutate R10-tls13/talosupgrade plugins/talosupgrade/preflight.go "$(never R10-tls13)" ./plugins/talosupgrade '^TestPreflightChecksOnFacts$'
# R20: the same rule for Kubernetes, k8s.MinorRefusal's skipped minor.
mutate R20-minor/k8s plugins/sdk/versions/versions.go "$(never R10)" ./plugins/cluster/k8s '^TestK8sPathRefusal$'
# R11: a target of the other kind (a Kubernetes release to the Talos upgrade, or the reverse) is refused naming the other operation, releases.CheckKind.
mutate R11/releases internal/releases/target.go "$(always R11)" ./internal/releases '^TestATargetOfTheOtherKindIsRefusedR11$'
mutate R11/talosupgrade internal/releases/target.go "$(always R11)" ./plugins/talosupgrade '^TestRefusesAKubernetesReleaseAsTarget$'
mutate R11/k8supgrade internal/releases/target.go "$(always R11)" ./plugins/k8supgrade '^TestUpgradeK8s$/refuses_a_Talos_release'
# R12: the one snapshot-dir refusal, cluster.CheckSnapshotDir, in each plugin that snapshots.
# Only real releases: releases.CheckTarget's "a known release" return, taken for every target.
mutate known-release/releases internal/releases/target.go "$(always known-release)" ./internal/releases '^TestOnlyRealTalosReleasesAreTargets$'
mutate known-release/talosupgrade internal/releases/target.go "$(always known-release)" ./plugins/talosupgrade '^TestRefusesATargetThatIsNotARelease$'
mutate known-release/k8supgrade internal/releases/target.go "$(always known-release)" ./plugins/k8supgrade '^TestUpgradeK8s$/not_a_known_release'
mutate R12/cluster plugins/cluster/rules.go "$(always R12)" ./plugins/cluster '^TestCheckSnapshotDir$'
mutate R12/talosupgrade plugins/cluster/rules.go "$(always R12)" ./plugins/talosupgrade '^TestRefusesWithoutSnapshotDir$'
mutate R12/k8supgrade plugins/cluster/rules.go "$(always R12)" ./plugins/k8supgrade '^TestUpgradeK8s$/without_a_snapshot_directory'
mutate R12/snapshot plugins/cluster/rules.go "$(always R12)" ./plugins/snapshot '^TestPlanRefusesWithoutSnapshotDir$'
# R20: a pre-flight finding (a flag, admission plugin or feature gate the target removed) refuses at plan time.
mutate R20-preflight/k8supgrade plugins/k8supgrade/plan.go 's/if (len\(pre\.findings\) > 0) \{ (\/\/ rule:R20-preflight)$/if false \&\& $1 { $2/' ./plugins/k8supgrade '^TestPreflightRefusesAtPlanTime$/feature_gate'
# R13: the installer's schematic comes from the declared (Terraform) schematic, talos.TargetInstaller.
mutate R13/talos plugins/cluster/talos/installer.go "$(never R13)" ./plugins/cluster/talos '^TestInstallerDerivationAndR14$'
# R13 pre-flight (talosupgrade/preflight.go): a non-factory installer into v1.14, extraKernelArgs the LifecycleService path drops.
mutate R13-factory/talosupgrade plugins/talosupgrade/preflight.go "$(never R13-factory)" ./plugins/talosupgrade '^TestPreflightInstallerChecksOnFacts$'
mutate R13-kernelargs/talosupgrade plugins/talosupgrade/preflight.go "$(never R13-kernelargs)" ./plugins/talosupgrade '^TestPreflightInstallerChecksOnFacts$'
# R14: talos.CheckInstallerChange keeps the node's platform and its schematic class.
mutate R14-platform/talos plugins/cluster/talos/installer.go "$(never R14-platform)" ./plugins/cluster/talos '^TestInstallerDerivationAndR14$'
mutate R14-schematic/talos plugins/cluster/talos/installer.go "$(never R14-schematic)" ./plugins/cluster/talos '^TestInstallerDerivationAndR14$'
# R15: workers first, one at a time (talos.UpgradeOrder); the mutation leaves the workers out.
mutate R15-order/talos plugins/cluster/talos/upgrade.go 's/inv\.Workers\(\) (\/\/ rule:R15-order)$/[]cluster.Node(nil) $1/' ./plugins/cluster/talos '^TestUpgradeOrderLeaderLast$'
# R15: the gate after each node stops the roll (talosupgrade's node step); no later node is touched.
mutate R15-gate/talosupgrade plugins/talosupgrade/talosupgrade.go "$(never R15-gate)" ./plugins/talosupgrade '^TestGateAfterAWorkerStopsTheRoll$'
# R17: after the roll every node runs the target and Flux is Ready (talosupgrade's verify).
mutate R17/talosupgrade plugins/talosupgrade/talosupgrade.go "$(never R17)" ./plugins/talosupgrade '^TestFinalCheckNeedsEveryNodeOnTheTarget$'
# R18: the Terraform bump is told only once every node runs the target (talos.DriftNote).
mutate R18/talos plugins/cluster/talos/upgrade.go "$(never R18)" ./plugins/cluster/talos '^TestDriftNote$'
# R16 before a control plane goes down: Quorum.CheckDisruption returns nil.
mutate R16-before/talosupgrade plugins/cluster/etcd/quorum.go 's/\{ (\/\/ rule:R16-before)$/{ return nil $1/' ./plugins/talosupgrade '^TestQuorumBeforeRefusesTwoMemberEtcd$'
mutate R16-before/etcdops plugins/cluster/etcd/quorum.go 's/\{ (\/\/ rule:R16-before)$/{ return nil $1/' ./plugins/etcdops '^TestDefragStopsWhileAMemberIsDown$'
# R16 after: the one quorum-restored predicate, Quorum.CheckRestored.
mutate R16-after/talosupgrade plugins/cluster/etcd/quorum.go "$(never R16-after)" ./plugins/talosupgrade '^TestQuorumFailureMidRollStops$'
mutate R16-after/etcd plugins/cluster/etcd/quorum.go "$(never R16-after)" ./plugins/cluster/etcd '^TestQuorumRules$'
# R16 around a rollback's reboot.
mutate R16-rollback/rollback plugins/rollback/rollback.go "$(never R16-rollback)" ./plugins/rollback '^TestRollbackRefusesTwoMemberEtcd$'
# R19: the one "another control plane is down" refusal.
mutate R19/rollback plugins/rollback/rollback.go "$(never R19)" ./plugins/rollback '^TestRollbackRefusesWhileAnotherControlPlaneIsDown$'
# R6 (policy): the promotion gate, approvals' Policy.Promotion; its "does not apply" return taken for every operation.
mutate R6/approvals approvals/policy.go "$(always R6)" ./approvals '^TestPromotionLooksBackMaxAgeAndNamesTheStagingCluster$'
# R21: a Kubernetes target below what runs, k8s.DowngradeRefusal.
mutate R21/k8s plugins/cluster/k8s/versions.go "$(never R21)" ./plugins/cluster/k8s '^TestK8sPathRefusal$'
# R20: every node's running Talos supports the Kubernetes target (k8s.CheckTalosSupport, machinery compatibility).
mutate R20-support/k8s plugins/cluster/k8s/versions.go "$(never R20-support)" ./plugins/cluster/k8s '^TestTalosSupportRefusesATargetTheOldestTalosCannotRun$'
# R22 (policy): the maintenance record names the operation's snapshot (auditview.MaintenanceRecord).
mutate R22/auditview bot/auditview/record.go "$(never R22)" ./bot/auditview '^TestMaintenanceRecordR22$'
# R24 (policy): the gate answers within its timeout while the cluster does not (gate.Run's deadline).
mutate R24/gate plugins/cluster/gate/gate.go 's/context\.WithTimeout\(ctx, opts\.Timeout\) (\/\/ rule:R24)$/context.WithCancel(ctx) $1/' ./plugins/cluster/gate '^TestGateAnswersWhileANodeHangs$'
# Self-approval (engine safety): a requester who is also an approver.
mutate self-approval/approvals approvals/policy.go 's/\bif (user == op\.Requester \&\& !pol\.AllowSelfApproval) \{/if false \&\& ($1) {/' ./approvals '^TestSelfApprovalRefusedForRequesterWhoIsAnApprover$'

echo "$killed mutation(s) killed"
if [ $bad != 0 ]; then
	echo "FAIL: a rule's enforcing line is not caught by its named test (see above)"
	exit 1
fi
echo "ok: every rule's enforcing line is caught"
