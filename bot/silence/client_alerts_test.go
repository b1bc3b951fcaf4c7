package silence_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/talosbot/talosbot/bot/silence"
	"github.com/talosbot/talosbot/config"
)

// An alerts answer that is not a list ("null" from a proxy or a stub) is an
// error, so the alert pause treats Alertmanager as unreachable (pause by
// default) instead of as a cluster with nothing firing; "[]" is no alerts.
func TestAlertsNullAnswerIsAnError(t *testing.T) {
	for body, wantErr := range map[string]bool{"null": true, "[]": false} {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write([]byte(body))
		}))
		c, err := silence.NewClient(&config.Silences{URL: srv.URL}, srv.Client())
		if err != nil {
			t.Fatal(err)
		}
		as, err := c.Alerts(context.Background(), []silence.Matcher{{Name: "cluster", Value: "prod", IsEqual: true}})
		srv.Close()
		if (err != nil) != wantErr {
			t.Errorf("answer %s: alerts %v, err %v; want an error: %v", body, as, err, wantErr)
		}
	}
}
