package alerts_test

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/talosbot/talosbot/bot/alerts"
)

// FuzzDecode feeds arbitrary bodies to the webhook decoder: it must never
// panic, and whatever it accepts must be a valid version 4 payload that
// survives a re-encode unchanged.
func FuzzDecode(f *testing.F) {
	f.Add([]byte(`{"version":"4","groupKey":"{}:{alertname=\"etcdNoLeader\"}","truncatedAlerts":0,"status":"firing","receiver":"talosbot",` +
		`"groupLabels":{"alertname":"etcdNoLeader"},"commonLabels":{"alertname":"etcdNoLeader","cluster":"production"},"commonAnnotations":{},` +
		`"externalURL":"http://127.0.0.1:9093","alerts":[{"status":"firing","labels":{"alertname":"etcdNoLeader","cluster":"production"},` +
		`"annotations":{"summary":"no leader"},"startsAt":"2026-05-01T12:00:00Z","endsAt":"0001-01-01T00:00:00Z","generatorURL":"","fingerprint":"abc"}]}`))
	f.Add([]byte(`{"version":"4","groupKey":"k","status":"resolved","alerts":[{"status":"resolved","labels":{"a":"b"},"endsAt":"2026-05-01T12:00:00.123+02:00"}]}`))
	f.Add([]byte(`{"version":"4"}`))
	f.Add([]byte(`[]`))
	f.Add([]byte(`{"version":"4","groupKey":"k","status":"firing","alerts":[{"status":"firing","labels":{"a":"\u0000\ud800"}}]}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		p, err := alerts.Decode(bytes.NewReader(body))
		if err != nil {
			if p != nil {
				t.Fatal("an error came with a payload")
			}
			return
		}
		if p.Version != "4" || p.GroupKey == "" || len(p.Alerts) == 0 {
			t.Fatalf("accepted an invalid payload: %+v", p)
		}
		for _, a := range p.Alerts {
			if (a.Status != alerts.StatusFiring && a.Status != alerts.StatusResolved) || len(a.Labels) == 0 {
				t.Fatalf("accepted an invalid alert: %+v", a)
			}
		}
		raw, err := json.Marshal(p)
		if err != nil {
			t.Fatalf("re-encode: %v", err)
		}
		q, err := alerts.Decode(bytes.NewReader(raw))
		if err != nil {
			t.Fatalf("re-encoded payload rejected: %v\n%s", err, raw)
		}
		if q.GroupKey != p.GroupKey || len(q.Alerts) != len(p.Alerts) || q.Status != p.Status {
			t.Fatalf("round trip changed the payload: %+v → %+v", p, q)
		}
	})
}
