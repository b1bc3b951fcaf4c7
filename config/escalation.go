package config

import (
	"fmt"
	"strings"
	"time"
)

// Escalation configures how the bot speaks up about a step that takes longer
// than expected (package bot/escalate, docs/OPERATIONS.md "Late steps").
type Escalation struct {
	// Disabled turns the notices off.
	Disabled bool `yaml:"disabled,omitempty"`
	// Mention is who the second notice (past twice the expected duration)
	// names, e.g. ["@oncall"]; empty: the cluster's approvers.
	Mention []string `yaml:"mention,omitempty"`
	// Every is how often running operations are looked at (default 30s).
	Every Duration `yaml:"every,omitempty"`
}

// DefaultEscalationEvery is how often late steps are looked for.
const DefaultEscalationEvery = 30 * time.Second

func (c *Config) applyEscalationDefaults() {
	if c.Escalation.Every == 0 {
		c.Escalation.Every = Duration(DefaultEscalationEvery)
	}
}

func (c *Config) validateEscalation() []FieldError {
	var errs []FieldError
	if c.Escalation.Every.D() < time.Second {
		errs = append(errs, FieldError{Path: "escalation.every", Msg: "must be at least 1s"})
	}
	// An empty entry would make the escalation name nobody: the notice
	// says "past twice the expected time: , please look".
	for i, m := range c.Escalation.Mention {
		if strings.TrimSpace(m) == "" {
			errs = append(errs, FieldError{Path: fmt.Sprintf("escalation.mention[%d]", i), Msg: "is empty; name who to mention, or leave mention out to mention the approvers"})
		}
	}
	return errs
}
