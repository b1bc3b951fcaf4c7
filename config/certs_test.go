package config

import (
	"slices"
	"testing"
)

func TestCertificatesDefaultsAndRefusals(t *testing.T) {
	c, err := Parse([]byte(base + goodPolicy))
	if err != nil {
		t.Fatal(err)
	}
	if c.Certificates.NoticeSchedule != DefaultNoticeSchedule || !slices.Equal(c.Certificates.Thresholds(), []int{30, 14, 7, 1}) {
		t.Errorf("defaults: %+v", c.Certificates)
	}
	c, err = Parse([]byte(base + goodPolicy + "certificates: {notice_schedule: \"0 6 * * 1\", notice_days: [7, 60, 7]}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if c.Certificates.NoticeSchedule != "0 6 * * 1" || !slices.Equal(c.Certificates.Thresholds(), []int{60, 7}) {
		t.Errorf("parsed: %+v, thresholds %v", c.Certificates, c.Certificates.Thresholds())
	}
	wantErrs(t, base+goodPolicy+"certificates: {notice_schedule: daily, notice_days: [0, 400]}\n",
		`certificates.notice_schedule: "daily" is not a cron expression`,
		`certificates.notice_days[0]: 0: a threshold is a number of days between 1 and 366`,
		`certificates.notice_days[1]: 400: a threshold`)
	wantErrs(t, base+goodPolicy+"certificates: {notice_day: [3]}\n", "certificates.notice_day")
}
