package sdk

// The gRPC adapter's conversions between the author's Go types (types.go)
// and the wire messages. Plugins never call them (Serve does); they are
// exported for the host side and tools that hold wire messages (the
// built-in manifest catalogue, in-process test hosts). Each message has one
// function per direction, so a round-trip test (convert_test.go) proves
// every wire field is carried: a field added to lifecycle.proto but not
// here fails that test.

import (
	pb "github.com/talosbot/talosbot/plugins/sdk/proto/lifecycle/v1"
)

func argToProto(a *Arg) *pb.Arg {
	if a == nil {
		return nil
	}
	return &pb.Arg{Name: a.Name, Description: a.Description, Required: a.Required, Flag: a.Flag, Boolean: a.Boolean, DefaultValue: a.DefaultValue}
}

func argFromProto(a *pb.Arg) *Arg {
	if a == nil {
		return nil
	}
	return &Arg{Name: a.GetName(), Description: a.GetDescription(), Required: a.GetRequired(), Flag: a.GetFlag(), Boolean: a.GetBoolean(), DefaultValue: a.GetDefaultValue()}
}

func commandToProto(c *Command) *pb.Command {
	if c == nil {
		return nil
	}
	out := &pb.Command{
		Name: c.Name, Summary: c.Summary, Effect: pb.Effect(c.Effect), NeedsSnapshot: c.NeedsSnapshot,
		Example: c.Example, ReadsSnapshot: c.ReadsSnapshot, Drill: pb.Drill(c.Drill), MinApprovals: c.MinApprovals,
		PausesBetweenNodes: c.PausesBetweenNodes, StatusLabel: c.StatusLabel, Maintenance: c.Maintenance,
	}
	for _, a := range c.Args {
		out.Args = append(out.Args, argToProto(a))
	}
	for _, n := range c.Needs {
		out.Needs = append(out.Needs, pb.Need(n))
	}
	return out
}

func commandFromProto(c *pb.Command) *Command {
	if c == nil {
		return nil
	}
	out := &Command{
		Name: c.GetName(), Summary: c.GetSummary(), Effect: Effect(c.GetEffect()), NeedsSnapshot: c.GetNeedsSnapshot(),
		Example: c.GetExample(), ReadsSnapshot: c.GetReadsSnapshot(), Drill: Drill(c.GetDrill()), MinApprovals: c.GetMinApprovals(),
		PausesBetweenNodes: c.GetPausesBetweenNodes(), StatusLabel: c.GetStatusLabel(), Maintenance: c.GetMaintenance(),
	}
	for _, a := range c.GetArgs() {
		out.Args = append(out.Args, argFromProto(a))
	}
	for _, n := range c.GetNeeds() {
		out.Needs = append(out.Needs, Need(n))
	}
	return out
}

// ManifestToWire converts a manifest to its wire message.
func ManifestToWire(m *Manifest) *pb.Manifest {
	if m == nil {
		return nil
	}
	out := &pb.Manifest{Name: m.Name, Version: m.Version, MinTalosVersion: m.MinTalosVersion, MaxTalosVersion: m.MaxTalosVersion}
	for _, c := range m.Commands {
		out.Commands = append(out.Commands, commandToProto(c))
	}
	return out
}

// ManifestFromWire converts a wire manifest to the Go type.
func ManifestFromWire(m *pb.Manifest) *Manifest {
	if m == nil {
		return nil
	}
	out := &Manifest{Name: m.GetName(), Version: m.GetVersion(), MinTalosVersion: m.GetMinTalosVersion(), MaxTalosVersion: m.GetMaxTalosVersion()}
	for _, c := range m.GetCommands() {
		out.Commands = append(out.Commands, commandFromProto(c))
	}
	return out
}

func clusterToProto(c *Cluster) *pb.Cluster {
	out := &pb.Cluster{Name: c.Name, Environment: c.Environment, Endpoints: c.Endpoints, Declared: c.Declared}
	for _, n := range c.Nodes {
		if n != nil {
			out.Nodes = append(out.Nodes, &pb.Node{Name: n.Name, Address: n.Address, Role: n.Role, Host: n.Host, Platform: n.Platform, InstallerClass: n.InstallerClass})
		}
	}
	return out
}

func clusterFromProto(c *pb.Cluster) Cluster {
	out := Cluster{Name: c.GetName(), Environment: c.GetEnvironment(), Endpoints: c.GetEndpoints(), Declared: c.GetDeclared()}
	for _, n := range c.GetNodes() {
		out.Nodes = append(out.Nodes, &Node{Name: n.GetName(), Address: n.GetAddress(), Role: n.GetRole(), Host: n.GetHost(), Platform: n.GetPlatform(), InstallerClass: n.GetInstallerClass()})
	}
	return out
}

func retentionToProto(r *Retention) *pb.Retention {
	if r == nil {
		return nil
	}
	return &pb.Retention{Keep: r.Keep, MaxAgeSeconds: r.MaxAgeSeconds, Hourly: r.Hourly, Daily: r.Daily, Weekly: r.Weekly, Monthly: r.Monthly}
}

func retentionFromProto(r *pb.Retention) *Retention {
	if r == nil {
		return nil
	}
	return &Retention{Keep: r.GetKeep(), MaxAgeSeconds: r.GetMaxAgeSeconds(), Hourly: r.GetHourly(), Daily: r.GetDaily(), Weekly: r.GetWeekly(), Monthly: r.GetMonthly()}
}

func backupsToProto(b *Backups) *pb.Backups {
	if b == nil {
		return nil
	}
	out := &pb.Backups{
		ProtectedSnapshots: b.ProtectedSnapshots, Local: retentionToProto(b.Local), OffsiteRetention: retentionToProto(b.OffsiteRetention),
		AgeRecipients: b.AgeRecipients, ProtectedBy: b.ProtectedBy, LastDrill: b.LastDrill, Dir: b.Dir,
	}
	if o := b.Offsite; o != nil {
		out.Offsite = &pb.Offsite{Endpoint: o.Endpoint, Bucket: o.Bucket, Prefix: o.Prefix, Region: o.Region, Insecure: o.Insecure}
	}
	return out
}

func backupsFromProto(b *pb.Backups) *Backups {
	if b == nil {
		return nil
	}
	out := &Backups{
		ProtectedSnapshots: b.GetProtectedSnapshots(), Local: retentionFromProto(b.GetLocal()), OffsiteRetention: retentionFromProto(b.GetOffsiteRetention()),
		AgeRecipients: b.GetAgeRecipients(), ProtectedBy: b.GetProtectedBy(), LastDrill: b.GetLastDrill(), Dir: b.GetDir(),
	}
	if o := b.GetOffsite(); o != nil {
		out.Offsite = &Offsite{Endpoint: o.GetEndpoint(), Bucket: o.GetBucket(), Prefix: o.GetPrefix(), Region: o.GetRegion(), Insecure: o.GetInsecure()}
	}
	return out
}

func settingsToProto(s *Settings) *pb.Settings {
	return &pb.Settings{GateTimeoutMs: s.GateTimeoutMs, NodeTimeoutMs: s.NodeTimeoutMs,
		GateAfterTimeoutMs: s.GateAfterTimeoutMs, HealthTimeoutMs: s.HealthTimeoutMs}
}

func settingsFromProto(s *pb.Settings) Settings {
	return Settings{GateTimeoutMs: s.GetGateTimeoutMs(), NodeTimeoutMs: s.GetNodeTimeoutMs(),
		GateAfterTimeoutMs: s.GetGateAfterTimeoutMs(), HealthTimeoutMs: s.GetHealthTimeoutMs()}
}

func evidenceToProto(e *Evidence) *pb.Evidence {
	out := &pb.Evidence{Backups: backupsToProto(e.Backups), PauseMark: e.PauseMark}
	for _, f := range e.GitFollowups {
		out.GitFollowups = append(out.GitFollowups, &pb.GitFollowup{Variable: f.Variable, Value: f.Value, Branch: f.Branch, OperationId: f.OperationID,
			Base: f.Base, State: pb.GitFollowupState(f.State), PullRequestUrl: f.PullRequestURL, Error: f.Error})
	}
	if t := e.Terraform; t != nil {
		out.Terraform = &pb.Terraform{Root: t.Root, Binary: t.Binary, ConfigKey: t.ConfigKey}
	}
	if d := e.StagingDrills; d != nil {
		out.StagingDrills = &pb.StagingDrills{}
		for _, x := range d.Drills {
			if x != nil {
				out.StagingDrills.Drills = append(out.StagingDrills.Drills, &pb.DrillEvidence{Drill: pb.Drill(x.Drill), OperationId: x.OperationID, Command: x.Command, EndedUnix: x.EndedUnix})
			}
		}
	}
	out.Releases = ReleasesToWire(e.Releases)
	return out
}

// ReleasesToWire converts the release evidence to its wire message (nil
// for nil: the bot sent none).
func ReleasesToWire(r *Releases) *pb.Releases {
	if r == nil {
		return nil
	}
	return &pb.Releases{Versions: r.Versions, Targets: r.Targets, Kubernetes: r.Kubernetes, Origin: r.Origin, FactoryUrl: r.FactoryURL, ListedOnly: r.ListedOnly}
}

func evidenceFromProto(e *pb.Evidence) Evidence {
	out := Evidence{Backups: backupsFromProto(e.GetBackups()), PauseMark: e.GetPauseMark()}
	for _, f := range e.GetGitFollowups() {
		out.GitFollowups = append(out.GitFollowups, GitFollowup{Variable: f.GetVariable(), Value: f.GetValue(), Branch: f.GetBranch(), OperationID: f.GetOperationId(),
			Base: f.GetBase(), State: GitFollowupState(f.GetState()), PullRequestURL: f.GetPullRequestUrl(), Error: f.GetError()})
	}
	if t := e.GetTerraform(); t != nil {
		out.Terraform = &Terraform{Root: t.GetRoot(), Binary: t.GetBinary(), ConfigKey: t.GetConfigKey()}
	}
	if d := e.GetStagingDrills(); d != nil {
		out.StagingDrills = &StagingDrills{}
		for _, x := range d.GetDrills() {
			out.StagingDrills.Drills = append(out.StagingDrills.Drills, &DrillEvidence{Drill: Drill(x.GetDrill()), OperationID: x.GetOperationId(), Command: x.GetCommand(), EndedUnix: x.GetEndedUnix()})
		}
	}
	if r := e.GetReleases(); r != nil {
		out.Releases = &Releases{Versions: r.GetVersions(), Targets: r.GetTargets(), Kubernetes: r.GetKubernetes(), Origin: r.GetOrigin(), FactoryURL: r.GetFactoryUrl(), ListedOnly: r.GetListedOnly()}
	}
	return out
}

// RequestToWire converts a request to its wire message.
func RequestToWire(r *OperationRequest) *pb.OperationRequest {
	if r == nil {
		return nil
	}
	c := r.Credentials
	return &pb.OperationRequest{
		OperationId: r.OperationID, Command: r.Command, Args: r.Args, Cluster: clusterToProto(&r.Cluster),
		Credentials: &pb.Credentials{
			Talosconfig: c.Talosconfig, Kubeconfig: c.Kubeconfig, OffsiteAccessKeyId: c.OffsiteAccessKeyID,
			OffsiteSecretAccessKey: c.OffsiteSecretAccessKey, AgeIdentity: c.AgeIdentity,
		},
		Settings: settingsToProto(&r.Settings), Requester: r.Requester, Attempt: r.Attempt, Config: r.Config,
		Evidence:         evidenceToProto(&r.Evidence),
		InterruptedSteps: interruptedToProto(r.InterruptedSteps),
	}
}

func interruptedToProto(in []InterruptedStep) []*pb.InterruptedStep {
	var out []*pb.InterruptedStep
	for _, s := range in {
		out = append(out, &pb.InterruptedStep{Id: s.ID, Node: s.Node})
	}
	return out
}

func interruptedFromProto(in []*pb.InterruptedStep) []InterruptedStep {
	var out []InterruptedStep
	for _, s := range in {
		if s != nil {
			out = append(out, InterruptedStep{ID: s.GetId(), Node: s.GetNode()})
		}
	}
	return out
}

// RequestFromWire converts a wire request; it never returns nil, as Plan and Run always get a request.
func RequestFromWire(r *pb.OperationRequest) *OperationRequest {
	c := r.GetCredentials()
	return &OperationRequest{
		OperationID: r.GetOperationId(), Command: r.GetCommand(), Args: r.GetArgs(), Cluster: clusterFromProto(r.GetCluster()),
		Credentials: Credentials{
			Talosconfig: c.GetTalosconfig(), Kubeconfig: c.GetKubeconfig(), OffsiteAccessKeyID: c.GetOffsiteAccessKeyId(),
			OffsiteSecretAccessKey: c.GetOffsiteSecretAccessKey(), AgeIdentity: c.GetAgeIdentity(),
		},
		Settings: settingsFromProto(r.GetSettings()), Requester: r.GetRequester(), Attempt: r.GetAttempt(), Config: r.GetConfig(),
		Evidence:         evidenceFromProto(r.GetEvidence()),
		InterruptedSteps: interruptedFromProto(r.GetInterruptedSteps()),
	}
}

func refusalToProto(r *Refusal) *pb.Refusal {
	if r == nil {
		return nil
	}
	return &pb.Refusal{Rule: r.Rule, Reason: r.Reason, Fix: r.Fix}
}

func refusalFromProto(r *pb.Refusal) *Refusal {
	if r == nil {
		return nil
	}
	return &Refusal{Rule: r.GetRule(), Reason: r.GetReason(), Fix: r.GetFix()}
}

// PlanToWire converts a plan to its wire message.
func PlanToWire(p *OperationPlan) *pb.OperationPlan {
	if p == nil {
		return nil
	}
	out := &pb.OperationPlan{Summary: p.Summary, Warnings: p.Warnings, CanonicalInputs: p.CanonicalInputs, Refusal: refusalToProto(p.Refusal), Target: p.Target, Status: p.Status}
	for _, s := range p.Steps {
		if s != nil {
			out.Steps = append(out.Steps, &pb.Step{Id: s.ID, Title: s.Title, Node: s.Node, FromVersion: s.FromVersion, ToVersion: s.ToVersion, Image: s.Image, Kind: s.Kind})
		}
	}
	for _, c := range p.Preconditions {
		if c != nil {
			out.Preconditions = append(out.Preconditions, &pb.Precondition{Name: c.Name, Ok: c.OK, Detail: c.Detail, Rule: c.Rule})
		}
	}
	return out
}

// PlanFromWire converts a wire plan to the Go type.
func PlanFromWire(p *pb.OperationPlan) *OperationPlan {
	if p == nil {
		return nil
	}
	out := &OperationPlan{Summary: p.GetSummary(), Warnings: p.GetWarnings(), CanonicalInputs: p.GetCanonicalInputs(), Refusal: refusalFromProto(p.GetRefusal()), Target: p.GetTarget(), Status: p.GetStatus()}
	for _, s := range p.GetSteps() {
		out.Steps = append(out.Steps, &Step{ID: s.GetId(), Title: s.GetTitle(), Node: s.GetNode(), FromVersion: s.GetFromVersion(), ToVersion: s.GetToVersion(), Image: s.GetImage(), Kind: s.GetKind()})
	}
	for _, c := range p.GetPreconditions() {
		out.Preconditions = append(out.Preconditions, &Precondition{Name: c.GetName(), OK: c.GetOk(), Detail: c.GetDetail(), Rule: c.GetRule()})
	}
	return out
}

// ResultToWire converts a result to its wire message.
func ResultToWire(r *Result) *pb.Result {
	out := &pb.Result{Ok: r.OK, Summary: r.Summary, Lines: r.Lines, Error: r.Error, Refusal: refusalToProto(r.Refusal), Declared: r.Declared, Invalidated: r.Invalidated}
	for _, a := range r.SuggestedActions {
		if a != nil {
			out.SuggestedActions = append(out.SuggestedActions, &pb.SuggestedAction{Label: a.Label, Command: a.Command})
		}
	}
	return out
}

// ResultFromWire converts a wire result to the Go type.
func ResultFromWire(r *pb.Result) *Result {
	out := &Result{OK: r.GetOk(), Summary: r.GetSummary(), Lines: r.GetLines(), Error: r.GetError(), Refusal: refusalFromProto(r.GetRefusal()), Declared: r.GetDeclared(), Invalidated: r.GetInvalidated()}
	for _, a := range r.GetSuggestedActions() {
		out.SuggestedActions = append(out.SuggestedActions, &SuggestedAction{Label: a.GetLabel(), Command: a.GetCommand()})
	}
	return out
}

// EventToWire converts a validated event (exactly one part set) to a wire Progress.
func EventToWire(e *Event) *pb.Progress {
	p := &pb.Progress{UnixNano: e.UnixNano}
	switch {
	case e.Step != nil:
		s := e.Step
		p.Event = &pb.Progress_Step{Step: &pb.StepEvent{StepId: s.StepID, Status: pb.StepStatus(s.Status), Detail: s.Detail, Node: s.Node, FromVersion: s.FromVersion, ToVersion: s.ToVersion}}
	case e.Log != nil:
		p.Event = &pb.Progress_Log{Log: &pb.LogLine{Level: e.Log.Level, Message: e.Log.Message, StepId: e.Log.StepID}}
	case e.Artifact != nil:
		a := e.Artifact
		p.Event = &pb.Progress_Artifact{Artifact: &pb.Artifact{Id: a.ID, Name: a.Name, Sha256: a.Sha256, Size: a.Size, Location: a.Location, Revision: a.Revision}}
	case e.Result != nil:
		p.Event = &pb.Progress_Result{Result: ResultToWire(e.Result)}
	}
	return p
}

// EventFromWire converts a wire Progress to an Event.
func EventFromWire(p *pb.Progress) *Event {
	e := &Event{UnixNano: p.GetUnixNano()}
	if s := p.GetStep(); s != nil {
		e.Step = &StepEvent{StepID: s.GetStepId(), Status: StepStatus(s.GetStatus()), Detail: s.GetDetail(), Node: s.GetNode(), FromVersion: s.GetFromVersion(), ToVersion: s.GetToVersion()}
	}
	if l := p.GetLog(); l != nil {
		e.Log = &LogLine{Level: l.GetLevel(), Message: l.GetMessage(), StepID: l.GetStepId()}
	}
	if a := p.GetArtifact(); a != nil {
		e.Artifact = &Artifact{ID: a.GetId(), Name: a.GetName(), Sha256: a.GetSha256(), Size: a.GetSize(), Location: a.GetLocation(), Revision: a.GetRevision()}
	}
	if r := p.GetResult(); r != nil {
		e.Result = ResultFromWire(r)
	}
	return e
}
