package builtin

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

const pluginsImport = "github.com/talosbot/talosbot/plugins/"

// pluginDirs returns the plugin packages under plugins/ (by import path): the
// directories one level down whose package declares `func New() sdk.Plugin`.
// Shared code (cluster, sdk, proto, host, catalog, builtin) declares none.
func pluginDirs(t *testing.T) map[string]string {
	t.Helper()
	entries, err := os.ReadDir("..")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		dir := filepath.Join("..", e.Name())
		files, _ := filepath.Glob(filepath.Join(dir, "*.go"))
		for _, f := range files {
			if strings.HasSuffix(f, "_test.go") {
				continue
			}
			af, err := parser.ParseFile(token.NewFileSet(), f, nil, parser.SkipObjectResolution)
			if err != nil {
				t.Fatal(err)
			}
			for _, d := range af.Decls {
				if fd, ok := d.(*ast.FuncDecl); ok && fd.Recv == nil && fd.Name.Name == "New" && isSDKPlugin(fd.Type.Results) {
					out[pluginsImport+e.Name()] = dir
				}
			}
		}
	}
	return out
}

func isSDKPlugin(fl *ast.FieldList) bool {
	if fl == nil || len(fl.List) != 1 {
		return false
	}
	sel, ok := fl.List[0].Type.(*ast.SelectorExpr)
	if !ok {
		return false
	}
	x, ok := sel.X.(*ast.Ident)
	return ok && x.Name == "sdk" && sel.Sel.Name == "Plugin"
}

// TestPluginsDoNotImportEachOther: a plugin's code and tests import shared
// packages (plugins/cluster/..., plugins/sdk, internal/...), never another
// plugin, so what two plugins share lives in one place that neither owns.
func TestPluginsDoNotImportEachOther(t *testing.T) {
	plugins := pluginDirs(t)
	if len(plugins) < len(catalogue()) {
		t.Fatalf("found %d plugin packages under plugins/, the catalogue has %d: %v", len(plugins), len(catalogue()), plugins)
	}
	for pkg, dir := range plugins {
		err := filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") {
				return err
			}
			af, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ImportsOnly)
			if err != nil {
				return err
			}
			for _, im := range af.Imports {
				p, _ := strconv.Unquote(im.Path.Value)
				for other := range plugins {
					if other != pkg && (p == other || strings.HasPrefix(p, other+"/")) {
						t.Errorf("%s imports the plugin %s: move what they share to a shared package (e.g. plugins/cluster/...)", path, other)
					}
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
}
