package config

import (
	"fmt"
	"net"
	"net/netip"
	"strings"
	"time"

	"filippo.io/age"
	"github.com/robfig/cron/v3"
)

// SnapshotRetention is the `snapshots:` section: retention of local copies
// (inline: keep, max_age, hourly, daily, weekly, monthly), how long an
// operation record protects the snapshot it names, encryption at rest,
// off-site copies and schedules. docs/BACKUPS.md describes every key.
type SnapshotRetention struct {
	// The local retention rules (Local returns them as a Retention); not an
	// inline Retention so that the key checker sees them.
	Keep    int      `yaml:"keep"`
	MaxAge  Duration `yaml:"max_age"`
	Hourly  int      `yaml:"hourly,omitempty"`
	Daily   int      `yaml:"daily,omitempty"`
	Weekly  int      `yaml:"weekly,omitempty"`
	Monthly int      `yaml:"monthly,omitempty"`
	// Soak is how long after an operation ended the snapshot its record
	// names stays protected from retention (default 7d).
	Soak       Duration            `yaml:"soak"`
	Encryption *SnapshotEncryption `yaml:"encryption,omitempty"`
	Offsite    *Offsite            `yaml:"offsite,omitempty"`
	// Schedule maps a cluster name to a cron expression ("0 * * * *") for
	// scheduled snapshots.
	Schedule map[string]string `yaml:"schedule,omitempty"`
	// DrillSchedule maps a cluster name to a cron expression for restore
	// drills; staging clusters default to DefaultDrillSchedule, "off"
	// turns a schedule off.
	DrillSchedule map[string]string `yaml:"drill_schedule,omitempty"`

	clusters []Cluster // for DrillSchedules' staging default
}

// ScheduleOff disables a schedule.
const ScheduleOff = "off"

// DefaultDrillSchedule is the restore drill of every staging cluster:
// weekly, Monday 04:00 UTC.
const DefaultDrillSchedule = "0 4 * * 1"

// DrillSchedules returns the restore-drill schedules with the staging default.
func (s SnapshotRetention) DrillSchedules() map[string]string {
	out := map[string]string{}
	for _, cl := range s.clusters {
		if cl.Environment == EnvStaging {
			out[cl.Name] = DefaultDrillSchedule
		}
	}
	for k, v := range s.DrillSchedule {
		out[k] = v
	}
	return out
}

// Local is the local retention policy.
func (s SnapshotRetention) Local() Retention {
	return Retention{Keep: s.Keep, MaxAge: s.MaxAge, Hourly: s.Hourly, Daily: s.Daily, Weekly: s.Weekly, Monthly: s.Monthly}
}

// Retention keeps every snapshot that one of its rules keeps; all zero keeps
// everything (internal/retention).
type Retention struct {
	Keep    int      `yaml:"keep"`
	MaxAge  Duration `yaml:"max_age"`
	Hourly  int      `yaml:"hourly,omitempty"`
	Daily   int      `yaml:"daily,omitempty"`
	Weekly  int      `yaml:"weekly,omitempty"`
	Monthly int      `yaml:"monthly,omitempty"`
}

// Empty reports whether no rule is set.
func (r Retention) Empty() bool {
	return r.Keep == 0 && r.MaxAge == 0 && r.Hourly == 0 && r.Daily == 0 && r.Weekly == 0 && r.Monthly == 0
}

// SnapshotEncryption turns on age encryption at rest. The bot needs only
// the recipients; Identity (a reference, e.g. file:/etc/talosbot/age.key) is
// resolved only for an operation that reads a snapshot back.
type SnapshotEncryption struct {
	Recipients []string `yaml:"recipients"`
	Identity   Ref      `yaml:"identity,omitempty"`
}

// Offsite is an S3-compatible bucket (Backblaze B2, MinIO, Garage, AWS).
type Offsite struct {
	Endpoint        string    `yaml:"endpoint"`
	Bucket          string    `yaml:"bucket"`
	Prefix          string    `yaml:"prefix,omitempty"`
	Region          string    `yaml:"region,omitempty"`
	Insecure        bool      `yaml:"insecure,omitempty"`
	AccessKeyID     Ref       `yaml:"access_key_id"`
	SecretAccessKey Ref       `yaml:"secret_access_key"`
	Retention       Retention `yaml:"retention,omitempty"`
}

// Snapshot defaults.
const (
	DefaultSnapshotKeep = 10
	DefaultSnapshotSoak = 7 * 24 * time.Hour
	maxSnapshotSoak     = 366 * 24 * time.Hour
	maxSnapshotCount    = 10000
)

func (s *SnapshotRetention) applyDefaults(clusters []Cluster) {
	s.clusters = clusters
	if s.Local().Empty() {
		s.Keep = DefaultSnapshotKeep
	}
	if s.Soak == 0 {
		s.Soak = Duration(DefaultSnapshotSoak)
	}
	if o := s.Offsite; o != nil && o.Retention.Empty() {
		o.Retention = s.Local()
	}
}

func (r Retention) validate(path string, add func(path, format string, args ...any)) {
	for k, v := range map[string]int{"keep": r.Keep, "hourly": r.Hourly, "daily": r.Daily, "weekly": r.Weekly, "monthly": r.Monthly} {
		if v < 0 || v > maxSnapshotCount {
			add(path+k, "%d must be between 0 and %d", v, maxSnapshotCount)
		}
	}
	if r.MaxAge < 0 {
		add(path+"max_age", "must not be negative")
	}
}

func (s SnapshotRetention) validate(c *Config) []FieldError {
	var errs []FieldError
	add := func(path, format string, args ...any) {
		errs = append(errs, FieldError{Path: path, Msg: fmt.Sprintf(format, args...)})
	}
	s.Local().validate("snapshots.", add)
	if s.Soak < 0 || s.Soak.D() > maxSnapshotSoak {
		add("snapshots.soak", "%s must be between 0 and 366d", s.Soak.D())
	}
	if e := s.Encryption; e != nil {
		if len(e.Recipients) == 0 {
			add("snapshots.encryption.recipients", "at least one age recipient (age1...) is required; remove encryption: to store snapshots unencrypted")
		}
		for i, r := range e.Recipients {
			if _, err := age.ParseRecipients(strings.NewReader(r)); err != nil || strings.ContainsAny(strings.TrimSpace(r), "\n") {
				add(fmt.Sprintf("snapshots.encryption.recipients[%d]", i), "%q is not an age recipient (age1...; from `age-keygen -y KEYFILE`)", r)
			}
			if strings.HasPrefix(strings.TrimSpace(r), "AGE-SECRET-KEY-") {
				add(fmt.Sprintf("snapshots.encryption.recipients[%d]", i), "is an age identity (secret key), not a recipient: put the public key here and the identity behind snapshots.encryption.identity (file: or env:)")
			}
		}
		if !e.Identity.Empty() {
			if msg := e.Identity.Check(); msg != "" {
				add("snapshots.encryption.identity", "%s", msg)
			}
		}
	}
	if o := s.Offsite; o != nil {
		host, _, err := net.SplitHostPort(o.Endpoint)
		if err != nil {
			host = o.Endpoint
		}
		switch {
		case o.Endpoint == "":
			add("snapshots.offsite.endpoint", "is required (host[:port], e.g. s3.eu-central-003.backblazeb2.com)")
		case strings.Contains(o.Endpoint, "://") || strings.Contains(o.Endpoint, "/"):
			add("snapshots.offsite.endpoint", "%q must be host[:port] without a scheme or path", o.Endpoint)
		case o.Insecure && !loopbackHost(host):
			add("snapshots.offsite.insecure", "plain http is allowed only for a loopback endpoint, not %q", o.Endpoint)
		}
		if o.Bucket == "" {
			add("snapshots.offsite.bucket", "is required")
		}
		if strings.HasPrefix(o.Prefix, "/") {
			add("snapshots.offsite.prefix", "%q must not start with /", o.Prefix)
		}
		for k, r := range map[string]Ref{"access_key_id": o.AccessKeyID, "secret_access_key": o.SecretAccessKey} {
			switch {
			case r.Empty():
				add("snapshots.offsite."+k, "is required (e.g. env:B2_APPLICATION_KEY)")
			case r.Check() != "":
				add("snapshots.offsite."+k, "%s", r.Check())
			}
		}
		o.Retention.validate("snapshots.offsite.retention.", add)
	}
	for key, m := range map[string]map[string]string{"schedule": s.Schedule, "drill_schedule": s.DrillSchedule} {
		for name, spec := range m {
			if c.Cluster(name) == nil {
				add("snapshots."+key+"."+name, "no cluster is named %q", name)
			}
			if spec == ScheduleOff {
				continue
			}
			if _, err := cron.ParseStandard(spec); err != nil {
				add("snapshots."+key+"."+name, "%q is not a cron expression (e.g. \"0 * * * *\", or off): %v", spec, err)
			}
		}
	}
	return errs
}

func loopbackHost(h string) bool {
	if h == "localhost" {
		return true
	}
	a, err := netip.ParseAddr(h)
	return err == nil && a.IsLoopback()
}
