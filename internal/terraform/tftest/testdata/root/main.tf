# Fixture root for talosbot's Terraform integration tests. It uses only the
# built-in terraform provider (terraform_data), so `tofu init` downloads
# nothing. The resource names stand in for the real Talos/Proxmox ones: the
# R5 guard matches resource names as well as types.

variable "secrets_generation" {
  type    = string
  default = "1"
}

variable "node_generation" {
  type    = string
  default = "1"
}

variable "config_revision" {
  type    = string
  default = "1"
}

variable "talos_version" {
  type    = string
  default = "v1.12.6"
}

variable "talos_kubernetes_version" {
  type    = string
  default = "v1.35.2"
}

variable "talosconfig" {
  type      = string
  default   = "context: fixture\ncontexts:\n  fixture: {}\n"
  sensitive = true
}

# Stands in for talos_machine_secrets.this: replacing it is a cluster migration.
resource "terraform_data" "talos_machine_secrets" {
  triggers_replace = var.secrets_generation
}

# Stands in for a node VM (proxmox_virtual_environment_vm.talos_node).
resource "terraform_data" "talos_node" {
  triggers_replace = var.node_generation
}

# An in-place change (machine configuration revision).
resource "terraform_data" "machine_config" {
  input = var.config_revision
}

output "talosconfig" {
  value     = var.talosconfig
  sensitive = true
}

output "talos_kubeconfig" {
  value     = "apiVersion: v1\nkind: Config\nclusters: []\n# fixture-kubeconfig-secret\n"
  sensitive = true
}

output "talos_image_factory_schematic_id" {
  value = "376567988ad370138ad8b2698212367b8edcb69b5fd68c80be1f2ec7d603b4ba"
}

output "talos_longhorn_installer_image" {
  value = "factory.talos.dev/nocloud-installer/613e1592b2da41ae5e265e8789429f22e121aab91cb4deb6bc3c0b6262961245:v1.12.6"
}

output "talos_version" {
  value = var.talos_version
}

output "talos_kubernetes_version" {
  value = var.talos_kubernetes_version
}
