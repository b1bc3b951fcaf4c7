package talos

import (
	"fmt"
	"strings"

	"github.com/talosbot/talosbot/plugins/cluster"
	"github.com/talosbot/talosbot/plugins/sdk"
)

// FactoryRegistry is the Image Factory registry the installers come from.
const FactoryRegistry = "factory.talos.dev"

// Installer classes (Node.InstallerClass).
const (
	ClassDefault  = "default"
	ClassLonghorn = "longhorn"
)

// Declared keys (Cluster.declared) the installer derivation reads: the
// Terraform outputs talos_image_factory_schematic_id and
// talos_longhorn_installer_image, under the names the host gives them.
const (
	DeclaredSchematic         = "schematic_id"
	DeclaredLonghornSchematic = "longhorn_schematic_id"
	DeclaredLonghornInstaller = "longhorn_installer_image"
	DeclaredVersion           = "talos_version"
)

// Installer is a parsed Image Factory installer reference,
// factory.talos.dev/<platform>-installer/<schematic>:<tag>. The generic
// installer (factory.talos.dev/installer/…) has Platform "metal"; a
// non-factory image has Schematic "".
type Installer struct {
	Registry, Platform, Schematic, Tag string
}

// Ref renders the reference.
func (i Installer) Ref() string {
	if i.Registry != FactoryRegistry {
		return i.Registry + ":" + i.Tag
	}
	name := "installer"
	if i.Platform != "" && i.Platform != "metal" {
		name = i.Platform + "-installer"
	}
	return fmt.Sprintf("%s/%s/%s:%s", FactoryRegistry, name, i.Schematic, i.Tag)
}

// PlatformName says "nocloud-installer" or "generic installer".
func (i Installer) PlatformName() string {
	if i.Registry != FactoryRegistry {
		return "non-factory image " + i.Registry
	}
	if i.Platform == "" || i.Platform == "metal" {
		return "the generic installer"
	}
	return i.Platform + "-installer"
}

// ParseInstaller parses an installer image reference. Non-factory images
// (ghcr.io/siderolabs/installer:v1.12.6) keep the repository in Registry.
func ParseInstaller(ref string) (Installer, error) {
	name, tag := ref, ""
	if i := strings.LastIndex(ref, ":"); i > strings.LastIndex(ref, "/") {
		name, tag = ref[:i], ref[i+1:]
	}
	if tag == "" {
		return Installer{}, fmt.Errorf("installer image %q has no tag", ref)
	}
	parts := strings.Split(name, "/")
	if parts[0] != FactoryRegistry {
		return Installer{Registry: name, Tag: tag}, nil
	}
	if len(parts) != 3 || parts[2] == "" {
		return Installer{}, fmt.Errorf("installer image %q is not %s/<platform>-installer/<schematic>:<version>", ref, FactoryRegistry)
	}
	inst := Installer{Registry: FactoryRegistry, Schematic: parts[2], Tag: tag}
	switch {
	case parts[1] == "installer":
		inst.Platform = "metal"
	case strings.HasSuffix(parts[1], "-installer"):
		inst.Platform = strings.TrimSuffix(parts[1], "-installer")
	default:
		return Installer{}, fmt.Errorf("installer image %q: %q is not an installer", ref, parts[1])
	}
	return inst, nil
}

// DeclaredSchematicFor returns the declared schematic of an installer class
// (R13: schematic from the Terraform outputs) and where it came from.
func DeclaredSchematicFor(class string, declared map[string]string) (string, string, error) {
	switch class {
	case "", ClassDefault:
		if s := declared[DeclaredSchematic]; s != "" {
			return s, DeclaredSchematic, nil
		}
		return "", "", fmt.Errorf("no declared %s: expose the Terraform output talos_image_factory_schematic_id to the bot (credentials.terraform.outputs or declared)", DeclaredSchematic)
	case ClassLonghorn:
		if s := declared[DeclaredLonghornSchematic]; s != "" {
			return s, DeclaredLonghornSchematic, nil
		}
		if img := declared[DeclaredLonghornInstaller]; img != "" {
			inst, err := ParseInstaller(img)
			if err != nil || inst.Schematic == "" {
				return "", "", fmt.Errorf("declared %s %q is not an Image Factory installer: %v", DeclaredLonghornInstaller, img, err)
			}
			return inst.Schematic, DeclaredLonghornInstaller, nil
		}
		return "", "", fmt.Errorf("no declared %s or %s: expose the Terraform output talos_longhorn_installer_image to the bot", DeclaredLonghornSchematic, DeclaredLonghornInstaller)
	}
	return "", "", fmt.Errorf("installer class %q is unknown; use %q or %q in the inventory", class, ClassDefault, ClassLonghorn)
}

// TargetInstaller is rule R13: the installer a node upgrades to is
// factory.talos.dev/<platform>-installer/<schematic of its class>:<target>,
// with the platform from the inventory (or, when the inventory has none, the
// one the node reports).
func TargetInstaller(st NodeState, declared map[string]string, target Release) (Installer, error) {
	schematic, _, err := DeclaredSchematicFor(st.Node.InstallerClass, declared)
	if err != nil { // rule:R13
		return Installer{}, &sdk.Refusal{Rule: "R13", Reason: fmt.Sprintf("%s (class %s): %v", st.Node.Name, classOf(st.Node), err),
			Fix: "declare the schematic of every installer class in use"}
	}
	platform := st.Node.Platform
	if platform == "" {
		platform = st.Platform
	}
	return Installer{Registry: FactoryRegistry, Platform: platform, Schematic: schematic, Tag: target.String()}, nil
}

func classOf(n cluster.Node) string {
	if n.InstallerClass == "" {
		return ClassDefault
	}
	return n.InstallerClass
}

// CheckInstallerChange is rule R14: the new installer must keep the node's
// platform (a Proxmox node on nocloud-installer must never get the generic
// installer, which can rename eth0 to ens18 and cut the node off) and its
// schematic (a Longhorn node keeps the Longhorn schematic with its system
// extensions). The running platform is what the node reports; the running
// schematic is the one in its machine configuration's install image.
func CheckInstallerChange(st NodeState, next Installer) *sdk.Refusal {
	var running Installer
	if st.Image != "" {
		cur, err := ParseInstaller(st.Image)
		if err != nil {
			return &sdk.Refusal{Rule: "R14", Reason: fmt.Sprintf("%s: cannot tell its installer platform and schematic: %v", st.Node.Name, err),
				Fix: "check machine.install.image of the node"}
		}
		running = cur
	}
	if running.Registry != "" && running.Registry != FactoryRegistry {
		return &sdk.Refusal{Rule: "R14",
			Reason: fmt.Sprintf("%s installs from %s, not from the Image Factory; switching it to %s changes its installer", st.Node.Name, running.Registry, next.PlatformName()),
			Fix:    "move the node to its declared Image Factory installer with a same-version Terraform change first"}
	}
	platform := st.Platform // what the node itself reports wins over the image name
	if platform == "" {
		platform = running.Platform
	}
	if platform == "" {
		platform = "metal"
	}
	nextPlatform := next.Platform
	if nextPlatform == "" {
		nextPlatform = "metal"
	}
	if platform != nextPlatform { // rule:R14-platform
		return &sdk.Refusal{Rule: "R14",
			Reason: fmt.Sprintf("%s runs on platform %s but the upgrade would install %s (%s): the platform would change, which on Proxmox can rename eth0 to ens18 and cut the node off",
				st.Node.Name, platform, next.PlatformName(), next.Ref()),
			Fix: fmt.Sprintf("set platform: %s for %s in the inventory (Proxmox nodes use nocloud-installer, never the generic installer)", platform, st.Node.Name)}
	}
	if running.Schematic != "" && running.Schematic != next.Schematic { // rule:R14-schematic
		return &sdk.Refusal{Rule: "R14",
			Reason: fmt.Sprintf("%s runs schematic %s but its installer class %q declares %s: the upgrade would change its schematic (system extensions)",
				st.Node.Name, short(running.Schematic), classOf(st.Node), short(next.Schematic)),
			Fix: "check the node's installer_class in the inventory (Longhorn workers use the Longhorn installer's schematic); change extensions in a separate same-version Terraform change, not in an upgrade"}
	}
	return nil
}

func short(s string) string {
	if len(s) > 12 {
		return s[:12] + "…"
	}
	return s
}
