package config

import (
	"testing"
	"time"
)

func TestReleasesDefaults(t *testing.T) {
	c, err := Parse([]byte(base + goodPolicy))
	if err != nil {
		t.Fatal(err)
	}
	r := c.Releases
	if r.FactoryURL != "" || r.Refresh.D() != DefaultReleasesRefresh || r.NoticeSchedule != DefaultNoticeSchedule || r.ListedOnly {
		t.Errorf("defaults: %+v", r)
	}
	c, err = Parse([]byte(base + goodPolicy + `
releases:
  talos: [v1.13.9]
  kubernetes: [1.36.3]
  factory_url: https://factory.talos.dev
  refresh: 1h
  listed_only: true
  notice_schedule: "off"
`))
	if err != nil {
		t.Fatal(err)
	}
	if c.Releases.Refresh.D() != time.Hour || c.Releases.NoticeSchedule != ScheduleOff || c.Releases.Kubernetes[0] != "1.36.3" {
		t.Errorf("parsed: %+v", c.Releases)
	}
}

func TestReleasesRefusals(t *testing.T) {
	wantErrs(t, base+goodPolicy+`
releases:
  talos: [v1.13]
  kubernetes: [v1.36.3, "1.36"]
  factory_url: http://factory.example.com
  refresh: 10s
  notice_schedule: "every day"
`,
		`releases.talos[0]: "v1.13" is not a Talos release tag`,
		`releases.kubernetes[0]: "v1.36.3" is not a Kubernetes release like 1.36.3`,
		`releases.kubernetes[1]: "1.36" is not a Kubernetes release`,
		`releases.factory_url: "http://factory.example.com": plain http is allowed only on loopback`,
		`releases.refresh: 10s is shorter than 1m0s`,
		`releases.notice_schedule: "every day" is not a cron expression`,
	)
	wantErrs(t, base+goodPolicy+"releases: {listed_only: true}\n",
		`releases.listed_only: needs releases.talos`)
	wantErrs(t, base+goodPolicy+"releases: {factory_url: \"https://u:p@factory.example.com/?x=1\"}\n",
		`releases.factory_url: "https://u:p@factory.example.com/?x=1" must be a base URL without credentials`)
	wantErrs(t, base+goodPolicy+"releases: {factory_url: factory.talos.dev}\n",
		`releases.factory_url: "factory.talos.dev" is not a URL`)
	if errs := parseErrs(t, base+goodPolicy+"releases: {factory_url: \"http://127.0.0.1:9999\"}\n"); len(errs) != 0 {
		t.Errorf("loopback http refused: %v", errs)
	}
	wantErrs(t, base+goodPolicy+"releases: {factory_uri: https://factory.talos.dev}\n", "releases.factory_uri")
}
