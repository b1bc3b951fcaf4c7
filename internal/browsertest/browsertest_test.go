package browsertest

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestArtifactsDir: with TALOSBOT_ARTIFACTS the screenshots of a test go to
// their own directory under it, named after the test (subtests included).
func TestArtifactsDir(t *testing.T) {
	root := t.TempDir()
	t.Setenv("TALOSBOT_ARTIFACTS", root)
	t.Run("approval card/production", func(t *testing.T) {
		dir := ArtifactsDir(t)
		if want := filepath.Join(root, "TestArtifactsDir_approval_card_production"); dir != want {
			t.Fatalf("artifacts dir %s, want %s", dir, want)
		}
		if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
			t.Fatalf("artifacts dir not created: %v", err)
		}
	})
}

// TestLinesAndInViewport on a page made for it: wrapped lines count each,
// cells of a table row count once, a closed <details> is not counted; a
// button below the screen is not in view until scrolled to.
func TestLinesAndInViewport(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		_, _ = w.Write([]byte(`<!doctype html><body style="margin:0;font:16px/20px sans-serif">
<div id="card"><p style="margin:0">one</p><p style="margin:0;width:60px">two words wrap here</p>
<table><tr><td>a</td><td>b</td><td>c</td></tr><tr><td>d</td><td>e</td></tr></table>
<details><summary>folded</summary><p>hidden one</p><p>hidden two</p></details></div>
<div style="height:1500px"></div><button id="low">Approve</button></body>`))
	}))
	defer srv.Close()
	p := Open(t, ctx, srv.URL)
	p.WaitVisible(`#card`)
	// one + "two words wrap here" in 60 px (4 lines) + 2 table rows + the summary.
	if n := p.Lines(`#card`); n != 8 {
		t.Errorf("Lines = %d, want 8", n)
	}
	if b, ok := p.InViewport(`#low`); ok {
		t.Errorf("a button 1500 px down is in view: %+v", b)
	}
	Eval[bool](p, `(document.getElementById("low").scrollIntoView(), true)`)
	if b, ok := p.InViewport(`#low`); !ok {
		t.Errorf("the button scrolled into view is not in view: %+v", b)
	}
}
