package sim

import (
	"context"
	"testing"
	"time"
)

// TestResourceSetsUnique: every served type is registered once (a second registration would
// fail every boot's state) and every node writes each resource once per refresh.
func TestResourceSetsUnique(t *testing.T) {
	seen := map[string]bool{}

	for _, r := range cosiResourceTypes() {
		typ := r.ResourceDefinition().Type
		if seen[typ] {
			t.Fatalf("resource type %s is served twice", typ)
		}

		seen[typ] = true
	}

	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()

	if _, err := newBootState(ctx); err != nil {
		t.Fatalf("boot state: %v", err)
	}

	c, err := Start(ctx, Options{Dir: t.TempDir(), ControlPlanes: 1, Workers: 1})
	if err != nil {
		t.Fatal(err)
	}

	defer c.Close() //nolint:errcheck

	for _, n := range c.nodes {
		keys := map[resourceKey]bool{}

		for _, d := range n.desiredResources(ctx, &configCache{}) {
			md := d.res.Metadata()
			key := resourceKey{md.Namespace(), md.Type(), md.ID()}

			if keys[key] {
				t.Fatalf("%s writes %s twice", n.info.Name, md)
			}

			keys[key] = true

			if !seen[md.Type()] {
				t.Fatalf("%s writes %s, a type that is not registered", n.info.Name, md)
			}
		}
	}
}
