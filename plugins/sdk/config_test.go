package sdk

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	lifecyclev1 "github.com/talosbot/talosbot/plugins/sdk/proto/lifecycle/v1"
)

type testOffsite struct {
	Bucket string `json:"bucket"`
	Port   int    `json:"port"`
}

type testSection struct {
	Keep     int                 `json:"keep"`
	MaxAge   Duration            `json:"max_age"`
	Offsite  *testOffsite        `json:"offsite"`
	Schedule map[string]string   `json:"schedule"`
	Lists    []testOffsite       `json:"lists"`
	Flag     bool                `json:"flag"`
	Nested   map[string]Duration `json:"nested"`
}

func TestDecodeConfigNamesEveryProblemByPath(t *testing.T) {
	raw := `{"keep_count": 3, "max_age": "-1h", "offsite": {"bucket": 7, "prot": 1},
		"schedule": {"prod": 5}, "lists": [{"bucket": "a"}, {"buckt": "b"}], "flag": "yes", "nested": {"a": "14x"}}`
	var c testSection
	err := DecodeConfig([]byte(raw), &c)
	var ce ConfigErrors
	if !errors.As(err, &ce) {
		t.Fatalf("want ConfigErrors, got %v", err)
	}
	got := map[string]string{}
	for _, p := range ce {
		got[p.Path] = p.Message
	}
	want := map[string]string{
		"keep_count":     `unknown key "keep_count"; did you mean "keep"?`,
		"max_age":        "negative",
		"offsite.bucket": "want a string",
		"offsite.prot":   `did you mean "port"?`,
		"schedule.prod":  "want a string",
		"lists[1].buckt": `did you mean "bucket"?`,
		"flag":           "want true or false",
		"nested.a":       "not a duration",
	}
	for path, sub := range want {
		if !strings.Contains(got[path], sub) {
			t.Errorf("%s: got %q, want it to contain %q", path, got[path], sub)
		}
	}
	if len(ce) != len(want) {
		t.Errorf("got %d problems, want %d: %v", len(ce), len(want), ce)
	}
}

func TestDecodeConfigKeepsDefaultsAndDecodes(t *testing.T) {
	c := testSection{Keep: 10, MaxAge: Duration(time.Hour)}
	if err := DecodeConfig(nil, &c); err != nil || c.Keep != 10 {
		t.Fatalf("absent section: %v %+v", err, c)
	}
	if err := DecodeConfig([]byte(`{"max_age": "14d", "offsite": {"bucket": "b"}, "lists": [{"port": 9}]}`), &c); err != nil {
		t.Fatal(err)
	}
	if c.Keep != 10 || c.MaxAge.D() != 14*24*time.Hour || c.Offsite == nil || c.Offsite.Bucket != "b" || len(c.Lists) != 1 || c.Lists[0].Port != 9 {
		t.Fatalf("decoded %+v", c)
	}
	if err := DecodeConfig([]byte(`[1]`), &c); err == nil || !strings.Contains(err.Error(), "want a mapping") {
		t.Fatalf("a list as the section: %v", err)
	}
}

type noConfigPlugin struct{}

type configPlugin struct{}

func (configPlugin) ValidateConfig(_ context.Context, raw []byte, clusters []string) error {
	var c testSection
	if err := DecodeConfig(raw, &c); err != nil {
		return err
	}
	if c.Keep > len(clusters) {
		return errors.New("keep exceeds the clusters")
	}
	return nil
}

func TestValidateConfigOf(t *testing.T) {
	ctx := context.Background()
	if p := ValidateConfigOf(ctx, noConfigPlugin{}, nil, nil); p != nil {
		t.Fatalf("no section, no validator: %v", p)
	}
	if p := ValidateConfigOf(ctx, noConfigPlugin{}, []byte(`{"a":1}`), nil); len(p) != 1 || !strings.Contains(p[0].GetMessage(), "takes no configuration") {
		t.Fatalf("a section for a plugin without a validator must be refused: %v", p)
	}
	if p := ValidateConfigOf(ctx, configPlugin{}, []byte(`{"kep":1}`), nil); len(p) != 1 || p[0].GetPath() != "kep" {
		t.Fatalf("path-named problem: %v", p)
	}
	if p := ValidateConfigOf(ctx, configPlugin{}, []byte(`{"keep":2}`), []string{"a"}); len(p) != 1 || p[0].GetPath() != "" || !strings.Contains(p[0].GetMessage(), "exceeds") {
		t.Fatalf("whole-section problem: %v", p)
	}
	if p := ValidateConfigOf(ctx, configPlugin{}, []byte(`{"keep":1}`), []string{"a"}); p != nil {
		t.Fatalf("valid: %v", p)
	}
}

// TestDecodeConfigQuotesNoStringBack: a string where the section wants a
// mapping, a list or a number is named by its kind, never its text: it may
// be a secret written in the wrong place, and config check's output goes to
// CI logs.
func TestDecodeConfigQuotesNoStringBack(t *testing.T) {
	const secret = "ghp_s3cr3tT0kenValue0123456789abcdefghij"
	var c testSection
	err := DecodeConfig([]byte(`{"offsite": "`+secret+`", "keep": "`+secret+`", "lists": "`+secret+`"}`), &c)
	if err == nil {
		t.Fatal("want errors")
	}
	if strings.Contains(err.Error(), "s3cr3t") {
		t.Fatalf("the error quotes the value back: %v", err)
	}
	for _, want := range []string{"offsite: is a string, want a mapping", "keep: is a string, want a whole number", "lists: is a string, want a list"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("got %v, want it to contain %q", err, want)
		}
	}
}

// TestDecodeConfigArraysAreStrict: a fixed-size array of structs is decoded
// item by item like a slice, so an unknown key inside one is an error (it
// went to encoding/json, which drops unknown keys).
func TestDecodeConfigArraysAreStrict(t *testing.T) {
	var c struct {
		Pair [2]testOffsite `json:"pair"`
	}
	err := DecodeConfig([]byte(`{"pair": [{"bucket": "a"}, {"buckt": "b"}]}`), &c)
	if err == nil || !strings.Contains(err.Error(), `pair[1].buckt: unknown key "buckt"`) {
		t.Fatalf("got %v, want the unknown key in the array named", err)
	}
	if err := DecodeConfig([]byte(`{"pair": [{}, {}, {}]}`), &c); err == nil || !strings.Contains(err.Error(), "at most 2") {
		t.Fatalf("three items for two: %v", err)
	}
	if err := DecodeConfig([]byte(`{"pair": [{"port": 1}]}`), &c); err != nil || c.Pair[0].Port != 1 {
		t.Fatalf("valid: %v %+v", err, c)
	}
}

type TestEmbedded struct {
	Region string `json:"region"`
}

// TestDecodeConfigEmbeddedPointer: the fields of an embedded *struct are
// the section's keys, as with encoding/json: the nil pointer is allocated
// (DecodeConfig panicked on it, and the plugin's ValidateConfig with it),
// and the embedded type's own name is no key.
func TestDecodeConfigEmbeddedPointer(t *testing.T) {
	var c struct {
		*TestEmbedded
		Keep int `json:"keep"`
	}
	if err := DecodeConfig([]byte(`{"region": "eu", "keep": 1}`), &c); err != nil || c.TestEmbedded == nil || c.Region != "eu" {
		t.Fatalf("got %v %+v", err, c)
	}
	if err := DecodeConfig([]byte(`{"TestEmbedded": {}}`), &c); err == nil || !strings.Contains(err.Error(), "unknown key") {
		t.Fatalf("the embedded type's name must not be a key: %v", err)
	}
}

// TestDecodeConfigTextTypes: a field whose type reads text (netip.Addr)
// takes a string, as with encoding/json; it was refused as "want a mapping
// of keys" because the type is a struct.
func TestDecodeConfigTextTypes(t *testing.T) {
	var c struct {
		Addr netip.Addr `json:"addr"`
	}
	if err := DecodeConfig([]byte(`{"addr": "10.0.0.1"}`), &c); err != nil || c.Addr.String() != "10.0.0.1" {
		t.Fatalf("got %v %+v", err, c)
	}
	if err := DecodeConfig([]byte(`{"addr": "10.0.0"}`), &c); err == nil || !strings.Contains(err.Error(), "addr: is not a valid netip.Addr") {
		t.Fatalf("a bad address: %v", err)
	}
	if err := DecodeConfig([]byte(`{"addr": 7}`), &c); err == nil || !strings.Contains(err.Error(), "addr: is 7, want a string") {
		t.Fatalf("a number: %v", err)
	}
}

type joinPlugin struct{}

// ValidateConfig collects its problems in a ConfigErrors and joins another
// check's error to it without calling Err: the ConfigErrors is empty but
// not nil.
func (joinPlugin) ValidateConfig(_ context.Context, raw []byte, _ []string) error {
	var errs ConfigErrors
	if strings.Contains(string(raw), "bad") {
		errs.Add("greeting", "is bad")
	}
	return errors.Join(errs, errors.New("the clusters have no staging"))
}

// TestValidateConfigOfWalksJoins: an error joined to an empty ConfigErrors
// is still a problem; errors.As stopped at the empty ConfigErrors and
// reported none, so the section was accepted.
func TestValidateConfigOfWalksJoins(t *testing.T) {
	ctx := context.Background()
	p := ValidateConfigOf(ctx, joinPlugin{}, []byte(`{}`), nil)
	if len(p) != 1 || p[0].GetPath() != "" || !strings.Contains(p[0].GetMessage(), "no staging") {
		t.Fatalf("got %v, want the joined error", p)
	}
	p = ValidateConfigOf(ctx, joinPlugin{}, []byte(`{"bad":1}`), nil)
	if len(p) != 2 || p[0].GetPath() != "greeting" || p[1].GetPath() != "" {
		t.Fatalf("got %v, want the path-named problem and the joined error", p)
	}
	wrapped := fmt.Errorf("plugins.x: %w", ConfigErrors{{Path: "keep", Message: "too big"}})
	var out []*lifecyclev1.ConfigProblem
	configProblems(wrapped, &out)
	if len(out) != 1 || out[0].GetPath() != "keep" {
		t.Fatalf("a wrapped ConfigErrors keeps its paths: %v", out)
	}
}

// A nested section written empty in YAML (`storage:`) arrives as null and
// keeps its defaults, as a null scalar does.
func TestDecodeConfigNullNestedSectionKeepsDefaults(t *testing.T) {
	type inner struct {
		Wait Duration `json:"wait"`
	}
	var c struct {
		Inner inner `json:"inner"`
	}
	c.Inner.Wait = Duration(time.Hour)
	if err := DecodeConfig([]byte(`{"inner": null}`), &c); err != nil || c.Inner.Wait.D() != time.Hour {
		t.Fatalf("null inner: %+v %v, want the default kept", c, err)
	}
	if err := DecodeConfig([]byte(`{"inner": 3}`), &c); err == nil {
		t.Fatal("a number for a mapping decoded")
	}
}
