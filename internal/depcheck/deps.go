// Package depcheck pins the module graph while packages are being written.
package depcheck

import (
	_ "github.com/bwmarrin/discordgo"
	_ "github.com/chromedp/chromedp"
	_ "github.com/hashicorp/go-plugin"
	_ "github.com/hashicorp/terraform-exec/tfexec"
	_ "github.com/hashicorp/terraform-json"
	_ "github.com/prometheus/client_golang/prometheus"
	_ "github.com/siderolabs/talos/pkg/machinery/api/machine"
	_ "github.com/siderolabs/talos/pkg/machinery/client"
	_ "github.com/siderolabs/talos/pkg/machinery/compatibility"
	_ "github.com/siderolabs/talos/pkg/machinery/config/configloader"
	_ "github.com/slack-go/slack/socketmode"
	_ "go.etcd.io/bbolt"
	_ "go.etcd.io/etcd/etcdutl/v3/snapshot"
	_ "go.etcd.io/etcd/server/v3/embed"
	_ "gopkg.in/yaml.v3"
	_ "k8s.io/client-go/dynamic"
	_ "k8s.io/client-go/kubernetes"
)
