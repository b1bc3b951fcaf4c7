package config

import (
	"fmt"
	"net/url"
	"regexp"
	"time"

	"github.com/robfig/cron/v3"
)

// Release defaults (docs/RELEASES.md).
const (
	DefaultReleasesRefresh = 6 * time.Hour
	DefaultNoticeSchedule  = "0 9 * * *"
	// MinReleasesRefresh keeps the bot from polling the factory.
	MinReleasesRefresh = time.Minute
)

var kubeReleaseRE = regexp.MustCompile(`^\d+\.\d+\.\d+$`)

func (r *Releases) applyDefaults() {
	if r.Refresh == 0 {
		r.Refresh = Duration(DefaultReleasesRefresh)
	}
	if r.NoticeSchedule == "" {
		r.NoticeSchedule = DefaultNoticeSchedule
	}
}

func (r *Releases) validate() []FieldError {
	var errs []FieldError
	add := func(path, format string, a ...any) {
		errs = append(errs, FieldError{Path: path, Msg: fmt.Sprintf(format, a...)})
	}
	for i, v := range r.Talos {
		if !releaseRE.MatchString(v) {
			add(fmt.Sprintf("releases.talos[%d]", i), "%q is not a Talos release tag like v1.13.9", v)
		}
	}
	for i, v := range r.Kubernetes {
		if !kubeReleaseRE.MatchString(v) {
			add(fmt.Sprintf("releases.kubernetes[%d]", i), "%q is not a Kubernetes release like 1.36.3 (no v)", v)
		}
	}
	if r.FactoryURL != "" {
		u, err := url.Parse(r.FactoryURL)
		switch {
		case err != nil || u.Host == "" || (u.Scheme != "https" && u.Scheme != "http"):
			add("releases.factory_url", "%q is not a URL like https://factory.talos.dev", r.FactoryURL)
		case u.Scheme == "http" && !loopbackHost(u.Hostname()):
			// The list steers which patch the bot calls newest: it must
			// not come from whoever sits on the network path.
			add("releases.factory_url", "%q: plain http is allowed only on loopback; use https", r.FactoryURL)
		case u.User != nil || u.RawQuery != "" || u.Fragment != "":
			add("releases.factory_url", "%q must be a base URL without credentials, query or fragment", r.FactoryURL)
		}
	}
	if r.Refresh.D() < MinReleasesRefresh {
		add("releases.refresh", "%s is shorter than %s", r.Refresh.D(), MinReleasesRefresh)
	}
	if r.ListedOnly && len(r.Talos) == 0 {
		add("releases.listed_only", "needs releases.talos: an empty allow-list would allow no upgrade at all")
	}
	if r.NoticeSchedule != ScheduleOff {
		if _, err := cron.ParseStandard(r.NoticeSchedule); err != nil {
			add("releases.notice_schedule", "%q is not a cron expression (e.g. \"0 9 * * *\", or off): %v", r.NoticeSchedule, err)
		}
	}
	return errs
}
