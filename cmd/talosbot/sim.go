//go:build demo

package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"go.yaml.in/yaml/v3"

	"github.com/talosbot/talosbot/config"
	"github.com/talosbot/talosbot/internal/testenv"
	"github.com/talosbot/talosbot/sim"
)

func newSimCmd() *cobra.Command {
	var (
		o       simOptions
		control string
	)
	cmd := &cobra.Command{
		Use:   "sim --dir DIR --control-planes N --workers M [--talos-version v1.12.6] [--kube]",
		Short: "Run a simulated Talos cluster as its own process",
		Long: `Run a simulated Talos cluster: every node is a Talos API server on its own
loopback address with mTLS, control planes are backed by real embedded etcd
members. It writes DIR/talosconfig, DIR/kubeconfig (with --kube, backed by a real
kube-apiserver from the tools cache) and DIR/cluster.yaml, a clusters[] entry to
paste into a talosbot config. Faults are injected through the control API
(see docs/SIMULATOR.md). It runs until SIGINT or SIGTERM, then cleans up.`,
		Example: `  talosbot-demo sim --dir /tmp/sim --control-planes 3 --workers 2
  talosbot-demo sim --dir /tmp/sim --control-planes 1 --workers 1 --kube --control 127.0.0.1:7070
  TALOSCONFIG=/tmp/sim/talosconfig talosctl version   # any Talos client works against it`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			c, err := startSimCluster(ctx, o)
			if err != nil {
				return err
			}
			defer c.close()
			addr, err := c.sim.ServeControl(control)
			if err != nil {
				return fmt.Errorf("--control: %w", err)
			}
			printSim(cmd.OutOrStdout(), o.name, c, addr)
			<-ctx.Done()
			fmt.Fprintln(cmd.OutOrStdout(), "stopping the simulated cluster")
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.dir, "dir", "", "directory for talosconfig, kubeconfig, cluster.yaml and etcd data (required)")
	f.StringVar(&o.name, "name", "sim", "cluster name")
	f.IntVar(&o.controlPlanes, "control-planes", 1, "number of control-plane nodes (each with a real etcd member)")
	f.IntVar(&o.workers, "workers", 0, "number of worker nodes")
	f.StringVar(&o.talosVersion, "talos-version", sim.DefaultTalosVersion, "Talos version every node starts at")
	f.StringVar(&o.kubernetesVersion, "kubernetes-version", sim.DefaultKubernetesVersion, "Kubernetes version of kubelets and control-plane images")
	f.BoolVar(&o.kube, "kube", false, "also start a real kube-apiserver (from `make tools`) with Node objects")
	f.DurationVar(&o.rebootDelay, "reboot-delay", 2*time.Second, "how long a rebooting node stays away")
	f.StringVar(&control, "control", "127.0.0.1:0", "loopback address of the fault-injection control API")
	_ = cmd.MarkFlagRequired("dir")
	return cmd
}

type simOptions struct {
	dir, name, talosVersion, kubernetesVersion string
	controlPlanes, workers                     int
	kube                                       bool
	rebootDelay                                time.Duration
	// distinctNames gives nodes Talos hostnames, Node names and etcd member names that differ
	// from their inventory names (sim.DistinctNames), as on many real clusters.
	distinctNames bool
}

type simCluster struct {
	sim  *sim.Cluster
	kube *testenv.Kube
	dir  string
}

func (c *simCluster) close() {
	_ = c.sim.Close() // also stops the kube-apiserver it started
	if c.kube != nil {
		c.kube.Stop() // idempotent
	}
	// Client configurations are secrets: they must not outlive the cluster.
	_ = os.Remove(filepath.Join(c.dir, "talosconfig"))
	_ = os.Remove(filepath.Join(c.dir, "kubeconfig"))
}

// startSimCluster starts one simulated cluster (and its kube-apiserver) and
// writes its talosconfig, kubeconfig and cluster.yaml into o.dir.
func startSimCluster(ctx context.Context, o simOptions) (*simCluster, error) {
	if o.controlPlanes < 1 || o.workers < 0 {
		return nil, &exitError{code: 2, err: fmt.Errorf("--control-planes must be at least 1 and --workers at least 0")}
	}
	if err := os.MkdirAll(o.dir, 0o700); err != nil {
		return nil, err
	}
	c := &simCluster{dir: o.dir}
	so := sim.Options{Dir: o.dir, Name: o.name, ControlPlanes: o.controlPlanes, Workers: o.workers,
		TalosVersion: o.talosVersion, KubernetesVersion: o.kubernetesVersion, RebootDelay: o.rebootDelay,
		// With a kube-apiserver the sim plays the kubelet: static pods follow the config, and
		// Talos's bootstrap manifests (CoreDNS, flannel, kube-proxy, RBAC) are applied as at
		// bootstrap, so the cluster's Kubernetes is not empty.
		StaticPods: o.kube, BootstrapManifests: o.kube}
	if o.distinctNames {
		so.Naming = sim.DistinctNames
	}
	if o.kube {
		// The apiserver stores into the control planes' etcd, as on Talos; the sim stops it.
		so.KubeOnEtcd = func(ctx context.Context, etcdServers []string) (sim.KubeBackend, error) {
			kctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
			defer cancel()
			k, err := testenv.StartKubeProcessWith(kctx, o.dir, testenv.KubeOptions{EtcdServers: etcdServers})
			if err != nil {
				return sim.KubeBackend{}, fmt.Errorf("start kube-apiserver (run `make tools` first): %w", err)
			}
			c.kube = k
			return sim.KubeBackend{Client: k.Client, Kubeconfig: k.Kubeconfig, Stop: k.Stop}, nil
		}
	}
	s, err := sim.Start(ctx, so)
	if err != nil {
		return nil, fmt.Errorf("start simulator: %w", err)
	}
	c.sim = s
	if c.kube != nil {
		if err := writeSecretFile(filepath.Join(o.dir, "kubeconfig"), c.kube.Kubeconfig); err != nil {
			c.close()
			return nil, err
		}
	}
	if err := writeSecretFile(filepath.Join(o.dir, "talosconfig"), s.Talosconfig()); err != nil {
		c.close()
		return nil, err
	}
	snippet, err := yaml.Marshal([]config.Cluster{c.inventory(o.name, "staging", nil)})
	if err != nil {
		c.close()
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(o.dir, "cluster.yaml"), snippet, 0o600); err != nil {
		c.close()
		return nil, err
	}
	return c, nil
}

// inventory is the cluster as a talosbot config entry.
func (c *simCluster) inventory(name, env string, channels []string) config.Cluster {
	cl := config.Cluster{Name: name, Environment: env, Channels: channels,
		Credentials: config.Credentials{Source: "files", Talosconfig: config.Ref("file:" + filepath.Join(c.dir, "talosconfig"))}}
	if c.kube != nil {
		cl.Credentials.Kubeconfig = config.Ref("file:" + filepath.Join(c.dir, "kubeconfig"))
	}
	for _, n := range c.sim.Nodes() {
		if n.Role == sim.RoleControlPlane {
			cl.Endpoints = append(cl.Endpoints, n.IP)
		}
		cl.Nodes = append(cl.Nodes, config.Node{Name: n.Name, Address: n.IP, Role: n.Role, Host: n.Host, Platform: n.Platform, InstallerClass: n.InstallerClass})
		if cl.Declared == nil && n.Schematic != "" {
			cl.Declared = map[string]string{"schematic_id": n.Schematic}
		}
	}
	return cl
}

func writeSecretFile(path string, data []byte) error {
	if err := os.WriteFile(path, data, 0o600); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return os.Chmod(path, 0o600)
}

func printSim(w io.Writer, name string, c *simCluster, control string) {
	fmt.Fprintf(w, "simulated Talos cluster %q is up\n", name)
	for _, n := range c.sim.Nodes() {
		fmt.Fprintf(w, "  %-10s %-13s %-15s %s", n.Name, n.Role, n.IP+":50000", n.Host)
		if n.Hostname != n.Name || n.NodeName != n.Name {
			fmt.Fprintf(w, "  hostname %s, Node %s, etcd member %s", n.Hostname, n.NodeName, n.EtcdMember)
		}
		fmt.Fprintln(w)
	}
	fmt.Fprintf(w, "talosconfig:  %s\n", filepath.Join(c.dir, "talosconfig"))
	if c.kube != nil {
		fmt.Fprintf(w, "kubeconfig:   %s\n", filepath.Join(c.dir, "kubeconfig"))
	}
	fmt.Fprintf(w, "config entry: %s (paste under clusters:)\n", filepath.Join(c.dir, "cluster.yaml"))
	fmt.Fprintf(w, "fault API:    http://%s/faults  (see docs/SIMULATOR.md)\n", control)
	fmt.Fprintln(w, "press Ctrl-C to stop")
}
