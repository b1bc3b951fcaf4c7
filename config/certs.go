package config

import (
	"fmt"
	"slices"

	"github.com/robfig/cron/v3"
)

// Certificates is the bot's certificate-expiry check (docs/OPERATIONS.md
// "Certificate expiry"): once a day it reads every cluster's certificates
// and posts a notice in the cluster's channel when one crosses a
// threshold. It is core configuration because the bot itself does it.
type Certificates struct {
	// NoticeSchedule is the cron schedule of the check (default daily at
	// 09:00, "off" to disable).
	NoticeSchedule string `yaml:"notice_schedule,omitempty"`
	// NoticeDays are the thresholds, in days before expiry (default 30,
	// 14, 7, 1): a certificate is announced once when it crosses each.
	NoticeDays []int `yaml:"notice_days,omitempty"`
}

// DefaultCertNoticeDays are the thresholds of Certificates.NoticeDays.
var DefaultCertNoticeDays = []int{30, 14, 7, 1}

// MaxCertNoticeDays bounds a threshold: a CA lasts ten years, and a
// threshold beyond a year would announce it for a year.
const MaxCertNoticeDays = 366

func (c *Certificates) applyDefaults() {
	if c.NoticeSchedule == "" {
		c.NoticeSchedule = DefaultNoticeSchedule
	}
	if len(c.NoticeDays) == 0 {
		c.NoticeDays = slices.Clone(DefaultCertNoticeDays)
	}
}

// Thresholds are the notice days, largest first, without repeats.
func (c *Certificates) Thresholds() []int {
	out := slices.Clone(c.NoticeDays)
	slices.Sort(out)
	out = slices.Compact(out)
	slices.Reverse(out)
	return out
}

func (c *Certificates) validate() []FieldError {
	var errs []FieldError
	if c.NoticeSchedule != ScheduleOff {
		if _, err := cron.ParseStandard(c.NoticeSchedule); err != nil {
			errs = append(errs, FieldError{Path: "certificates.notice_schedule",
				Msg: fmt.Sprintf("%q is not a cron expression (e.g. \"0 9 * * *\", or off): %v", c.NoticeSchedule, err)})
		}
	}
	for i, d := range c.NoticeDays {
		if d < 1 || d > MaxCertNoticeDays {
			errs = append(errs, FieldError{Path: fmt.Sprintf("certificates.notice_days[%d]", i),
				Msg: fmt.Sprintf("%d: a threshold is a number of days between 1 and %d (e.g. [30, 14, 7, 1])", d, MaxCertNoticeDays)})
		}
	}
	return errs
}
