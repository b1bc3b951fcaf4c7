// Package certinfo is the built-in plugin behind `/talos certs [cluster]`
// (read-only): every certificate the bot can see, with its expiry and days
// left, soonest first.
//
//   - The bot's own client certificates: the talosconfig's (its context's
//     crt) and the kubeconfig's (the current user's client-certificate-data).
//   - The CAs of those files' bundles (talosconfig ca, kubeconfig
//     certificate-authority-data).
//   - The serving certificates read from TLS handshakes: each node's Talos
//     API (apid, port 50000) and the kubeconfig's kube-apiserver, with the
//     CAs their chains carry.
//
// Talos exposes its certificates as resources only in the secrets
// namespace, and every one of them is Sensitive (pkg/machinery/resources/
// secrets/*.go, v1.13.9): its access policy (internal/app/resources/
// access.go) lets only os:admin read them, and their specs carry the
// private keys next to the certificates. The bot reads none of them, even
// with os:admin: it would pull keys across the wire to learn what the
// handshakes and bundles already show.
//
// The handshake presents no client certificate: apid sends its chain before
// it asks for one, so nothing of the bot's is offered to a server, and the
// chain is verified against the CA bundle (with the clock held inside the
// certificate's validity, so an expired certificate is still listed, as
// expired). Plan reads everything and carries the certexpiry.Inventory in
// its canonical inputs, which the bot's daily expiry check reads; Run
// reports it. Key material is never decoded (the kubeconfig is read into a
// struct with no field for client-key-data; the talosconfig's key stays
// the base64 text it was), never parsed (certexpiry.ParsePEM parses only
// CERTIFICATE blocks) and never reported.
package certinfo

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/constants"
	"go.yaml.in/yaml/v3"

	"github.com/talosbot/talosbot/internal/certexpiry"
	"github.com/talosbot/talosbot/internal/version"
	"github.com/talosbot/talosbot/plugins/cluster"
	"github.com/talosbot/talosbot/plugins/sdk"
)

// Name is the plugin's catalogue name.
const Name = "certs"

// Command is the chat command.
const Command = "certs"

// handshakeTimeout bounds one TLS handshake: a node that does not answer
// is listed as unread, it does not hold the report.
const handshakeTimeout = 5 * time.Second

// Plugin implements sdk.Plugin. It keeps no state between calls.
type Plugin struct {
	// now is the clock of the days-left column (nil: time.Now). Tests set it.
	now func() time.Time
}

// New returns the plugin.
func New() sdk.Plugin { return &Plugin{} }

// NewWithClock returns the plugin with a clock (tests).
func NewWithClock(now func() time.Time) sdk.Plugin { return &Plugin{now: now} }

func (p *Plugin) clock() time.Time {
	if p.now != nil {
		return p.now()
	}
	return time.Now()
}

// Describe returns the manifest.
func (*Plugin) Describe(context.Context) (*sdk.Manifest, error) {
	return &sdk.Manifest{Name: Name, Version: version.Version, Commands: []*sdk.Command{{
		Name:    Command,
		Summary: "List the certificates the bot can see (its talosconfig and kubeconfig client certificates, the Talos API and kube-apiserver serving certificates, the CAs) with expiry and days left (read-only)",
		Args:    []*sdk.Arg{{Name: "cluster", Description: "cluster to report on (default: the channel's cluster)"}},
		Effect:  sdk.EffectReadOnly,
		Example: "/talos certs production",
	}}}, nil
}

// Plan reads every certificate and returns the inventory in its canonical
// inputs; it changes nothing.
func (p *Plugin) Plan(ctx context.Context, req *sdk.OperationRequest) (*sdk.OperationPlan, error) {
	in, err := Read(ctx, req)
	if err != nil {
		return nil, err
	}
	raw, err := in.Marshal()
	if err != nil {
		return nil, err
	}
	plan := &sdk.OperationPlan{
		Summary:         fmt.Sprintf("Certificates of %s: %d seen (read-only)", req.Cluster.Name, len(in.Certs)),
		Target:          req.Cluster.Name,
		Steps:           []*sdk.Step{{ID: "report", Title: "certificates and their expiry", Kind: "verify"}},
		CanonicalInputs: sdk.NewCanonical(req).Str(certexpiry.InventoryKey, raw).Bytes(),
	}
	for _, what := range sortedKeys(in.Unread) {
		plan.Warnings = append(plan.Warnings, fmt.Sprintf("%s: not read (%s)", what, in.Unread[what]))
	}
	return plan, nil
}

// Run reads every certificate and reports one line each.
func (p *Plugin) Run(ctx context.Context, req *sdk.OperationRequest, r sdk.Reporter) error {
	if err := r.StepStarted("report", ""); err != nil {
		return err
	}
	in, err := Read(ctx, req)
	if err != nil {
		_ = r.StepFailed("report", err.Error())
		return r.Result(&sdk.Result{Summary: "cannot read the certificates", Error: err.Error()})
	}
	summary, lines := Report(in, p.clock())
	if err := r.StepOK("report", summary); err != nil {
		return err
	}
	return r.Result(&sdk.Result{OK: true, Summary: summary, Lines: lines})
}

// Report renders the inventory at now: a summary naming the soonest expiry
// the bot depends on, then one line per certificate, soonest first, then
// what could not be read.
func Report(in *certexpiry.Inventory, now time.Time) (string, []string) {
	in.Sort()
	var lines []string
	soonest := ""
	for _, c := range in.Certs {
		days := c.DaysLeft(now)
		icon := "✅"
		switch {
		case days < 0:
			icon = "❌"
		case days <= 30:
			icon = "⚠️"
		}
		left := fmt.Sprintf("%d days left", days)
		if days < 0 {
			left = fmt.Sprintf("expired %d days ago", -days)
		}
		src := c.Source
		if len(c.Sources) > 0 {
			src += " (also " + strings.Join(c.Sources, ", ") + ")"
		}
		line := fmt.Sprintf("%s %s [%s]: expires %s, %s; subject %s, issuer %s, serial %s", icon, src, c.Kind,
			c.NotAfter.UTC().Format("2006-01-02 15:04 UTC"), left, orNone(c.Subject), orNone(c.Issuer), c.Serial)
		if c.AutoRenewed {
			line += " (Talos renews it)"
		} else if days <= 30 {
			line += "; renew: " + c.Renew
		}
		lines = append(lines, line)
		if soonest == "" && !c.AutoRenewed {
			soonest = fmt.Sprintf("%s (%s)", c.Source, left)
		}
	}
	for _, what := range sortedKeys(in.Unread) {
		lines = append(lines, fmt.Sprintf("❔ %s: not read (%s)", what, in.Unread[what]))
	}
	summary := fmt.Sprintf("%d certificates of %s", len(in.Certs), in.Cluster)
	if soonest != "" {
		summary += "; the first the bot depends on to expire: " + soonest
	}
	return summary, lines
}

func orNone(s string) string {
	if s == "" {
		return "(none)"
	}
	return s
}

// Read collects what the request's credentials and the cluster's
// handshakes show. Only a request without a cluster or talosconfig fails;
// anything else that cannot be read is noted in Unread.
func Read(ctx context.Context, req *sdk.OperationRequest) (*certexpiry.Inventory, error) {
	inv, err := cluster.InventoryFrom(&req.Cluster)
	if err != nil {
		return nil, err
	}
	if len(req.Credentials.Talosconfig) == 0 {
		return nil, fmt.Errorf("cluster %s: no talosconfig was provided; configure the cluster's credentials", inv.Name)
	}
	out := &certexpiry.Inventory{Cluster: inv.Name}
	talosRoots := x509.NewCertPool()
	readTalosconfig(out, req.Credentials.Talosconfig, talosRoots)
	kubeServer, kubeRoots := "", x509.NewCertPool()
	if len(req.Credentials.Kubeconfig) > 0 {
		kubeServer = readKubeconfig(out, req.Credentials.Kubeconfig, kubeRoots)
	} else {
		out.Note("kubeconfig", "none configured for this cluster")
	}

	// The handshakes run side by side: a node that does not answer costs
	// one timeout, not one per node.
	type shake struct {
		source, renew string
		chain         []*x509.Certificate
		err           error
	}
	var (
		mu     sync.Mutex
		shakes []shake
		wg     sync.WaitGroup
	)
	add := func(s shake) { mu.Lock(); shakes = append(shakes, s); mu.Unlock() }
	for _, n := range inv.Nodes {
		wg.Go(func() {
			chain, err := Handshake(ctx, withPort(n.Address, constants.ApidPort), talosRoots)
			add(shake{source: "Talos API of " + n.Name + " (TLS handshake)", renew: certexpiry.RenewTalosServer, chain: chain, err: err})
		})
	}
	if kubeServer != "" {
		wg.Go(func() {
			chain, err := Handshake(ctx, kubeServer, kubeRoots)
			add(shake{source: "kube-apiserver " + kubeServer + " (TLS handshake)", renew: certexpiry.RenewKubeServer, chain: chain, err: err})
		})
	}
	wg.Wait()
	// Deterministic order whatever finished first.
	slices.SortFunc(shakes, func(a, b shake) int { return strings.Compare(a.source, b.source) })
	for _, s := range shakes {
		if s.err != nil {
			out.Note(s.source, s.err.Error())
			continue
		}
		for i, c := range s.chain {
			if i == 0 {
				cert := certexpiry.Of(s.source, certexpiry.KindServer, s.renew, c)
				cert.AutoRenewed = cert.Kind == certexpiry.KindServer
				out.Add(cert)
				continue
			}
			out.Add(certexpiry.Of(s.source+" chain", certexpiry.KindCA, caRenew(s.renew), c))
		}
	}
	out.Sort()
	return out, nil
}

func caRenew(serverRenew string) string {
	if serverRenew == certexpiry.RenewKubeServer {
		return certexpiry.RenewKubeCA
	}
	return certexpiry.RenewTalosCA
}

// readTalosconfig adds the current context's client certificate and CA
// bundle, and puts the CAs in roots (the handshakes verify against them).
func readTalosconfig(out *certexpiry.Inventory, talosconfig []byte, roots *x509.CertPool) {
	cfg, err := cluster.ParseTalosconfig(talosconfig)
	if err != nil {
		out.Note("talosconfig", err.Error())
		return
	}
	ctxName := cfg.Context
	c := cfg.Contexts[ctxName]
	if c == nil {
		out.Note("talosconfig", fmt.Sprintf("no context %q", ctxName))
		return
	}
	if ca, err := decodeB64PEM(c.CA); err != nil {
		out.Note("talosconfig CA bundle", err.Error())
	} else {
		for _, cert := range ca {
			roots.AddCert(cert)
			out.Add(certexpiry.Of("talosconfig CA bundle", certexpiry.KindCA, certexpiry.RenewTalosCA, cert))
		}
	}
	// Only the certificate half of the pair is decoded; c.Key is never read.
	if crt, err := decodeB64PEM(c.Crt); err != nil {
		out.Note("talosconfig client certificate", err.Error())
	} else {
		out.Add(certexpiry.Of("talosconfig client certificate", certexpiry.KindClient, certexpiry.RenewTalosconfig, crt[0]))
	}
}

// kubeconfig is the part of a kubeconfig the plugin reads. It has no
// field for client-key-data (nor tokens, nor exec): those values are never
// decoded, as clientcmd.Load would decode them.
type kubeconfig struct {
	CurrentContext string `yaml:"current-context"`
	Contexts       []struct {
		Name    string `yaml:"name"`
		Context struct {
			Cluster string `yaml:"cluster"`
			User    string `yaml:"user"`
		} `yaml:"context"`
	} `yaml:"contexts"`
	Clusters []kubeCluster `yaml:"clusters"`
	Users    []struct {
		Name string `yaml:"name"`
		User struct {
			CertData string `yaml:"client-certificate-data"`
		} `yaml:"user"`
	} `yaml:"users"`
}

type kubeCluster struct {
	Name    string `yaml:"name"`
	Cluster struct {
		Server string `yaml:"server"`
		CAData string `yaml:"certificate-authority-data"`
	} `yaml:"cluster"`
}

// readKubeconfig adds the current user's client certificate and the
// current cluster's CA bundle, puts the CAs in roots and returns the
// kube-apiserver's host:port ("" when there is none).
func readKubeconfig(out *certexpiry.Inventory, raw []byte, roots *x509.CertPool) string {
	var kc kubeconfig
	if err := yaml.Unmarshal(raw, &kc); err != nil {
		out.Note("kubeconfig", "cannot parse it (check the kubeconfig credential)")
		return ""
	}
	var clusterName, userName string
	found := false
	for _, c := range kc.Contexts {
		if c.Name == kc.CurrentContext {
			clusterName, userName, found = c.Context.Cluster, c.Context.User, true
		}
	}
	if !found {
		out.Note("kubeconfig", fmt.Sprintf("no current context %q", kc.CurrentContext))
		return ""
	}
	server, i := "", slices.IndexFunc(kc.Clusters, func(c kubeCluster) bool { return c.Name == clusterName })
	if i < 0 {
		out.Note("kubeconfig", fmt.Sprintf("no cluster %q", clusterName))
	} else {
		cl := kc.Clusters[i].Cluster
		if cl.CAData == "" {
			out.Note("kubeconfig CA bundle", "no certificate-authority-data (a file path is not read)")
		} else if ca, err := decodeB64PEM(cl.CAData); err != nil {
			out.Note("kubeconfig CA bundle", err.Error())
		} else {
			for _, cert := range ca {
				roots.AddCert(cert)
				out.Add(certexpiry.Of("kubeconfig CA bundle", certexpiry.KindCA, certexpiry.RenewKubeCA, cert))
			}
		}
		if u, err := url.Parse(cl.Server); err == nil && u.Scheme == "https" && u.Host != "" {
			server = withPort(u.Host, 443)
		} else {
			out.Note("kube-apiserver", "the kubeconfig's server is not an https URL")
		}
	}
	found = false
	for _, u := range kc.Users {
		if u.Name != userName {
			continue
		}
		found = true
		if u.User.CertData == "" {
			// A token or exec plugin: nothing with an expiry the bot can read.
			out.Note("kubeconfig client certificate", "the kubeconfig's user has no client-certificate-data (token or exec credentials have no expiry to read)")
		} else if crt, err := decodeB64PEM(u.User.CertData); err != nil {
			out.Note("kubeconfig client certificate", err.Error())
		} else {
			out.Add(certexpiry.Of("kubeconfig client certificate", certexpiry.KindClient, certexpiry.RenewKubeconfig, crt[0]))
		}
	}
	if !found {
		out.Note("kubeconfig client certificate", fmt.Sprintf("no user %q", userName))
	}
	return server
}

func decodeB64PEM(s string) ([]*x509.Certificate, error) {
	if s == "" {
		return nil, errors.New("empty")
	}
	raw, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		return nil, errors.New("not base64")
	}
	return certexpiry.ParsePEM(raw)
}

func withPort(hostport string, port int) string {
	if _, _, err := net.SplitHostPort(hostport); err == nil {
		return hostport
	}
	return net.JoinHostPort(strings.Trim(hostport, "[]"), strconv.Itoa(port))
}

// Handshake dials addr, completes as much of a TLS handshake as it takes to
// receive the server's chain, verifies the chain against roots and returns
// it, leaf first. It offers no client certificate. The verification holds
// its clock inside the leaf's validity, so an expired (or not yet valid)
// certificate is returned, to be listed as such, while a chain from
// another CA, or for another name, is refused.
func Handshake(ctx context.Context, addr string, roots *x509.CertPool) ([]*x509.Certificate, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	var chain []*x509.Certificate
	cfg := &tls.Config{
		MinVersion: tls.VersionTLS12,
		// Verified below, by VerifyConnection, with the clock held inside
		// the certificate's validity.
		InsecureSkipVerify: true, //nolint:gosec
		ServerName:         host,
		VerifyConnection: func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 {
				return errors.New("the server sent no certificate")
			}
			leaf := cs.PeerCertificates[0]
			inter := x509.NewCertPool()
			for _, c := range cs.PeerCertificates[1:] {
				inter.AddCert(c)
			}
			at := time.Now()
			if at.After(leaf.NotAfter) {
				at = leaf.NotAfter
			} else if at.Before(leaf.NotBefore) {
				at = leaf.NotBefore
			}
			if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter, DNSName: host, CurrentTime: at}); err != nil {
				return fmt.Errorf("the server's certificate does not verify against the configured CA bundle: %w", err)
			}
			chain = cs.PeerCertificates
			return nil
		},
		// No client certificate: apid asks for one after sending its chain.
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &tls.Certificate{}, nil },
	}
	dctx, cancel := context.WithTimeout(ctx, handshakeTimeout)
	defer cancel()
	d := tls.Dialer{Config: cfg}
	conn, err := d.DialContext(dctx, "tcp", addr)
	if conn != nil {
		_ = conn.Close()
	}
	if chain != nil {
		// The chain was read and verified; a server that then refuses the
		// missing client certificate (apid) ends the handshake, which is fine.
		return chain, nil
	}
	if err != nil {
		return nil, fmt.Errorf("TLS handshake with %s: %w", addr, err)
	}
	return nil, fmt.Errorf("TLS handshake with %s: no certificate", addr)
}

func sortedKeys(m map[string]string) []string { return slices.Sorted(maps.Keys(m)) }
