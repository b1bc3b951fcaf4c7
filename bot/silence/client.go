// Package silence holds an Alertmanager silence while a disruptive
// operation runs: created when the run starts, extended while it runs,
// expired as soon as it ends whatever the ending, and found again at
// start-up after a crash. It implements engine.RunHook, and tells the alert
// receiver which alerts the bot's own work caused.
//
// The client speaks Alertmanager's API v2 (api/v2/openapi.yaml of
// prometheus/alertmanager): POST /api/v2/silences, GET and DELETE
// /api/v2/silence/{silenceID}, GET /api/v2/alerts.
package silence

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/talosbot/talosbot/config"
)

// Matcher is one label matcher of a silence (API v2 "matcher").
type Matcher struct {
	Name    string `json:"name"`
	Value   string `json:"value"`
	IsRegex bool   `json:"isRegex"`
	IsEqual bool   `json:"isEqual"`
}

// String renders the matcher the way Alertmanager's filter parameter and
// amtool write it: name="value", name=~"regex", name!="value".
func (m Matcher) String() string {
	op := "="
	switch {
	case m.IsRegex && m.IsEqual:
		op = "=~"
	case m.IsRegex:
		op = "!~"
	case !m.IsEqual:
		op = "!="
	}
	return m.Name + op + fmt.Sprintf("%q", m.Value)
}

// Silence is a silence as posted (API v2 "postableSilence").
type Silence struct {
	ID        string    `json:"id,omitempty"`
	Matchers  []Matcher `json:"matchers"`
	StartsAt  time.Time `json:"startsAt"`
	EndsAt    time.Time `json:"endsAt"`
	CreatedBy string    `json:"createdBy"`
	Comment   string    `json:"comment"`
}

// Stored is a silence as Alertmanager returns it ("gettableSilence").
type Stored struct {
	Silence
	Status struct {
		State string `json:"state"` // active, pending or expired
	} `json:"status"`
	UpdatedAt time.Time `json:"updatedAt"`
}

// Alert is the part of an API v2 "gettableAlert" the bot reads.
type Alert struct {
	Labels      map[string]string `json:"labels"`
	Annotations map[string]string `json:"annotations,omitempty"`
	StartsAt    time.Time         `json:"startsAt"`
	Status      struct {
		State      string   `json:"state"` // active, suppressed or unprocessed
		SilencedBy []string `json:"silencedBy"`
	} `json:"status"`
}

// ErrNotFound is returned (wrapped) when Alertmanager does not know a silence.
var ErrNotFound = errors.New("silence not found")

// Client talks to one Alertmanager. Credentials are read from their
// references on every request and never kept.
type Client struct {
	base     *url.URL
	token    config.Ref
	username string
	password config.Ref
	http     *http.Client
}

// NewClient builds a client for the silences section of the config.
func NewClient(c *config.Silences, hc *http.Client) (*Client, error) {
	u, err := url.Parse(strings.TrimSuffix(c.URL, "/"))
	if err != nil || u.Host == "" {
		return nil, fmt.Errorf("silences.alertmanager_url %q is not a URL", c.URL)
	}
	if hc == nil {
		hc = &http.Client{Timeout: 10 * time.Second}
	}
	return &Client{base: u, token: c.Token, username: c.Username, password: c.Password, http: hc}, nil
}

// URL returns Alertmanager's base URL (for messages; it holds no credentials).
func (c *Client) URL() string { return c.base.String() }

func (c *Client) do(ctx context.Context, method, path string, query url.Values, body, out any) error {
	u := *c.base
	u.Path = strings.TrimSuffix(u.Path, "/") + path
	u.RawQuery = query.Encode()
	var rd io.Reader
	if body != nil {
		raw, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(raw)
	}
	req, err := http.NewRequestWithContext(ctx, method, u.String(), rd)
	if err != nil {
		return err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", "application/json")
	switch {
	case !c.token.Empty():
		tok, err := c.token.Resolve()
		if err != nil {
			return fmt.Errorf("silences.token: %w", err)
		}
		req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(tok)))
	case c.username != "":
		pw, err := c.password.Resolve()
		if err != nil {
			return fmt.Errorf("silences.password: %w", err)
		}
		req.SetBasicAuth(c.username, strings.TrimSpace(string(pw)))
	}
	resp, err := c.http.Do(req)
	if err != nil {
		// The error names the URL, which holds no credentials (config
		// validation refuses userinfo in it).
		return fmt.Errorf("alertmanager %s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if resp.StatusCode == http.StatusNotFound {
		return fmt.Errorf("alertmanager %s %s: %w (%s)", method, path, ErrNotFound, strings.TrimSpace(string(raw)))
	}
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("alertmanager %s %s: HTTP %d: %s", method, path, resp.StatusCode, strings.TrimSpace(string(raw)))
	}
	if out != nil {
		if err := json.Unmarshal(raw, out); err != nil {
			return fmt.Errorf("alertmanager %s %s: decode the answer: %w", method, path, err)
		}
	}
	return nil
}

// Post creates a silence (ID empty) or updates one (ID set) and returns the
// silence's id. Alertmanager keeps the id when only the end moved; when it
// cannot update in place it expires the old silence and returns a new id.
func (c *Client) Post(ctx context.Context, s Silence) (string, error) {
	var out struct {
		SilenceID string `json:"silenceID"`
	}
	if err := c.do(ctx, http.MethodPost, "/api/v2/silences", nil, s, &out); err != nil {
		return "", err
	}
	if out.SilenceID == "" {
		return "", errors.New("alertmanager POST /api/v2/silences: the answer has no silenceID")
	}
	return out.SilenceID, nil
}

// Get reads one silence.
func (c *Client) Get(ctx context.Context, id string) (*Stored, error) {
	var s Stored
	if err := c.do(ctx, http.MethodGet, "/api/v2/silence/"+url.PathEscape(id), nil, nil, &s); err != nil {
		return nil, err
	}
	return &s, nil
}

// Expire ends a silence now. A silence already expired is not an error.
func (c *Client) Expire(ctx context.Context, id string) error {
	err := c.do(ctx, http.MethodDelete, "/api/v2/silence/"+url.PathEscape(id), nil, nil, nil)
	if err == nil || errors.Is(err, ErrNotFound) {
		// Not found: Alertmanager already garbage-collected it (expired
		// silences are kept for --data.retention) or it was deleted;
		// either way it silences nothing.
		return nil
	}
	// Alertmanager answers an error for a silence that already expired
	// (or was expired by hand): that is the state we want.
	if s, gerr := c.Get(ctx, id); gerr == nil && s.Status.State == "expired" {
		return nil
	}
	return err
}

// Alerts lists the alerts that match every matcher and have not resolved,
// silenced or not.
func (c *Client) Alerts(ctx context.Context, ms []Matcher) ([]Alert, error) {
	q := url.Values{}
	for _, m := range ms {
		q.Add("filter", m.String())
	}
	for _, k := range []string{"active", "silenced", "inhibited"} {
		q.Set(k, "true")
	}
	var out []Alert
	if err := c.do(ctx, http.MethodGet, "/api/v2/alerts", q, nil, &out); err != nil {
		return nil, err
	}
	if out == nil {
		// Alertmanager answers a list, "[]" when nothing fires; a "null"
		// (a proxy, a stub) is not "no alerts": the alert pause must not
		// read it as a quiet cluster and go on.
		return nil, errors.New("alertmanager GET /api/v2/alerts: the answer is not a list of alerts")
	}
	return out, nil
}
