package sdk

import (
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Canonical builds OperationPlan.CanonicalInputs, the bytes the host hashes
// into the plan digest that approvals are bound to. Everything that would
// change what Run does must go in: if it changes between the approval and
// the run, the digest changes and the approvals are voided.
//
// The encoding is one "key=value" line per call, in call order. Every value
// is a Go-quoted string, so no value can run into the next field; lists keep
// their order, sets and maps are sorted. The same calls with the same values
// always give the same bytes:
//
//	c := sdk.NewCanonical(req)
//	c.Str("target", target).Int("node_timeout_ms", req.Settings.NodeTimeoutMs)
//	for i, n := range nodes {
//		c.Sub("node", i).Str("name", n.Name).Str("role", n.Role)
//	}
//	plan.CanonicalInputs = c.Bytes()
type Canonical struct {
	b      *strings.Builder
	prefix string
}

// NewCanonical starts the inputs with the request's command and cluster
// name, so two commands or two clusters never share a digest. req may be nil.
func NewCanonical(req *OperationRequest) *Canonical {
	if req == nil {
		return CanonicalFor("", "")
	}
	return CanonicalFor(req.Command, req.Cluster.Name)
}

// CanonicalFor is NewCanonical where only the command and cluster names are
// at hand.
func CanonicalFor(command, cluster string) *Canonical {
	c := &Canonical{b: &strings.Builder{}}
	return c.Str("command", command).Str("cluster", cluster)
}

// plainKey is a key written as is; any other key is quoted, so a key can
// never contain the "=" or the newline that separate fields.
var plainKey = regexp.MustCompile(`^[A-Za-z0-9_./\[\]-]+$`)

func (c *Canonical) line(key, value string) *Canonical {
	k := c.prefix + key
	if !plainKey.MatchString(k) {
		k = strconv.Quote(k)
	}
	c.b.WriteString(k)
	c.b.WriteByte('=')
	c.b.WriteString(value)
	c.b.WriteByte('\n')
	return c
}

// Str adds a string.
func (c *Canonical) Str(key, v string) *Canonical { return c.line(key, strconv.Quote(v)) }

// Int adds an integer.
func (c *Canonical) Int(key string, v int64) *Canonical { return c.line(key, strconv.FormatInt(v, 10)) }

// Bool adds a boolean.
func (c *Canonical) Bool(key string, v bool) *Canonical { return c.line(key, strconv.FormatBool(v)) }

// Duration adds a duration (as Go prints it, e.g. 5m0s).
func (c *Canonical) Duration(key string, v time.Duration) *Canonical {
	return c.line(key, strconv.Quote(v.String()))
}

// List adds strings whose order matters (e.g. the order nodes are rolled).
func (c *Canonical) List(key string, vs []string) *Canonical {
	q := make([]string, len(vs))
	for i, v := range vs {
		q[i] = strconv.Quote(v)
	}
	return c.line(key, "["+strings.Join(q, ",")+"]")
}

// Set adds strings whose order does not matter: they are sorted first.
func (c *Canonical) Set(key string, vs []string) *Canonical {
	s := append([]string(nil), vs...)
	sort.Strings(s)
	return c.List(key, s)
}

// Map adds a string map, sorted by key.
func (c *Canonical) Map(key string, m map[string]string) *Canonical {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	q := make([]string, len(keys))
	for i, k := range keys {
		q[i] = strconv.Quote(k) + ":" + strconv.Quote(m[k])
	}
	return c.line(key, "{"+strings.Join(q, ",")+"}")
}

// Sub returns a builder that writes into the same inputs with keys prefixed
// "name[index].", for one element of a repeated group (a node, a step).
// Fields added through it appear where they are added.
func (c *Canonical) Sub(name string, index int) *Canonical {
	return &Canonical{b: c.b, prefix: c.prefix + name + "[" + strconv.Itoa(index) + "]."}
}

// Bytes returns the inputs built so far.
func (c *Canonical) Bytes() []byte { return []byte(c.b.String()) }
