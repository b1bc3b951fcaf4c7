package sdk

// The Go types a plugin author works with. They mirror the wire messages of
// plugins/sdk/proto/lifecycle/v1 (same message names, idiomatic field names:
// OperationID, StepID, ID, OK), and the gRPC adapter in this package
// (convert.go) turns them into protobuf and back, so protobuf never appears
// in a plugin's code. A field's meaning is documented once, on the wire
// message in lifecycle.proto; the comments here say only what differs.
//
// Sub-messages that every request has (Cluster, Credentials, Settings) are
// values, so req.Settings.NodeTimeoutMs never dereferences nil. Parts whose
// absence means something ("the host did not look", "no Terraform root",
// "not refused") are pointers; the optional Settings parts have nil-safe
// accessors because plugins chain them.

import (
	"fmt"
	"log/slog"
	"strconv"
)

// Effect is what a command changes; the host's policy is derived from it.
type Effect int32

// The effects, with the wire enum's numbers.
const (
	EffectUnspecified Effect = 0
	// EffectReadOnly changes nothing: viewers may run it.
	EffectReadOnly Effect = 1
	// EffectDisruptive changes the cluster: approvals, lock, freeze, windows.
	EffectDisruptive Effect = 2
	// EffectWrite writes or deletes files or state the bot keeps only.
	EffectWrite Effect = 3
)

// Need is an input the host computes only for commands that ask for it.
type Need int32

// The needs, with the wire enum's numbers.
const (
	NeedUnspecified Need = 0
	// NeedStagingDrills fills Settings.StagingDrills from the audit trail.
	NeedStagingDrills Need = 1
)

// Drill is a staging drill the production readiness gate asks for.
type Drill int32

// The drills, with the wire enum's numbers.
const (
	DrillUnspecified       Drill = 0
	DrillTalosUpgrade      Drill = 1
	DrillKubernetesUpgrade Drill = 2
	DrillNodeReplacement   Drill = 3
	DrillEtcdRestore       Drill = 4
)

// StepStatus is the state a StepEvent reports.
type StepStatus int32

// The step statuses, with the wire enum's numbers.
const (
	StepUnspecified StepStatus = 0
	StepRunning     StepStatus = 1
	StepOK          StepStatus = 2
	StepFailed      StepStatus = 3
	// StepSkipped: the step's effect was already in place (runs are idempotent).
	StepSkipped StepStatus = 4
)

// String is the wire enum's name, e.g. "STEP_STATUS_OK".
func (s StepStatus) String() string {
	return enumName([]string{"STEP_STATUS_UNSPECIFIED", "STEP_STATUS_RUNNING", "STEP_STATUS_OK", "STEP_STATUS_FAILED", "STEP_STATUS_SKIPPED"}, int32(s))
}

// String is the wire enum's name, e.g. "EFFECT_DISRUPTIVE".
func (e Effect) String() string {
	return enumName([]string{"EFFECT_UNSPECIFIED", "EFFECT_READ_ONLY", "EFFECT_DISRUPTIVE", "EFFECT_WRITE"}, int32(e))
}

// String is the wire enum's name, e.g. "NEED_STAGING_DRILLS".
func (n Need) String() string {
	return enumName([]string{"NEED_UNSPECIFIED", "NEED_STAGING_DRILLS"}, int32(n))
}

// String is the wire enum's name, e.g. "DRILL_TALOS_UPGRADE". Plans put it
// in their canonical inputs, so it must not change.
func (d Drill) String() string {
	return enumName([]string{"DRILL_UNSPECIFIED", "DRILL_TALOS_UPGRADE", "DRILL_KUBERNETES_UPGRADE", "DRILL_NODE_REPLACEMENT", "DRILL_ETCD_RESTORE"}, int32(d))
}

// enumName is names[v], or the number for a value this SDK does not know
// (a newer host), as protobuf prints it.
func enumName(names []string, v int32) string {
	if v >= 0 && int(v) < len(names) {
		return names[v]
	}
	return strconv.Itoa(int(v))
}

// Arg is one argument of a command: positional (in declaration order) or a --flag.
type Arg struct {
	Name        string
	Description string
	Required    bool
	// Flag marks a --name argument; positional otherwise.
	Flag bool
	// Boolean flags take no value (--dry-run).
	Boolean      bool
	DefaultValue string
}

// Command is one command of the manifest (lifecycle.proto Command).
type Command struct {
	// Name is the command words after /talos, e.g. "upgrade talos".
	Name          string
	Summary       string
	Args          []*Arg
	Effect        Effect
	NeedsSnapshot bool
	Example       string
	ReadsSnapshot bool
	Needs         []Need
	Drill         Drill
	MinApprovals  int32
	// PausesBetweenNodes: Run checks PauseRequested before each node.
	PausesBetweenNodes bool
	// StatusLabel makes a READ_ONLY command a /talos status provider.
	StatusLabel string
	// Maintenance lets the host run a DISRUPTIVE command from its
	// maintenance_schedule, in the maintenance window (see the proto).
	Maintenance bool
}

// Manifest is what Describe returns: the commands this plugin serves.
type Manifest struct {
	Name            string
	Version         string
	Commands        []*Command
	MinTalosVersion string
	MaxTalosVersion string
}

// Node is one node of the cluster inventory.
type Node struct {
	Name    string
	Address string
	// Role is "controlplane" or "worker".
	Role string
	// Host is the physical (Proxmox) host the node runs on.
	Host string
	// Platform is the Image Factory platform, e.g. "nocloud".
	Platform string
	// InstallerClass selects the schematic: "default" or "longhorn".
	InstallerClass string
}

// Cluster is the inventory the host resolved for the request.
type Cluster struct {
	Name string
	// Environment is "staging" or "production".
	Environment string
	Endpoints   []string
	Nodes       []*Node
	// Declared holds non-secret declared values (Terraform outputs or config).
	Declared map[string]string
}

// Credentials are held in memory for one call only: never log, persist or
// echo them.
type Credentials struct {
	Talosconfig            []byte
	Kubeconfig             []byte
	OffsiteAccessKeyID     []byte
	OffsiteSecretAccessKey []byte
	// AgeIdentity is sent only to operations that read a snapshot back.
	AgeIdentity []byte
}

// Format prints only how long each credential is, for every verb, so that
// a request logged whole (log.Printf("%+v", req)) shows no secret.
func (c Credentials) Format(f fmt.State, _ rune) {
	fmt.Fprintf(f, "{Talosconfig:%d bytes Kubeconfig:%d bytes OffsiteAccessKeyID:%d bytes OffsiteSecretAccessKey:%d bytes AgeIdentity:%d bytes}",
		len(c.Talosconfig), len(c.Kubeconfig), len(c.OffsiteAccessKeyID), len(c.OffsiteSecretAccessKey), len(c.AgeIdentity))
}

// LogValue is Format for log/slog.
func (c Credentials) LogValue() slog.Value { return slog.StringValue(fmt.Sprint(c)) }

// Settings are the host's settings for this call (lifecycle.proto Settings).
type Settings struct {
	SnapshotDir           string
	GateTimeoutMs         int64
	NodeTimeoutMs         int64
	KnownTalosReleases    []string
	SnapshotKeep          int32
	SnapshotMaxAgeSeconds int64
	Extra                 map[string]string
	// Backups is nil when the host sent none.
	Backups *Backups
	// Terraform is nil when the cluster has no Terraform root.
	Terraform *Terraform
	// StagingDrills is nil when the host did not look (the command did not
	// declare NeedStagingDrills, or the host predates it).
	StagingDrills      *StagingDrills
	GateAfterTimeoutMs int64
	HealthTimeoutMs    int64
	// GitFollowups are the Terraform changes the bot prepared as Git
	// branches for this cluster and whether each is merged yet (evidence
	// only the bot has).
	GitFollowups []GitFollowup
}

// GitFollowup is one prepared Terraform change and its state on the remote.
type GitFollowup struct {
	Variable, Value, Branch, OperationID, Base string
	State                                      GitFollowupState
	PullRequestURL                             string
	// Error says why State is GitFollowupUnchecked.
	Error string
}

// GitFollowupState is where a prepared change stands.
type GitFollowupState int32

// The states of a prepared change (lifecycle.proto GitFollowupState).
const (
	GitFollowupUnspecified GitFollowupState = iota
	GitFollowupMerged
	GitFollowupOpen
	GitFollowupDeleted
	GitFollowupUnchecked
)

// Terraform tells the Terraform plugins where the cluster's root is.
type Terraform struct {
	Root              string
	Binary            string
	ConfigKey         string
	PlanBeforeUpgrade bool
}

// GetRoot returns t.Root; nil-safe ("" when the cluster has no root).
func (t *Terraform) GetRoot() string {
	if t == nil {
		return ""
	}
	return t.Root
}

// GetBinary returns t.Binary; nil-safe.
func (t *Terraform) GetBinary() string {
	if t == nil {
		return ""
	}
	return t.Binary
}

// GetConfigKey returns t.ConfigKey; nil-safe.
func (t *Terraform) GetConfigKey() string {
	if t == nil {
		return ""
	}
	return t.ConfigKey
}

// GetPlanBeforeUpgrade returns t.PlanBeforeUpgrade; nil-safe.
func (t *Terraform) GetPlanBeforeUpgrade() bool { return t != nil && t.PlanBeforeUpgrade }

// StagingDrills is the newest succeeded staging run of each drill.
type StagingDrills struct {
	Drills []*DrillEvidence
}

// GetDrills returns s.Drills; nil-safe.
func (s *StagingDrills) GetDrills() []*DrillEvidence {
	if s == nil {
		return nil
	}
	return s.Drills
}

// DrillEvidence is one succeeded staging drill, from the audit trail.
type DrillEvidence struct {
	Drill       Drill
	OperationID string
	Command     string
	EndedUnix   int64
}

// Backups is what the host knows about snapshots beyond where they go.
type Backups struct {
	ProtectedSnapshots []string
	// Local is nil when unset: Settings.SnapshotKeep and
	// SnapshotMaxAgeSeconds apply.
	Local            *Retention
	OffsiteRetention *Retention
	AgeRecipients    []string
	// Offsite is nil when snapshots stay local.
	Offsite     *Offsite
	ProtectedBy map[string]string
	LastDrill   string
}

// GetProtectedSnapshots returns b.ProtectedSnapshots; nil-safe.
func (b *Backups) GetProtectedSnapshots() []string {
	if b == nil {
		return nil
	}
	return b.ProtectedSnapshots
}

// GetLocal returns b.Local; nil-safe.
func (b *Backups) GetLocal() *Retention {
	if b == nil {
		return nil
	}
	return b.Local
}

// GetOffsiteRetention returns b.OffsiteRetention; nil-safe.
func (b *Backups) GetOffsiteRetention() *Retention {
	if b == nil {
		return nil
	}
	return b.OffsiteRetention
}

// GetAgeRecipients returns b.AgeRecipients; nil-safe.
func (b *Backups) GetAgeRecipients() []string {
	if b == nil {
		return nil
	}
	return b.AgeRecipients
}

// GetOffsite returns b.Offsite; nil-safe.
func (b *Backups) GetOffsite() *Offsite {
	if b == nil {
		return nil
	}
	return b.Offsite
}

// GetProtectedBy returns b.ProtectedBy; nil-safe.
func (b *Backups) GetProtectedBy() map[string]string {
	if b == nil {
		return nil
	}
	return b.ProtectedBy
}

// GetLastDrill returns b.LastDrill; nil-safe.
func (b *Backups) GetLastDrill() string {
	if b == nil {
		return ""
	}
	return b.LastDrill
}

// Retention keeps every snapshot that any rule keeps. All zero: keep everything.
type Retention struct {
	Keep          int32
	MaxAgeSeconds int64
	Hourly        int32
	Daily         int32
	Weekly        int32
	Monthly       int32
}

// Offsite is an S3-compatible bucket; its credentials travel in Credentials.
type Offsite struct {
	Endpoint string
	Bucket   string
	Prefix   string
	Region   string
	Insecure bool
}

// GetBucket returns o.Bucket; nil-safe ("" when there is no off-site copy).
func (o *Offsite) GetBucket() string {
	if o == nil {
		return ""
	}
	return o.Bucket
}

// OperationRequest is what Plan and Run receive.
type OperationRequest struct {
	OperationID string
	// Command is the manifest command name, e.g. "upgrade talos".
	Command string
	// Args holds parsed arguments by name (positional and flags alike).
	Args        map[string]string
	Cluster     Cluster
	Credentials Credentials
	Settings    Settings
	Requester   string
	// Attempt counts the runs of this operation, from 1 (0 from an old host:
	// treat as 1); above 1 the plugin resumes an interrupted run.
	Attempt int32
	// Config is the plugin's own section (plugins.NAME) as JSON, unread by
	// the host; nil when the config has none. Decode it with DecodeConfig.
	Config []byte
	// InterruptedSteps are the steps an earlier attempt of this operation
	// left in flight (none on a first run); see InterruptedSteps in resume.go.
	InterruptedSteps []InterruptedStep
}

// InterruptedStep is a step in flight when an earlier attempt stopped.
type InterruptedStep struct {
	// ID is the step's id in the plan that ran it.
	ID string
	// Node is the step's node, empty for a step on no node.
	Node string
}

// Step is one step of a plan.
type Step struct {
	ID          string
	Title       string
	Node        string
	FromVersion string
	ToVersion   string
	Image       string
	// Kind groups steps: "snapshot", "gate", "quorum", "upgrade", "verify", "note", ...
	Kind string
}

// Precondition is one checked condition of a plan.
type Precondition struct {
	Name   string
	OK     bool
	Detail string
	// Rule names the runbook rule, e.g. "R10".
	Rule string
}

// OperationPlan is what Plan returns.
type OperationPlan struct {
	Summary       string
	Steps         []*Step
	Preconditions []*Precondition
	Warnings      []string
	// CanonicalInputs are the bytes the host hashes into the plan digest
	// (build them with NewCanonical).
	CanonicalInputs []byte
	// Refusal is nil unless the operation must not run (RefusalPlan).
	Refusal *Refusal
	// Target is the operation's target (e.g. a version) for the promotion gate.
	Target string
	// Status holds a status provider's facts for /talos status; not digested.
	Status []string
}

// StepEvent reports a step's progress.
type StepEvent struct {
	StepID      string
	Status      StepStatus
	Detail      string
	Node        string
	FromVersion string
	ToVersion   string
}

// LogLine is a log line of a run.
type LogLine struct {
	Level   string
	Message string
	StepID  string
}

// Artifact is something a run produced, e.g. a snapshot copied off-cluster.
type Artifact struct {
	ID       string
	Name     string
	Sha256   string
	Size     int64
	Location string
	Revision int64
}

// SuggestedAction becomes a chat button, e.g. "Rollback node cp-2".
type SuggestedAction struct {
	Label   string
	Command string
}

// Result is the final event of every run.
type Result struct {
	OK      bool
	Summary string
	// Lines are report lines, e.g. one per health probe.
	Lines            []string
	Error            string
	SuggestedActions []*SuggestedAction
	Refusal          *Refusal
	// Declared maps each declared (Terraform) variable this run made true to
	// its new value; set only when OK, after every node was verified (R18).
	Declared map[string]string
	// Invalidated names declared variables this run made untrue (R19).
	Invalidated []string
}

// Event is one progress event of a run as sdktest records it: exactly one
// of Step, Log, Artifact and Result is set. UnixNano is the time the
// Reporter stamped it with.
type Event struct {
	UnixNano int64
	Step     *StepEvent
	Log      *LogLine
	Artifact *Artifact
	Result   *Result
}
