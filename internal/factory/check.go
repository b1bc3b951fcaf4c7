package factory

import (
	"context"
	"errors"
	"slices"
)

// SchematicReport is what the factory says about one declared schematic
// and a target version: whether it knows the schematic (an unknown one
// means the derived installer factory.talos.dev/<platform>-installer/<id>:<v>
// cannot be pulled, R13), and whether every official extension it asks for
// is built for the version (an installer without, say, iscsi-tools breaks
// Longhorn workers, R14).
type SchematicReport struct {
	ID, Version string
	Found       bool
	// Extensions are the official extensions the schematic asks for;
	// Missing those the factory does not build for Version.
	Extensions, Missing []string
	// Err is why the factory could not answer (then nothing is known).
	Err error
}

// CheckSchematic asks the factory about schematic id for version.
func (c *Client) CheckSchematic(ctx context.Context, id, version string) SchematicReport {
	r := SchematicReport{ID: id, Version: version}
	s, err := c.Schematic(ctx, id)
	switch {
	case errors.Is(err, ErrNotFound):
		return r
	case err != nil:
		r.Err = err
		return r
	}
	r.Found = true
	r.Extensions = slices.Clone(s.Customization.SystemExtensions.OfficialExtensions)
	if len(r.Extensions) == 0 {
		return r
	}
	exts, err := c.OfficialExtensions(ctx, version)
	if err != nil {
		r.Err = err
		return r
	}
	built := map[string]bool{}
	for _, e := range exts {
		built[e.Name] = true
	}
	for _, want := range r.Extensions {
		if !built[want] {
			r.Missing = append(r.Missing, want)
		}
	}
	return r
}
