package main

import (
	"os"
	"path/filepath"
	"testing"
)

// A regenerated report keeps the hand-written record below the marker, and a report without one
// keeps nothing (the generated part is always rewritten).
func TestKeptTail(t *testing.T) {
	dir := t.TempDir()
	with := filepath.Join(dir, "with.md")
	record := keepMarker + "\n\n## Flake check\n\n| a | b |\n"
	if err := os.WriteFile(with, []byte("# Benchmarks\n\nold rows\n\n"+record), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := keptTail(with); got != "\n"+record {
		t.Fatalf("kept %q, want %q", got, "\n"+record)
	}

	without := filepath.Join(dir, "without.md")
	if err := os.WriteFile(without, []byte("# Benchmarks\n\nold rows\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := keptTail(without); got != "" {
		t.Fatalf("kept %q from a report without the marker", got)
	}
	if got := keptTail(filepath.Join(dir, "missing.md")); got != "" {
		t.Fatalf("kept %q from a missing report", got)
	}
}

// TestMedians: a figure run several times (-count 5) is reported as the
// median of its runs, not the last one.
func TestMedians(t *testing.T) {
	got := medians(map[string]map[string][]float64{
		"host/BenchmarkColdStart": {"ns/op": {90, 20, 30, 25, 400}},
		"host/BenchmarkPlanCall":  {"ns/op": {4, 1, 3, 2}},
	})
	if v := got["host/BenchmarkColdStart"]["ns/op"]; v != 30 {
		t.Errorf("odd count: median %v, want 30", v)
	}
	if v := got["host/BenchmarkPlanCall"]["ns/op"]; v != 2.5 {
		t.Errorf("even count: median %v, want 2.5", v)
	}
}
