package factory

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"

	"go.yaml.in/yaml/v3"
)

// Schematic is an Image Factory schematic: the customisation an installer
// image is built from. The field names and their order are the factory's
// wire format (image-factory pkg/schematic): the schematic ID is the
// sha256 of this document marshalled, so the order is part of the ID.
type Schematic struct {
	// Owner exists only in the enterprise edition; the public factory
	// refuses a schematic that sets it.
	Owner         string        `yaml:"owner,omitempty"`
	Overlay       Overlay       `yaml:"overlay,omitempty"`
	Customization Customization `yaml:"customization"`
}

// Customization is the Talos image customisation.
type Customization struct {
	EmbeddedMachineConfiguration string           `yaml:"embeddedMachineConfiguration,omitempty"`
	ExtraKernelArgs              []string         `yaml:"extraKernelArgs,omitempty"`
	Meta                         []MetaValue      `yaml:"meta,omitempty"`
	SystemExtensions             SystemExtensions `yaml:"systemExtensions,omitempty"`
	Bootloader                   string           `yaml:"bootloader,omitempty"`
	SecureBoot                   SecureBoot       `yaml:"secureboot,omitempty"`
	DiskImage                    DiskImage        `yaml:"diskImage,omitempty"`
}

// MetaValue is one initial META key.
type MetaValue struct {
	Key   uint8  `yaml:"key"`
	Value string `yaml:"value"`
}

// SystemExtensions names the official extensions baked into the image
// (e.g. siderolabs/iscsi-tools for Longhorn workers).
type SystemExtensions struct {
	OfficialExtensions []string `yaml:"officialExtensions,omitempty"`
}

// Overlay is an SBC overlay.
type Overlay struct {
	Image   string         `yaml:"image"`
	Name    string         `yaml:"name"`
	Options map[string]any `yaml:"options,omitempty"`
}

// SecureBoot holds the secure boot options.
type SecureBoot struct {
	EnrollKeys                   string `yaml:"enrollKeys,omitempty"`
	IncludeWellKnownCertificates bool   `yaml:"includeWellKnownCertificates,omitempty"`
}

// DiskImage holds the disk image options.
type DiskImage struct {
	SectorSize uint `yaml:"sectorSize,omitempty"`
}

// ParseSchematic decodes a schematic document (YAML or JSON). Unknown
// fields are errors, as they are for the factory: a misspelled key would
// otherwise change the image silently.
func ParseSchematic(data []byte) (*Schematic, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	var s Schematic
	if err := dec.Decode(&s); err != nil {
		return nil, fmt.Errorf("schematic: %w", err)
	}
	return &s, nil
}

// Marshal is the schematic's canonical document.
func (s *Schematic) Marshal() ([]byte, error) {
	out, err := yaml.Marshal(s)
	if err != nil {
		return nil, fmt.Errorf("marshal schematic: %w", err)
	}
	return out, nil
}

// ID is the schematic's content address: hex sha256 of the canonical
// document, the id that appears in factory.talos.dev/<platform>-installer/<id>:<version>.
func (s *Schematic) ID() (string, error) {
	b, err := s.Marshal()
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:]), nil
}
