package versions

import "testing"

func mustParse(t *testing.T, s string) Version {
	t.Helper()
	v, err := Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// TestSkipsMinor: a patch of the same minor and any release of the next
// minor are one step; two minors up, or another major, skip.
func TestSkipsMinor(t *testing.T) {
	for _, c := range []struct {
		from, to string
		skips    bool
	}{
		{"v1.12.1", "v1.12.6", false},
		{"v1.12.6", "v1.13.0", false},
		{"v1.12.0", "v1.13.9", false},
		{"v1.12.6", "v1.14.0", true},
		{"v1.12.6", "v2.0.0", true},
		{"1.35.2", "1.36.3", false},
		{"1.34.1", "1.36.3", true},
	} {
		if got := SkipsMinor(mustParse(t, c.from), mustParse(t, c.to)); got != c.skips {
			t.Errorf("SkipsMinor(%s, %s) = %v, want %v", c.from, c.to, got, c.skips)
		}
	}
	if n := NextMinor(mustParse(t, "v1.13.9")); n.Tag() != "v1.14.0" {
		t.Errorf("NextMinor(v1.13.9) = %s", n.Tag())
	}
}

// TestIsLatestPatch: the newest known patch of the minor is latest; an
// older one is not and names the newest; an unknown minor is not ok.
func TestIsLatestPatch(t *testing.T) {
	known := ParseAll([]string{"v1.13.9", "v1.13.2", "v1.14.0-beta.0", "v1.12.6"})
	if len(known) != 3 {
		t.Fatalf("ParseAll kept %v; want the three releases", Tags(known))
	}
	if n, latest, ok := IsLatestPatch(known, mustParse(t, "v1.13.9")); !latest || !ok || n.Tag() != "v1.13.9" {
		t.Errorf("v1.13.9: %s %v %v", n.Tag(), latest, ok)
	}
	if n, latest, ok := IsLatestPatch(known, mustParse(t, "v1.13.2")); latest || !ok || n.Tag() != "v1.13.9" {
		t.Errorf("v1.13.2: %s %v %v", n.Tag(), latest, ok)
	}
	if _, latest, ok := IsLatestPatch(known, mustParse(t, "v1.11.0")); latest || ok {
		t.Errorf("v1.11.0: latest %v ok %v", latest, ok)
	}
	if got := Tags(LatestPerMinor(known)); len(got) != 2 || got[0] != "v1.12.6" || got[1] != "v1.13.9" {
		t.Errorf("LatestPerMinor = %v", got)
	}
}

// TestParseRefusesSigns: a component is digits only. strconv.Atoi takes a
// sign, so "v1.13.+9" parsed as v1.13.9 and a target that is no release
// tag was accepted and respelt.
func TestParseRefusesSigns(t *testing.T) {
	for _, s := range []string{"v1.13.+9", "v+1.13.9", "v1.-0.9", "v1.13.-9", "v1..9"} {
		if v, err := Parse(s); err == nil {
			t.Errorf("Parse(%q) = %v, want an error", s, v)
		}
	}
	if v, err := Parse("v1.13.9"); err != nil || v.Tag() != "v1.13.9" {
		t.Fatalf("Parse(v1.13.9) = %v, %v", v, err)
	}
}
