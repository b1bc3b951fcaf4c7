package alerts

import (
	"bytes"
	_ "embed"
	"fmt"

	"go.yaml.in/yaml/v3"

	"github.com/talosbot/talosbot/config"
)

// defaultRules is the text of the default rules. They are data, not code:
// the commands they suggest are plugin commands, which the core never names
// (config.CheckCommands checks them against the manifests, as it checks any
// configured rule).
//
//go:embed default-rules.yaml
var defaultRules []byte

// DefaultRules are runbook suggestions for the common etcd, node and Talos
// alerts (kube-prometheus / etcd-mixin / node-exporter names), from
// default-rules.yaml. The demo ships them; a real config can copy them into
// alerts.rules.
func DefaultRules() []config.AlertRule {
	rules, err := parseRules(defaultRules)
	if err != nil {
		// The file is compiled in and TestDefaultRules parses it: this is a
		// build defect, like a bad regexp.MustCompile.
		panic(err)
	}
	return rules
}

func parseRules(doc []byte) ([]config.AlertRule, error) {
	var rules []config.AlertRule
	dec := yaml.NewDecoder(bytes.NewReader(doc))
	dec.KnownFields(true)
	if err := dec.Decode(&rules); err != nil {
		return nil, fmt.Errorf("bot/alerts/default-rules.yaml: %w", err)
	}
	return rules, nil
}
