// Package alerts receives Alertmanager webhook notifications and turns each
// alert group into one chat message with a runbook suggestion: text, a
// runbook link and suggested commands as buttons. The message is edited as
// the group's alerts change and marked resolved when they resolve. Buttons
// are minted by the engine, so a click runs the command as the clicking user
// through the same policy as a typed command: an alert never bypasses
// approvals.
package alerts

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"
)

// MaxPayload bounds a webhook body. Alertmanager sends at most max_alerts
// alerts per notification (all when 0); 4 MiB holds thousands.
const MaxPayload = 4 << 20

// Payload is Alertmanager's webhook payload, version 4.
type Payload struct {
	Version           string            `json:"version"`
	GroupKey          string            `json:"groupKey"`
	TruncatedAlerts   int               `json:"truncatedAlerts"`
	Status            string            `json:"status"` // firing or resolved
	Receiver          string            `json:"receiver"`
	GroupLabels       map[string]string `json:"groupLabels"`
	CommonLabels      map[string]string `json:"commonLabels"`
	CommonAnnotations map[string]string `json:"commonAnnotations"`
	ExternalURL       string            `json:"externalURL"`
	Alerts            []Alert           `json:"alerts"`
}

// Alert is one alert of a notification.
type Alert struct {
	Status       string            `json:"status"`
	Labels       map[string]string `json:"labels"`
	Annotations  map[string]string `json:"annotations"`
	StartsAt     time.Time         `json:"startsAt"`
	EndsAt       time.Time         `json:"endsAt"`
	GeneratorURL string            `json:"generatorURL"`
	Fingerprint  string            `json:"fingerprint"`
}

// Alert statuses.
const (
	StatusFiring   = "firing"
	StatusResolved = "resolved"
)

// ErrPayload matches every payload validation error.
var ErrPayload = errors.New("invalid Alertmanager payload")

// Decode reads and validates one webhook payload. It accepts only version 4
// (every Alertmanager since 0.8) with a group key, a known status and alerts
// that each carry labels and a known status.
func Decode(r io.Reader) (*Payload, error) {
	dec := json.NewDecoder(io.LimitReader(r, MaxPayload+1))
	var p Payload
	if err := dec.Decode(&p); err != nil {
		// %w twice: the handler tells an oversized body (413) from a bad one.
		return nil, fmt.Errorf("%w: malformed JSON: %w", ErrPayload, err)
	}
	if dec.More() {
		return nil, fmt.Errorf("%w: trailing data after the JSON object", ErrPayload)
	}
	if err := p.validate(); err != nil {
		return nil, fmt.Errorf("%w: %s", ErrPayload, err.Error())
	}
	return &p, nil
}

func (p *Payload) validate() error {
	switch {
	case p.Version != "4":
		return fmt.Errorf("version %q is not supported; talosbot reads webhook payload version 4 (Alertmanager ≥ 0.8)", p.Version)
	case p.GroupKey == "":
		return errors.New("groupKey is empty")
	case p.Status != StatusFiring && p.Status != StatusResolved:
		return fmt.Errorf("status %q: want firing or resolved", p.Status)
	case len(p.Alerts) == 0:
		return errors.New("no alerts")
	case p.TruncatedAlerts < 0:
		return fmt.Errorf("truncatedAlerts %d is negative", p.TruncatedAlerts)
	}
	for i, a := range p.Alerts {
		if a.Status != StatusFiring && a.Status != StatusResolved {
			return fmt.Errorf("alerts[%d].status %q: want firing or resolved", i, a.Status)
		}
		if len(a.Labels) == 0 {
			return fmt.Errorf("alerts[%d] has no labels", i)
		}
	}
	return nil
}
