package alerts

import (
	"fmt"
	"regexp"
	"strings"

	"github.com/talosbot/talosbot/config"
)

// Rule is a compiled config.AlertRule. Matchers follow Alertmanager's
// semantics: a missing label has the value "", exact matchers compare whole
// values and regex matchers are anchored at both ends.
type Rule struct {
	config.AlertRule
	re map[string]*regexp.Regexp
}

// CompileRules compiles rules in order; the first rule that matches wins.
func CompileRules(rules []config.AlertRule) ([]Rule, error) {
	out := make([]Rule, 0, len(rules))
	for i, r := range rules {
		c := Rule{AlertRule: r, re: map[string]*regexp.Regexp{}}
		for k, v := range r.MatchRE {
			re, err := regexp.Compile("^(?:" + v + ")$")
			if err != nil {
				return nil, fmt.Errorf("alerts.rules[%d] (%s).match_re.%s: %q is not a valid regular expression: %w", i, r.Name, k, v, err)
			}
			c.re[k] = re
		}
		if len(r.Match)+len(r.MatchRE) == 0 {
			return nil, fmt.Errorf("alerts.rules[%d] (%s) has no matchers; add match or match_re (e.g. match: {alertname: etcdNoLeader})", i, r.Name)
		}
		out = append(out, c)
	}
	return out, nil
}

// Matches reports whether every matcher of the rule holds for labels.
func (r *Rule) Matches(labels map[string]string) bool {
	for k, v := range r.Match {
		if labels[k] != v {
			return false
		}
	}
	for k, re := range r.re {
		if !re.MatchString(labels[k]) {
			return false
		}
	}
	return true
}

// match returns the first rule matching an alert of p (firing alerts first)
// and that alert's labels.
func match(rules []Rule, p *Payload) (*Rule, map[string]string) {
	ordered := make([]Alert, 0, len(p.Alerts))
	for _, a := range p.Alerts {
		if a.Status == StatusFiring {
			ordered = append(ordered, a)
		}
	}
	for _, a := range p.Alerts {
		if a.Status != StatusFiring {
			ordered = append(ordered, a)
		}
	}
	for i := range rules {
		for _, a := range ordered {
			if rules[i].Matches(a.Labels) {
				return &rules[i], a.Labels
			}
		}
	}
	return nil, nil
}

// safeValue is what a label value must look like to be put into a command:
// one token, no quotes or flags, so a label cannot change what a button does
// beyond naming a cluster or node.
var safeValue = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._:/-]{0,127}$`)

var placeholder = regexp.MustCompile(`\{\{\s*([A-Za-z0-9_.]+)\s*\}\}`)

// expand substitutes {{cluster}} and {{labels.NAME}} in a rule's command. It
// returns false when a value is missing or unsafe, or a placeholder is
// unknown: that command is not offered.
func expand(cmd, cluster string, labels map[string]string) (string, bool) {
	ok := true
	out := placeholder.ReplaceAllStringFunc(cmd, func(m string) string {
		name := placeholder.FindStringSubmatch(m)[1]
		var v string
		switch {
		case name == "cluster":
			v = cluster
		case strings.HasPrefix(name, "labels."):
			v = labels[strings.TrimPrefix(name, "labels.")]
		}
		if !safeValue.MatchString(v) {
			ok = false
		}
		return v
	})
	if strings.Contains(out, "{{") {
		ok = false
	}
	return out, ok
}
