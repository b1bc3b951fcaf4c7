package config

import (
	"fmt"
	"regexp"
	"strconv"
	"time"
)

// AlertPause configures the pause of a disruptive roll on firing alerts
// (package bot/alertpause, docs/OPERATIONS.md "Pause on alerts"). It asks
// the Alertmanager of the silences section, so it is on whenever silences
// is set, unless Disabled.
type AlertPause struct {
	// Disabled turns the pause off (it is on by default with silences).
	Disabled bool `yaml:"disabled,omitempty"`
	// Matchers select the alerts that pause a roll, in Alertmanager's
	// syntax (name="v", name!="v", name=~"re", name!~"re"); the cluster
	// label (silences.cluster_label) is always added. Default:
	// ['severity="critical"'].
	Matchers []string `yaml:"matchers,omitempty"`
	// CountSilenced makes alerts inside the operation's own silence (the
	// ones the bot expects its work to cause) pause the roll too; by
	// default they are listed separately and do not count.
	CountSilenced bool `yaml:"count_silenced,omitempty"`
	// OnUnreachable is what a roll does when Alertmanager cannot be asked:
	// "pause" (default) or "continue" (each time audited).
	OnUnreachable string `yaml:"on_unreachable,omitempty"`
	// Every is how often a running roll asks while it waits on a node
	// (default 30s); it also asks before it starts and on resume.
	Every Duration `yaml:"every,omitempty"`
}

// Alert pause defaults and values.
const (
	AlertPauseOnUnreachablePause    = "pause"
	AlertPauseOnUnreachableContinue = "continue"
	DefaultAlertPauseEvery          = 30 * time.Second
)

// DefaultAlertPauseMatchers pause a roll on any critical alert of its cluster.
var DefaultAlertPauseMatchers = []string{`severity="critical"`}

// LabelMatcher is one parsed alert matcher.
type LabelMatcher struct {
	Name    string
	Value   string
	IsRegex bool
	IsEqual bool
}

var matcherRE = regexp.MustCompile(`^\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!~|!=|=)\s*(".*"|[^"\s]*)\s*$`)

// ParseLabelMatcher reads one matcher in Alertmanager's syntax.
func ParseLabelMatcher(s string) (LabelMatcher, error) {
	m := matcherRE.FindStringSubmatch(s)
	if m == nil {
		return LabelMatcher{}, fmt.Errorf("%q is not a matcher (write name=\"value\", name!=\"value\", name=~\"regex\" or name!~\"regex\")", s)
	}
	v := m[3]
	if len(v) >= 2 && v[0] == '"' {
		u, err := strconv.Unquote(v)
		if err != nil {
			return LabelMatcher{}, fmt.Errorf("%q: the value is not a quoted string: %w", s, err)
		}
		v = u
	}
	lm := LabelMatcher{Name: m[1], Value: v, IsRegex: m[2] == "=~" || m[2] == "!~", IsEqual: m[2] == "=" || m[2] == "=~"}
	if lm.IsRegex {
		if _, err := regexp.Compile("^(?:" + v + ")$"); err != nil {
			return LabelMatcher{}, fmt.Errorf("%q: not a regular expression: %w", s, err)
		}
	}
	return lm, nil
}

// PauseMatchers returns the parsed matchers (validated at load).
func (a *AlertPause) PauseMatchers() []LabelMatcher {
	var out []LabelMatcher
	for _, s := range a.Matchers {
		if m, err := ParseLabelMatcher(s); err == nil {
			out = append(out, m)
		}
	}
	return out
}

func (c *Config) applyAlertPauseDefaults() {
	a := &c.AlertPause
	if len(a.Matchers) == 0 {
		a.Matchers = append([]string(nil), DefaultAlertPauseMatchers...)
	}
	if a.OnUnreachable == "" {
		a.OnUnreachable = AlertPauseOnUnreachablePause
	}
	if a.Every == 0 {
		a.Every = Duration(DefaultAlertPauseEvery)
	}
}

func (c *Config) validateAlertPause() []FieldError {
	var errs []FieldError
	a := &c.AlertPause
	for i, s := range a.Matchers {
		if _, err := ParseLabelMatcher(s); err != nil {
			errs = append(errs, FieldError{Path: fmt.Sprintf("alert_pause.matchers[%d]", i), Msg: err.Error()})
		}
	}
	if a.OnUnreachable != AlertPauseOnUnreachablePause && a.OnUnreachable != AlertPauseOnUnreachableContinue {
		errs = append(errs, FieldError{Path: "alert_pause.on_unreachable", Msg: fmt.Sprintf("%q is not pause or continue", a.OnUnreachable)})
	}
	if a.Every.D() < time.Second {
		errs = append(errs, FieldError{Path: "alert_pause.every", Msg: "must be at least 1s"})
	}
	return errs
}
