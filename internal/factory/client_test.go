package factory_test

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/talosbot/talosbot/internal/factory"
	"github.com/talosbot/talosbot/internal/factory/factoryfake"
)

func client(t *testing.T, f *factoryfake.Factory) *factory.Client {
	t.Helper()
	c, err := factory.New(f.URL(), nil)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// The schematic ids are image-factory's own test vectors
// (pkg/schematic/schematic_test.go): the id is the sha256 of the canonical
// document, so the field order and YAML layout must match the factory's.
func TestSchematicIDsMatchTheFactory(t *testing.T) {
	for in, want := range map[string]string{
		`{}`:                                     "376567988ad370138ad8b2698212367b8edcb69b5fd68c80be1f2ec7d603b4ba",
		`customization: {"extraKernelArgs": []}`: "376567988ad370138ad8b2698212367b8edcb69b5fd68c80be1f2ec7d603b4ba",
		`{"customization": {"extraKernelArgs": ["noapic", "nolapic"], "systemExtensions": {}}}`:                     "9cba8e32753f91a16c1837ab8abf356af021706ef284aef07380780177d9a06c",
		`{"customization": {"meta": [{"key": 10, "value": "foo"}], "extraKernelArgs": [], "systemExtensions": {}}}`: "d308a2a5ee2277bed5fbaa104fcbc8d59122abfa737df987a95b4ca763459a7f",
		`{"overlay": {"name": "rpi_generic", "image": "siderolabs/sbc-raspberrypi"},"customization":{}}`:            "ee21ef4a5ef808a9b7484cc0dda0f25075021691c8c09a276591eedb638ea1f9",
		`{"customization":{"secureboot": {"includeWellKnownCertificates": true}}}`:                                  "fa8e05f142a851d3ee568eb0a8e5841eaf6b0ebc8df9a63df16ac5ed2c04f3e6",
	} {
		s, err := factory.ParseSchematic([]byte(in))
		if err != nil {
			t.Fatalf("%s: %v", in, err)
		}
		if id, err := s.ID(); err != nil || id != want {
			t.Errorf("%s: id %s (%v), want %s", in, id, err, want)
		}
	}
	if _, err := factory.ParseSchematic([]byte(`{"customisation": {}}`)); err == nil {
		t.Error("a misspelled key was accepted")
	}
}

func TestVersionsAreListedAsTheFactoryDoes(t *testing.T) {
	f := factoryfake.Start(t, "v1.13.9", "v1.11.6", "v1.14.0-beta.0", "v1.12.6", "v1.13.0-rc.1", "v1.12.5", "v1.14.0-custom")
	if err := f.SetBroken("v1.12.5"); err != nil {
		t.Fatal(err)
	}
	got, err := client(t, f).Versions(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	// Ascending; broken left out; pre-releases only of the newest minor.
	want := []string{"v1.11.6", "v1.12.6", "v1.13.9", "v1.14.0-beta.0"}
	if !slices.Equal(got, want) {
		t.Errorf("versions %v, want %v", got, want)
	}
}

func TestSchematicRoundTripAndNotFound(t *testing.T) {
	f := factoryfake.Start(t, "v1.13.9")
	c := client(t, f)
	ctx := context.Background()
	in := &factory.Schematic{Customization: factory.Customization{SystemExtensions: factory.SystemExtensions{
		OfficialExtensions: []string{"siderolabs/iscsi-tools", "siderolabs/util-linux-tools"}}}}
	id, err := c.CreateSchematic(ctx, in)
	if err != nil {
		t.Fatal(err)
	}
	if want, _ := in.ID(); id != want {
		t.Errorf("factory id %s, local id %s", id, want)
	}
	got, err := c.Schematic(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got.Customization.SystemExtensions.OfficialExtensions, in.Customization.SystemExtensions.OfficialExtensions) {
		t.Errorf("round trip: %+v", got)
	}
	_, err = c.Schematic(ctx, strings.Repeat("0", 64))
	var se *factory.StatusError
	if !errors.Is(err, factory.ErrNotFound) || !errors.As(err, &se) || se.Body != "schematic not found" {
		t.Errorf("unknown schematic: %v", err)
	}
	if _, err := c.CreateSchematic(ctx, &factory.Schematic{Owner: "me"}); err == nil || !strings.Contains(err.Error(), "HTTP 400") {
		t.Errorf("owner on the public factory: %v", err)
	}
}

func TestOfficialExtensions(t *testing.T) {
	f := factoryfake.Start(t, "v1.13.9")
	c := client(t, f)
	ctx := context.Background()
	exts, err := c.OfficialExtensions(ctx, "v1.13.9")
	if err != nil || len(exts) != len(factoryfake.DefaultExtensions) || exts[0].Name != "siderolabs/iscsi-tools" {
		t.Fatalf("extensions %+v, %v", exts, err)
	}
	if _, err := c.OfficialExtensions(ctx, "v1.13.8"); !errors.Is(err, factory.ErrNotFound) {
		t.Errorf("unserved version: %v", err)
	}
}

func TestOutages(t *testing.T) {
	f := factoryfake.Start(t, "v1.13.9")
	c := client(t, f)
	ctx := context.Background()
	f.SetDown(http.StatusServiceUnavailable)
	var se *factory.StatusError
	if _, err := c.Versions(ctx); !errors.As(err, &se) || se.Code != 503 {
		t.Errorf("down: %v", err)
	}
	f.SetDown(0)
	if _, err := c.Versions(ctx); err != nil {
		t.Errorf("back up: %v", err)
	}
	f.Close()
	if _, err := c.Versions(ctx); err == nil {
		t.Error("closed factory answered")
	}
}

func TestNewRefusesABadURL(t *testing.T) {
	for _, u := range []string{"factory.talos.dev", "ftp://x", "http://"} {
		if _, err := factory.New(u, nil); err == nil {
			t.Errorf("%q accepted", u)
		}
	}
}

func TestCheckSchematic(t *testing.T) {
	f := factoryfake.Start(t, "v1.12.6", "v1.13.9")
	c := client(t, f)
	ctx := context.Background()
	longhorn := &factory.Schematic{Customization: factory.Customization{SystemExtensions: factory.SystemExtensions{
		OfficialExtensions: []string{"siderolabs/iscsi-tools", "siderolabs/util-linux-tools"}}}}
	id, err := c.CreateSchematic(ctx, longhorn)
	if err != nil {
		t.Fatal(err)
	}
	if r := c.CheckSchematic(ctx, id, "v1.13.9"); !r.Found || r.Err != nil || len(r.Extensions) != 2 || len(r.Missing) != 0 {
		t.Errorf("all built: %+v", r)
	}
	f.SetExtensions("v1.13.9", "siderolabs/util-linux-tools")
	if r := c.CheckSchematic(ctx, id, "v1.13.9"); !r.Found || !slices.Equal(r.Missing, []string{"siderolabs/iscsi-tools"}) {
		t.Errorf("iscsi-tools not built: %+v", r)
	}
	if r := c.CheckSchematic(ctx, strings.Repeat("a", 64), "v1.13.9"); r.Found || r.Err != nil {
		t.Errorf("unknown schematic: %+v", r)
	}
	if r := c.CheckSchematic(ctx, id, "v1.14.0"); r.Err == nil || !errors.Is(r.Err, factory.ErrNotFound) {
		t.Errorf("unserved version: %+v", r)
	}
	f.SetDown(http.StatusServiceUnavailable)
	if r := c.CheckSchematic(ctx, id, "v1.13.9"); r.Err == nil || r.Found {
		t.Errorf("factory down: %+v", r)
	}
}
