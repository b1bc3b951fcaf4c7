// Package factoryfake is a protocol-level Image Factory for tests: a real
// HTTP server that answers the endpoints talosbot uses the way
// image-factory does (internal/frontend/http: meta.go, configuration.go;
// internal/artifacts/versions.go for which versions are listed), with
// switches for outages.
//
//	GET  /versions                          JSON array of "vX.Y.Z", ascending; ?broken=true: the broken ones
//	GET  /version/{v}/extensions/official   JSON array of {name, ref, digest, author, description}; 404 for an unserved version
//	POST /schematics                        YAML/JSON schematic → 201 {"id", "schematic"}; 400 for unknown fields or an owner
//	GET  /schematics/{id}                   200 application/yaml; 404 "schematic not found"
package factoryfake

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"

	"github.com/blang/semver/v4"

	"github.com/talosbot/talosbot/internal/factory"
)

// Factory is the fake. Its zero value is not usable; call Start.
type Factory struct {
	srv *httptest.Server

	mu         sync.Mutex
	versions   []semver.Version
	broken     []semver.Version
	extensions map[string][]factory.Extension // by "vX.Y.Z"; nil: DefaultExtensions
	schematics map[string][]byte
	down       int // 0: up; else the status every request gets
	hits       map[string]int
}

// DefaultExtensions are served for every listed version unless
// SetExtensions says otherwise.
var DefaultExtensions = []string{"siderolabs/iscsi-tools", "siderolabs/qemu-guest-agent", "siderolabs/util-linux-tools"}

// Start serves versions (any order; the fake sorts them as the factory
// does) on a loopback port until the test ends.
func Start(t testing.TB, versions ...string) *Factory {
	t.Helper()
	f := &Factory{schematics: map[string][]byte{}, hits: map[string]int{}}
	if err := f.SetVersions(versions...); err != nil {
		t.Fatalf("factoryfake: %v", err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /versions", f.handleVersions)
	mux.HandleFunc("GET /version/{version}/extensions/official", f.handleExtensions)
	mux.HandleFunc("POST /schematics", f.handleSchematicCreate)
	mux.HandleFunc("GET /schematics/{id}", f.handleSchematicGet)
	f.srv = httptest.NewServer(f.gate(mux))
	t.Cleanup(f.srv.Close)
	return f
}

// URL is the base URL to configure (releases.factory_url).
func (f *Factory) URL() string { return f.srv.URL }

// Close stops the server: connections are refused from now on.
func (f *Factory) Close() { f.srv.Close() }

// SetVersions replaces the served Talos versions.
func (f *Factory) SetVersions(versions ...string) error {
	vs := make([]semver.Version, 0, len(versions))
	for _, s := range versions {
		v, err := semver.ParseTolerant(s)
		if err != nil {
			return fmt.Errorf("version %q: %w", s, err)
		}
		vs = append(vs, v)
	}
	slices.SortFunc(vs, semver.Version.Compare)
	f.mu.Lock()
	f.versions = vs
	f.mu.Unlock()
	return nil
}

// SetBroken marks versions as broken: the factory stops listing them in
// /versions and lists them under ?broken=true.
func (f *Factory) SetBroken(versions ...string) error {
	var vs []semver.Version
	for _, s := range versions {
		v, err := semver.ParseTolerant(s)
		if err != nil {
			return fmt.Errorf("version %q: %w", s, err)
		}
		vs = append(vs, v)
	}
	f.mu.Lock()
	f.broken = vs
	f.mu.Unlock()
	return nil
}

// SetExtensions sets the official extensions served for one version.
func (f *Factory) SetExtensions(version string, names ...string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.extensions == nil {
		f.extensions = map[string][]factory.Extension{}
	}
	f.extensions[version] = extensionsOf(version, names)
}

// SetDown makes every request fail with status (e.g. 503, as the factory
// answers while not ready); 0 brings it back.
func (f *Factory) SetDown(status int) {
	f.mu.Lock()
	f.down = status
	f.mu.Unlock()
}

// Hits is how many requests reached path (e.g. "/versions").
func (f *Factory) Hits(path string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.hits[path]
}

func (f *Factory) gate(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		f.hits[r.URL.Path]++
		down := f.down
		f.mu.Unlock()
		if down != 0 {
			http.Error(w, "service temporarily unavailable", down)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// listed is the factory's filter: broken versions are left out, and a
// pre-release only of the newest minor, and only alpha/beta/rc.N.
func (f *Factory) listed() []semver.Version {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.versions) == 0 {
		return nil
	}
	newest := f.versions[len(f.versions)-1]
	var out []semver.Version
	for _, v := range f.versions {
		if slices.ContainsFunc(f.broken, v.EQ) {
			continue
		}
		if len(v.Pre) > 0 {
			if v.Major != newest.Major || v.Minor != newest.Minor || len(v.Pre) != 2 || !v.Pre[1].IsNumeric() {
				continue
			}
			if p := v.Pre[0].VersionStr; p != "alpha" && p != "beta" && p != "rc" {
				continue
			}
		}
		out = append(out, v)
	}
	return out
}

func tags(vs []semver.Version) []string {
	out := make([]string, 0, len(vs))
	for _, v := range vs {
		out = append(out, "v"+v.String())
	}
	return out
}

func (f *Factory) handleVersions(w http.ResponseWriter, r *http.Request) {
	// Like the factory, no explicit Content-Type: net/http sniffs it.
	if r.URL.Query().Get("broken") == "true" {
		f.mu.Lock()
		b := slices.Clone(f.broken)
		f.mu.Unlock()
		_ = json.NewEncoder(w).Encode(tags(b))
		return
	}
	_ = json.NewEncoder(w).Encode(tags(f.listed()))
}

func (f *Factory) handleExtensions(w http.ResponseWriter, r *http.Request) {
	v, err := semver.ParseTolerant(r.PathValue("version"))
	if err != nil {
		// The factory does not tag this error, so it answers 500.
		http.Error(w, "internal server error", http.StatusInternalServerError)
		return
	}
	if !slices.ContainsFunc(f.listed(), v.Equals) {
		http.Error(w, fmt.Sprintf("version %s is not available", v), http.StatusNotFound)
		return
	}
	tag := "v" + v.String()
	f.mu.Lock()
	exts, ok := f.extensions[tag]
	f.mu.Unlock()
	if !ok {
		exts = extensionsOf(tag, DefaultExtensions)
	}
	if exts == nil {
		exts = []factory.Extension{}
	}
	_ = json.NewEncoder(w).Encode(exts)
}

func extensionsOf(version string, names []string) []factory.Extension {
	out := make([]factory.Extension, 0, len(names))
	for _, n := range names {
		out = append(out, factory.Extension{
			Name: n, Ref: "ghcr.io/" + n + ":" + version,
			Digest: fmt.Sprintf("sha256:%064x", len(n)), Author: "Sidero Labs",
			Description: "fake " + n,
		})
	}
	return out
}

func (f *Factory) handleSchematicCreate(w http.ResponseWriter, r *http.Request) {
	data, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if err != nil {
		http.Error(w, "internal server error", http.StatusInternalServerError)
		return
	}
	s, err := factory.ParseSchematic(data)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	if s.Owner != "" {
		http.Error(w, "owner field is only supported in Enterprise edition", http.StatusBadRequest)
		return
	}
	id, err := s.ID()
	doc, err2 := s.Marshal()
	if err != nil || err2 != nil {
		http.Error(w, "internal server error", http.StatusInternalServerError)
		return
	}
	f.mu.Lock()
	f.schematics[id] = doc
	f.mu.Unlock()
	w.Header().Add("Content-Type", "application/json")
	w.WriteHeader(http.StatusCreated)
	_ = json.NewEncoder(w).Encode(struct {
		ID        string `json:"id"`
		Schematic string `json:"schematic"`
	}{id, string(doc)})
}

func (f *Factory) handleSchematicGet(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	f.mu.Lock()
	doc, ok := f.schematics[id]
	f.mu.Unlock()
	if !ok {
		http.Error(w, "schematic not found", http.StatusNotFound)
		return
	}
	w.Header().Add("Content-Type", "application/yaml")
	_, _ = w.Write(doc)
}
