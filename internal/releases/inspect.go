package releases

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// InspectionKey is the key under which the releases plugin's plan carries
// the JSON Inspection in its canonical inputs (an sdk.Canonical Str line:
// key=quoted value).
const InspectionKey = "inspection"

// InspectionFromPlan reads the Inspection from the releases plugin's plan
// canonical inputs (the bot's side).
func InspectionFromPlan(canonical []byte) (*Inspection, error) {
	for _, line := range strings.Split(string(canonical), "\n") {
		q, ok := strings.CutPrefix(line, InspectionKey+"=")
		if !ok {
			continue
		}
		s, err := strconv.Unquote(q)
		if err != nil {
			return nil, fmt.Errorf("inspection: %w", err)
		}
		var in Inspection
		if err := json.Unmarshal([]byte(s), &in); err != nil {
			return nil, fmt.Errorf("inspection: %w", err)
		}
		return &in, nil
	}
	return nil, errors.New("the releases plan carries no inspection")
}

// Inspection is what a cluster runs, and which Kubernetes minors each
// known Talos release newer than that supports. The releases plugin makes
// it (it reads the cluster and has machinery's matrix); the bot reads it
// for `/talos releases` and new-release notices.
type Inspection struct {
	// Talos is the oldest version any node runs; Kubernetes the oldest
	// kubelet (zero: unknown).
	Talos, Kubernetes Version
	Supports          map[Version]KubeRange
}

// Inspect fills Supports for every release in known newer than talos.
func Inspect(m Matrix, talos, kube Version, known []Version) *Inspection {
	in := &Inspection{Talos: talos, Kubernetes: kube, Supports: map[Version]KubeRange{}}
	for _, v := range known {
		if v.Compare(talos) > 0 {
			in.Supports[v] = SupportedKubernetes(m, v)
		}
	}
	return in
}

// KubernetesOK reports whether Talos v supports the running Kubernetes
// (false when either is unknown).
func (in *Inspection) KubernetesOK(v Version) bool {
	r, ok := in.Supports[v]
	if !ok || r.Min.IsZero() || in.Kubernetes.IsZero() {
		return false
	}
	m := Version{Major: in.Kubernetes.Major, Minor: in.Kubernetes.Minor}
	return m.Compare(r.Min) >= 0 && m.Compare(r.Max) <= 0
}

type wireInspection struct {
	Talos      string            `json:"talos"`
	Kubernetes string            `json:"kubernetes,omitempty"`
	Supports   map[string]string `json:"supports,omitempty"` // "v1.13.9" → "1.31-1.36"
}

// MarshalJSON is the wire form between plugin and bot.
func (in Inspection) MarshalJSON() ([]byte, error) {
	w := wireInspection{Talos: in.Talos.Tag(), Supports: map[string]string{}}
	if !in.Kubernetes.IsZero() {
		w.Kubernetes = in.Kubernetes.Plain()
	}
	for v, r := range in.Supports {
		s := ""
		if !r.Min.IsZero() {
			s = r.Min.MinorPlain() + "-" + r.Max.MinorPlain()
		}
		w.Supports[v.Tag()] = s
	}
	return json.Marshal(w)
}

// UnmarshalJSON reads the wire form; anything malformed is an error.
func (in *Inspection) UnmarshalJSON(b []byte) error {
	var w wireInspection
	if err := json.Unmarshal(b, &w); err != nil {
		return err
	}
	t, err := Parse(w.Talos)
	if err != nil {
		return fmt.Errorf("inspection: %w", err)
	}
	var k Version
	if w.Kubernetes != "" {
		if k, err = Parse(w.Kubernetes); err != nil {
			return fmt.Errorf("inspection: %w", err)
		}
	}
	out := Inspection{Talos: t, Kubernetes: k, Supports: map[Version]KubeRange{}}
	for vs, rs := range w.Supports {
		v, err := Parse(vs)
		if err != nil {
			return fmt.Errorf("inspection: %w", err)
		}
		var r KubeRange
		if rs != "" {
			lo, hi, ok := strings.Cut(rs, "-")
			a, err1 := Parse(lo + ".0")
			b, err2 := Parse(hi + ".0")
			if !ok || err1 != nil || err2 != nil {
				return fmt.Errorf("inspection: range %q is not MIN-MAX", rs)
			}
			r = KubeRange{a, b}
		}
		out.Supports[v] = r
	}
	*in = out
	return nil
}
