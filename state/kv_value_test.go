package state

import (
	"context"
	"testing"
)

// TestLoadKVIsNilWhenAbsent: an absent value reads as nil without an error
// (callers treat it as "nothing cached"), and SaveKV's value reads back.
func TestLoadKVIsNilWhenAbsent(t *testing.T) {
	s, _, _ := openTest(t)
	ctx := context.Background()
	v, err := s.LoadKV(ctx, "releases", "talos")
	if err != nil || v != nil {
		t.Fatalf("absent value: got %q, %v; want nil, nil", v, err)
	}
	if err := s.SaveKV(ctx, "releases", "talos", []byte(`{"url":"x"}`)); err != nil {
		t.Fatal(err)
	}
	if v, err = s.LoadKV(ctx, "releases", "talos"); err != nil || string(v) != `{"url":"x"}` {
		t.Fatalf("saved value: got %q, %v", v, err)
	}
	if err := s.SaveKV(ctx, "", "talos", nil); err == nil {
		t.Fatal("SaveKV with no bucket succeeded")
	}
}
