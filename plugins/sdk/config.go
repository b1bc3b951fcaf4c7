package sdk

import (
	"bytes"
	"context"
	"encoding"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	lifecyclev1 "github.com/talosbot/talosbot/plugins/sdk/proto/lifecycle/v1"
)

// A plugin's configuration is its own section of the bot's config,
// plugins.NAME (Botkube hands each plugin its section the same way). The
// host converts the section from YAML to JSON and passes it unread: in
// ValidateConfig, which `talosbot config check` and serve call before
// anything starts, and in every OperationRequest (config). The plugin decodes
// it with DecodeConfig into its own Go type, strictly: an unknown key, a
// value of the wrong type or a bad duration is an error naming its path
// inside the section, which the host prefixes with "plugins.NAME.".

// ConfigValidator is implemented by a plugin that takes a configuration
// section. ValidateConfig decodes raw (JSON; empty when the section is
// absent) as Plan and Run will and reports every problem: return
// ConfigErrors for problems with paths (DecodeConfig's errors are), any
// other error for the section as a whole. clusters names the configured
// clusters, for sections keyed by cluster. It must have no side effects.
//
// A plugin without ValidateConfig accepts only an absent section: the SDK
// refuses any configuration given to it, so a typo in a plugin's name under
// plugins: is never silently ignored.
type ConfigValidator interface {
	ValidateConfig(ctx context.Context, raw []byte, clusters []string) error
}

// ConfigProblem is one error in a plugin's section; Path is inside the
// section ("keep", "offsite.bucket", "schedule.prod"), empty for the section
// as a whole.
type ConfigProblem struct {
	Path    string
	Message string
}

// ConfigErrors lists every problem of a section.
type ConfigErrors []ConfigProblem

func (e ConfigErrors) Error() string {
	parts := make([]string, 0, len(e))
	for _, p := range e {
		if p.Path == "" {
			parts = append(parts, p.Message)
			continue
		}
		parts = append(parts, p.Path+": "+p.Message)
	}
	return strings.Join(parts, "; ")
}

// Add appends a problem; format as fmt.Sprintf.
func (e *ConfigErrors) Add(path, format string, args ...any) {
	*e = append(*e, ConfigProblem{Path: path, Message: fmt.Sprintf(format, args...)})
}

// Err returns e as an error, or nil when it holds no problem.
func (e ConfigErrors) Err() error {
	if len(e) == 0 {
		return nil
	}
	return e
}

// DecodeConfig decodes a plugin's section (raw JSON from the host) into v, a
// pointer to the plugin's config struct, whose fields are named by their
// json tags. Fields the section does not set keep the values v had, so set
// the defaults before decoding. Empty raw (no section) or JSON null changes
// nothing. Every problem is returned at once as ConfigErrors: unknown keys
// (with the nearest valid key), values of the wrong type, and errors of
// fields with their own UnmarshalJSON (Duration).
func DecodeConfig(raw []byte, v any) error {
	rv := reflect.ValueOf(v)
	if rv.Kind() != reflect.Pointer || rv.IsNil() {
		return fmt.Errorf("sdk.DecodeConfig: want a non-nil pointer, got %T", v)
	}
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return nil
	}
	var errs ConfigErrors
	decodeValue("", raw, rv.Elem(), &errs)
	return errs.Err()
}

var (
	jsonUnmarshaler = reflect.TypeFor[json.Unmarshaler]()
	textUnmarshaler = reflect.TypeFor[encoding.TextUnmarshaler]()
)

func decodeValue(path string, raw json.RawMessage, v reflect.Value, errs *ConfigErrors) {
	if reflect.PointerTo(v.Type()).Implements(jsonUnmarshaler) {
		if err := v.Addr().Interface().(json.Unmarshaler).UnmarshalJSON(raw); err != nil {
			errs.Add(path, "%v", err)
		}
		return
	}
	if reflect.PointerTo(v.Type()).Implements(textUnmarshaler) {
		// As encoding/json: a type that reads text (netip.Addr) takes a string.
		var s string
		if json.Unmarshal(raw, &s) != nil {
			errs.Add(path, "is %s, want a string", describeJSON(raw))
		} else if err := v.Addr().Interface().(encoding.TextUnmarshaler).UnmarshalText([]byte(s)); err != nil {
			errs.Add(path, "is not a valid %s", v.Type())
		}
		return
	}
	switch v.Kind() {
	case reflect.Pointer:
		if string(raw) == "null" {
			v.SetZero()
			return
		}
		if v.IsNil() {
			v.Set(reflect.New(v.Type().Elem()))
		}
		decodeValue(path, raw, v.Elem(), errs)
	case reflect.Struct:
		if string(raw) == "null" {
			// `storage:` with nothing under it in YAML: the nested
			// section keeps its defaults, as a null scalar does.
			return
		}
		var obj map[string]json.RawMessage
		if json.Unmarshal(raw, &obj) != nil || obj == nil {
			errs.Add(path, "is %s, want a mapping of keys", describeJSON(raw))
			return
		}
		fields := jsonFields(v.Type())
		for _, key := range sortedJSONKeys(obj) {
			p := joinConfigPath(path, key)
			idx, ok := fields[key]
			if !ok {
				errs.Add(p, "%s", unknownConfigKey(key, fields))
				continue
			}
			f, ok := fieldByIndexAlloc(v, idx)
			if !ok {
				errs.Add(p, "sdk.DecodeConfig: cannot set %q through an unexported embedded pointer", key)
				continue
			}
			decodeValue(p, obj[key], f, errs)
		}
	case reflect.Map:
		if v.Type().Key().Kind() != reflect.String {
			errs.Add(path, "sdk.DecodeConfig: map keys must be strings, not %s", v.Type().Key())
			return
		}
		var obj map[string]json.RawMessage
		if json.Unmarshal(raw, &obj) != nil || obj == nil {
			errs.Add(path, "is %s, want a mapping of keys", describeJSON(raw))
			return
		}
		if v.IsNil() {
			v.Set(reflect.MakeMap(v.Type()))
		}
		for _, key := range sortedJSONKeys(obj) {
			elem := reflect.New(v.Type().Elem()).Elem()
			decodeValue(joinConfigPath(path, key), obj[key], elem, errs)
			v.SetMapIndex(reflect.ValueOf(key).Convert(v.Type().Key()), elem)
		}
	case reflect.Slice:
		var list []json.RawMessage
		if json.Unmarshal(raw, &list) != nil {
			errs.Add(path, "is %s, want a list", describeJSON(raw))
			return
		}
		out := reflect.MakeSlice(v.Type(), len(list), len(list))
		for i, item := range list {
			decodeValue(fmt.Sprintf("%s[%d]", path, i), item, out.Index(i), errs)
		}
		v.Set(out)
	case reflect.Array:
		var list []json.RawMessage
		if json.Unmarshal(raw, &list) != nil {
			errs.Add(path, "is %s, want a list", describeJSON(raw))
			return
		}
		if len(list) > v.Len() {
			errs.Add(path, "has %d items, want at most %d", len(list), v.Len())
			return
		}
		v.SetZero()
		for i, item := range list {
			decodeValue(fmt.Sprintf("%s[%d]", path, i), item, v.Index(i), errs)
		}
	default:
		if err := json.Unmarshal(raw, v.Addr().Interface()); err != nil {
			errs.Add(path, "is %s, want %s", describeJSON(raw), kindName(v.Type()))
		}
	}
}

// jsonFields maps the json key of each exported field of struct type t to
// its index (embedded structs' fields included, as encoding/json does).
func jsonFields(t reflect.Type) map[string][]int {
	out := map[string][]int{}
	for _, f := range reflect.VisibleFields(t) {
		if !f.IsExported() {
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" {
			continue
		}
		if t := f.Type; f.Anonymous && name == "" && (t.Kind() == reflect.Struct || t.Kind() == reflect.Pointer && t.Elem().Kind() == reflect.Struct) {
			continue // its fields are visible on their own
		}
		if name == "" {
			name = f.Name
		}
		out[name] = f.Index
	}
	return out
}

// fieldByIndexAlloc is v.FieldByIndex, allocating the nil embedded pointers
// on the way (as encoding/json does) instead of panicking; false when one
// is unexported and so cannot be allocated.
func fieldByIndexAlloc(v reflect.Value, index []int) (reflect.Value, bool) {
	for i, x := range index {
		if i > 0 && v.Kind() == reflect.Pointer {
			if v.IsNil() {
				if !v.CanSet() {
					return reflect.Value{}, false
				}
				v.Set(reflect.New(v.Type().Elem()))
			}
			v = v.Elem()
		}
		v = v.Field(x)
	}
	return v, true
}

func sortedJSONKeys(m map[string]json.RawMessage) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func joinConfigPath(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

func unknownConfigKey(key string, fields map[string][]int) string {
	names := make([]string, 0, len(fields))
	for n := range fields {
		names = append(names, n)
	}
	sort.Strings(names)
	if best := ClosestName(key, names); best != "" {
		return fmt.Sprintf("unknown key %q; did you mean %q?", key, best)
	}
	if len(names) == 0 {
		return fmt.Sprintf("unknown key %q; this section takes no keys", key)
	}
	return fmt.Sprintf("unknown key %q; valid keys here: %s", key, strings.Join(names, ", "))
}

// describeJSON names a JSON value for an error: its kind, and the text of a
// number, true, false or null. A string's text is never quoted back: a
// value in the wrong place may be a secret (a token written where the
// section wants a mapping such as {env: VAR}), and config check's output
// goes to terminals and CI logs; the path says where it is.
func describeJSON(raw json.RawMessage) string {
	s := strings.TrimSpace(string(raw))
	switch {
	case strings.HasPrefix(s, "{"):
		return "a mapping"
	case strings.HasPrefix(s, "["):
		return "a list"
	case strings.HasPrefix(s, `"`):
		return "a string"
	case len(s) > 40:
		return s[:40] + "…"
	}
	return s
}

func kindName(t reflect.Type) string {
	switch t.Kind() {
	case reflect.Bool:
		return "true or false"
	case reflect.String:
		return "a string"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "a whole number (" + t.Kind().String() + ")"
	case reflect.Float32, reflect.Float64:
		return "a number"
	}
	return t.String()
}

// ClosestName returns the candidate nearest to s by edit distance, or ""
// when none is near enough to be a plausible typo (the bot's own config
// uses the same rule for its did-you-mean hints). A candidate that is s with
// a word added or dropped (keep_count for keep) is near too.
func ClosestName(s string, candidates []string) string {
	for _, c := range candidates {
		ls, lc := strings.ToLower(s), strings.ToLower(c)
		if strings.HasPrefix(ls, lc+"_") || strings.HasPrefix(lc, ls+"_") {
			return c
		}
	}
	best, bestD := "", -1
	for _, c := range candidates {
		d := editDistance(strings.ToLower(s), strings.ToLower(c))
		if bestD < 0 || d < bestD {
			best, bestD = c, d
		}
	}
	if bestD < 0 || bestD > max(2, len(s)/3) {
		return ""
	}
	return best
}

// editDistance is the Levenshtein distance of a and b (bytes).
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// Duration is a config duration: a Go duration ("30s", "2h30m") or a whole
// number of days ("14d"), as the bot's own config writes them. Negative
// values and values above ten years are refused.
type Duration time.Duration

// D returns the value as a time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

// maxConfigDuration is the bot's bound on durations (config.MaxDuration):
// longer values are typos, and day counts that large overflow.
const maxConfigDuration = 3650 * 24 * time.Hour

// UnmarshalJSON reads a duration string.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("is %s, want a duration such as 30s, 20m, 4h or 14d", describeJSON(b))
	}
	v, err := parseConfigDuration(strings.TrimSpace(s))
	if err != nil {
		return err
	}
	*d = Duration(v)
	return nil
}

// MarshalJSON writes the duration in Go syntax.
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(time.Duration(d).String()) }

func parseConfigDuration(s string) (time.Duration, error) {
	tooLong := fmt.Errorf("%q is longer than the maximum of 3650d (ten years)", s)
	if n := len(s); n > 1 && s[n-1] == 'd' {
		days, err := strconv.ParseUint(s[:n-1], 10, 64)
		switch {
		case err == nil && days > uint64(maxConfigDuration/(24*time.Hour)):
			return 0, tooLong
		case err == nil:
			return time.Duration(days) * 24 * time.Hour, nil
		case errors.Is(err, strconv.ErrRange):
			return 0, tooLong
		}
	}
	if strings.HasPrefix(s, "-") {
		return 0, fmt.Errorf("%q is negative; durations are how long (e.g. 30s, 20m, 4h or 14d)", s)
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("%q is not a duration (use e.g. 30s, 20m, 4h or 14d)", s)
	}
	if v > maxConfigDuration {
		return 0, tooLong
	}
	return v, nil
}

// ValidateConfig is the server side of the ValidateConfig RPC.
func (s *server) ValidateConfig(ctx context.Context, req *lifecyclev1.ValidateConfigRequest) (resp *lifecyclev1.ValidateConfigResponse, err error) {
	defer s.recovered("ValidateConfig", &err)
	return &lifecyclev1.ValidateConfigResponse{Problems: ValidateConfigOf(ctx, s.impl, req.GetConfig(), req.GetClusters())}, nil
}

// ValidateConfigOf asks p to validate its section, as the ValidateConfig RPC
// does (sdktest uses it too): a plugin without ConfigValidator accepts only
// an absent section.
func ValidateConfigOf(ctx context.Context, p any, raw []byte, clusters []string) []*lifecyclev1.ConfigProblem {
	v, ok := p.(ConfigValidator)
	if !ok {
		if t := bytes.TrimSpace(raw); len(t) > 0 && string(t) != "null" {
			return []*lifecyclev1.ConfigProblem{{Message: "this plugin takes no configuration; remove its section"}}
		}
		return nil
	}
	var out []*lifecyclev1.ConfigProblem
	configProblems(v.ValidateConfig(ctx, raw, slices.Clone(clusters)), &out)
	return out
}

// configProblems appends err's problems to out: each ConfigErrors in it
// with its paths, and every other error (each of a join) for the section as
// a whole. A join is walked to its end, so an empty ConfigErrors joined
// with another error cannot hide that error (errors.As stops at the first
// ConfigErrors, empty or not).
func configProblems(err error, out *[]*lifecyclev1.ConfigProblem) {
	if err == nil {
		return
	}
	if ce, ok := err.(ConfigErrors); ok {
		for _, p := range ce {
			*out = append(*out, &lifecyclev1.ConfigProblem{Path: p.Path, Message: p.Message})
		}
		return
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		for _, e := range j.Unwrap() {
			configProblems(e, out)
		}
		return
	}
	if u := errors.Unwrap(err); u != nil && errors.As(u, new(ConfigErrors)) {
		configProblems(u, out) // a wrapped ConfigErrors keeps its paths
		return
	}
	*out = append(*out, &lifecyclev1.ConfigProblem{Message: err.Error()})
}
