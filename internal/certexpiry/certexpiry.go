// Package certexpiry is the certificate inventory the `certs` plugin
// (plugins/certinfo) reads and the bot's expiry notices (bot/certnotice)
// consume: what each certificate is, its subject, issuer, serial and
// expiry, and the runbook step that renews it. It carries public
// certificate facts only: PEM parsing here reads CERTIFICATE blocks and
// skips every other block, so key material never enters an Inventory.
//
// Standard library only: the bot links it without the plugins' clients.
package certexpiry

import (
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"time"
)

// InventoryKey is the canonical-inputs key of the plugin's plan that
// carries the Inventory as JSON.
const InventoryKey = "certificates"

// Kinds of certificate.
const (
	// KindClient is a client certificate the bot holds (talosconfig,
	// kubeconfig): the day it expires the bot cannot act.
	KindClient = "client"
	// KindServer is a serving certificate read from a TLS handshake.
	KindServer = "server"
	// KindCA is a certificate authority (from a CA bundle or a chain).
	KindCA = "ca"
)

// Cert is one certificate as the bot may show it.
type Cert struct {
	// Source says where the bot saw it ("talosconfig client certificate",
	// "Talos API of cp-1 (TLS handshake)"); Sources lists every place
	// when the same certificate was seen more than once.
	Source  string   `json:"source"`
	Sources []string `json:"sources,omitempty"`
	Kind    string   `json:"kind"`
	Subject string   `json:"subject"`
	Issuer  string   `json:"issuer"`
	Serial  string   `json:"serial"`
	// Fingerprint is the SHA-256 of the DER: one certificate, one key in
	// the notice records (a renewed certificate is a new one).
	Fingerprint string    `json:"fingerprint"`
	NotBefore   time.Time `json:"not_before"`
	NotAfter    time.Time `json:"not_after"`
	// AutoRenewed marks certificates Talos renews on its own (the serving
	// certificates): listed and exported, never announced.
	AutoRenewed bool `json:"auto_renewed,omitempty"`
	// Renew is the runbook step that renews it.
	Renew string `json:"renew"`
}

// Left is the time to expiry at now (negative once expired).
func (c Cert) Left(now time.Time) time.Duration { return c.NotAfter.Sub(now) }

// DaysLeft is the whole days to expiry at now, rounded down (negative once
// expired).
func (c Cert) DaysLeft(now time.Time) int {
	return int(math.Floor(c.Left(now).Hours() / 24))
}

// Inventory is what the bot can see of one cluster's certificates.
type Inventory struct {
	Cluster string `json:"cluster"`
	Certs   []Cert `json:"certs"`
	// Unread names what could not be read, with why (a node that did not
	// answer the handshake, a kubeconfig without a client certificate).
	Unread map[string]string `json:"unread,omitempty"`
}

// Add records c, merging it with a certificate already seen (same
// fingerprint): the first source stays, the others are appended.
func (in *Inventory) Add(c Cert) {
	for i := range in.Certs {
		if in.Certs[i].Fingerprint == c.Fingerprint {
			if in.Certs[i].Source != c.Source && !contains(in.Certs[i].Sources, c.Source) {
				in.Certs[i].Sources = append(in.Certs[i].Sources, c.Source)
			}
			// A client or server certificate that is also in a chain
			// keeps its own kind; a CA stays a CA.
			return
		}
	}
	in.Certs = append(in.Certs, c)
}

// Note records something that could not be read.
func (in *Inventory) Note(what, why string) {
	if in.Unread == nil {
		in.Unread = map[string]string{}
	}
	in.Unread[what] = why
}

func contains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// Sort orders the certificates soonest expiry first (then by source).
func (in *Inventory) Sort() {
	sort.SliceStable(in.Certs, func(i, j int) bool {
		a, b := in.Certs[i], in.Certs[j]
		if !a.NotAfter.Equal(b.NotAfter) {
			return a.NotAfter.Before(b.NotAfter)
		}
		return a.Source < b.Source
	})
}

// Marshal is the inventory as the plan carries it.
func (in *Inventory) Marshal() (string, error) {
	raw, err := json.Marshal(in)
	return string(raw), err
}

// FromCanonical reads the inventory from a plan's canonical inputs (the
// key="quoted JSON" lines sdk.Canonical writes).
func FromCanonical(inputs []byte) (*Inventory, error) {
	for _, line := range strings.Split(string(inputs), "\n") {
		q, ok := strings.CutPrefix(line, InventoryKey+"=")
		if !ok {
			continue
		}
		s, err := strconv.Unquote(q)
		if err != nil {
			return nil, fmt.Errorf("certificate inventory: %w", err)
		}
		var in Inventory
		if err := json.Unmarshal([]byte(s), &in); err != nil {
			return nil, fmt.Errorf("certificate inventory: %w", err)
		}
		return &in, nil
	}
	return nil, errors.New("the certs plugin's plan carries no certificate inventory (is the plugin older than the bot?)")
}

// Of describes a parsed certificate. Nothing but public facts is kept.
func Of(source, kind, renew string, c *x509.Certificate) Cert {
	sum := sha256.Sum256(c.Raw)
	if c.IsCA {
		kind = KindCA
	}
	return Cert{
		Source: source, Kind: kind,
		Subject: c.Subject.String(), Issuer: c.Issuer.String(),
		Serial: strings.ToUpper(c.SerialNumber.Text(16)), Fingerprint: hex.EncodeToString(sum[:]),
		NotBefore: c.NotBefore.UTC(), NotAfter: c.NotAfter.UTC(), Renew: renew,
	}
}

// ParsePEM reads every CERTIFICATE block of data (a CA bundle, a client
// certificate) and skips any other block: a private key that shares the
// bytes is never parsed (pem.Decode still un-base64s it to find the next
// block; the callers hand it only certificate fields).
func ParsePEM(data []byte) ([]*x509.Certificate, error) {
	var out []*x509.Certificate
	for {
		var b *pem.Block
		b, data = pem.Decode(data)
		if b == nil {
			break
		}
		if b.Type != "CERTIFICATE" {
			continue
		}
		c, err := x509.ParseCertificate(b.Bytes)
		if err != nil {
			return out, fmt.Errorf("parse certificate: %w", err)
		}
		out = append(out, c)
	}
	if len(out) == 0 {
		return nil, errors.New("no PEM CERTIFICATE block")
	}
	return out, nil
}

// The runbook steps that renew each kind of certificate (docs/OPERATIONS.md
// "Certificate expiry"). Talos issues a talosconfig's client certificate
// for a year (constants.TalosAPIDefaultCertificateValidityDuration,
// siderolabs/talos#7702) and an admin kubeconfig's too
// (KubernetesDefaultCertificateValidityDuration); its CAs for ten years
// (generate/secrets CAValidityTime = 87600h).
const (
	RenewTalosconfig = "issue a new talosconfig for the bot (`talosctl config new --roles os:admin --crt-ttl 8760h bot-talosconfig` with an admin talosconfig, or `tofu output -raw talosconfig` after the Terraform provider renews it) and replace the bot's credential"
	RenewKubeconfig  = "issue a new admin kubeconfig (`talosctl kubeconfig --force bot-kubeconfig`, or `tofu output -raw talos_kubeconfig`) and replace the bot's credential"
	RenewTalosCA     = "rotate the Talos API CA with `talosctl rotate-ca --talos=true --kubernetes=false` (a dry run first), then issue the bot a new talosconfig"
	RenewKubeCA      = "rotate the Kubernetes CA with `talosctl rotate-ca --talos=false --kubernetes=true` (a dry run first), then issue the bot a new kubeconfig"
	RenewTalosServer = "Talos renews the apid certificate itself (every 12 h, valid 24 h); one that is not renewed points at the node's time or its machined"
	RenewKubeServer  = "Talos renews the kube-apiserver certificate itself; one that is not renewed points at the control plane's secrets controller (`talosctl get kubernetesdynamiccerts` needs os:admin)"
)
