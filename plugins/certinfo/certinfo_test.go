package certinfo_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/talosbot/talosbot/internal/certexpiry"
	"github.com/talosbot/talosbot/internal/testenv"
	"github.com/talosbot/talosbot/plugins/certinfo"
	"github.com/talosbot/talosbot/plugins/cluster"
	"github.com/talosbot/talosbot/plugins/sdk"
	"github.com/talosbot/talosbot/plugins/sdk/sdktest"
	"github.com/talosbot/talosbot/sim"
)

func request(c *sim.Cluster, kubeconfig []byte) *sdk.OperationRequest {
	pc := sdk.Cluster{Name: "staging", Environment: "staging"}
	for _, n := range c.Nodes() {
		pc.Nodes = append(pc.Nodes, &sdk.Node{Name: n.Name, Address: n.IP, Role: n.Role, Host: n.Host})
	}
	return &sdk.OperationRequest{OperationID: "op-1", Command: certinfo.Command, Cluster: pc,
		Credentials: sdk.Credentials{Talosconfig: c.Talosconfig(), Kubeconfig: kubeconfig}}
}

func find(in *certexpiry.Inventory, source string) (certexpiry.Cert, bool) {
	for _, c := range in.Certs {
		if c.Source == source {
			return c, true
		}
	}
	return certexpiry.Cert{}, false
}

// The sim issues its PKI at its clock (sim.Options.Now) as Talos does: a
// one-year client certificate, a ten-year CA. A sim that started 340 days
// ago has a talosconfig 25 days from expiry; the plugin reads it from the
// talosconfig, each node's apid certificate from the handshake, the
// kube-apiserver's too, and keys never appear.
func TestCertsOnASimCluster(t *testing.T) {
	kube := testenv.StartKube(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	started := time.Now().Add(-340 * 24 * time.Hour)
	shift := time.Since(started)
	c, err := sim.Start(ctx, sim.Options{ControlPlanes: 1, Workers: 1, Kube: kube.Client,
		Now: func() time.Time { return time.Now().Add(-shift) }})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	req := request(c, kube.Kubeconfig)

	plan, err := sdktest.Plan(ctx, certinfo.New(), req)
	if err != nil {
		t.Fatal(err)
	}
	in, err := certexpiry.FromCanonical(plan.CanonicalInputs)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	client, ok := find(in, "talosconfig client certificate")
	if !ok {
		t.Fatalf("no talosconfig client certificate in %+v", in)
	}
	if d := client.DaysLeft(now); d != 24 && d != 25 || client.Kind != certexpiry.KindClient || !strings.Contains(client.Subject, "os:admin") {
		t.Errorf("talosconfig client certificate: %d days left, %+v", d, client)
	}
	ca, ok := find(in, "talosconfig CA bundle")
	if !ok || ca.Kind != certexpiry.KindCA || ca.DaysLeft(now) < 9*365 {
		t.Errorf("Talos CA: %+v (%d days)", ca, ca.DaysLeft(now))
	}
	for _, n := range c.Nodes() {
		apid, ok := find(in, "Talos API of "+n.Name+" (TLS handshake)")
		if !ok || apid.Kind != certexpiry.KindServer || !apid.AutoRenewed || apid.Issuer != ca.Subject {
			t.Errorf("apid certificate of %s: %+v", n.Name, apid)
		}
	}
	var kubeClient, kubeServer bool
	for _, cert := range in.Certs {
		kubeClient = kubeClient || cert.Source == "kubeconfig client certificate"
		// testenv's kube-apiserver serves a self-signed certificate, which
		// is also the kubeconfig's CA: one entry, both sources.
		for _, src := range append([]string{cert.Source}, cert.Sources...) {
			kubeServer = kubeServer || strings.HasPrefix(src, "kube-apiserver ")
		}
	}
	if !kubeClient || !kubeServer || len(in.Unread) != 0 {
		t.Errorf("kubeconfig certificates: client %v, server %v; unread %v", kubeClient, kubeServer, in.Unread)
	}

	rec, err := sdktest.Run(ctx, certinfo.NewWithClock(func() time.Time { return now }), req, time.Now)
	if err != nil {
		t.Fatal(err)
	}
	res := rec.FinalResult()
	if res == nil || !res.OK {
		t.Fatalf("run: %+v", res)
	}
	text := res.Summary + "\n" + strings.Join(res.Lines, "\n")
	// testenv's kubeconfig lasts a day: the summary names it first.
	if !strings.Contains(res.Summary, "the first the bot depends on to expire: kubeconfig") {
		t.Errorf("summary does not name the soonest expiry: %s", res.Summary)
	}
	if !strings.Contains(text, "⚠️ talosconfig client certificate [client]: expires "+client.NotAfter.Format("2006-01-02 15:04 UTC")) {
		t.Errorf("no talosconfig line:\n%s", text)
	}
	if !strings.Contains(text, "talosctl config new") {
		t.Errorf("no renewal step for the talosconfig:\n%s", text)
	}
	for _, secret := range []string{"PRIVATE KEY", "BEGIN", string(req.Credentials.Talosconfig[len(req.Credentials.Talosconfig)-40:])} {
		if strings.Contains(text, secret) || strings.Contains(string(plan.CanonicalInputs), secret) {
			t.Errorf("report or plan carries %q", secret)
		}
	}
}

// A node that does not answer is listed as unread, with why; the rest is
// still reported.
func TestCertsUnreachableNodeIsNoted(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := sim.Start(ctx, sim.Options{ControlPlanes: 1, Workers: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	req := request(c, nil)
	req.Cluster.Nodes = append(req.Cluster.Nodes, &sdk.Node{Name: "ghost", Address: "127.0.0.1:1", Role: "worker"})
	in, err := certinfo.Read(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if why := in.Unread["Talos API of ghost (TLS handshake)"]; !strings.Contains(why, "127.0.0.1:1") {
		t.Errorf("ghost: %q (unread %v)", why, in.Unread)
	}
	if _, ok := find(in, "talosconfig client certificate"); !ok {
		t.Errorf("the rest is not reported: %+v", in)
	}
	if in.Unread["kubeconfig"] == "" {
		t.Errorf("a missing kubeconfig is not noted: %v", in.Unread)
	}
}

// The kubeconfig's client-key-data is never decoded: a key the plugin
// could not even read as base64 does not stop it reading the certificate
// beside it.
func TestCertsKubeconfigKeyIsNeverDecoded(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := sim.Start(ctx, sim.Options{ControlPlanes: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	tc, err := cluster.ParseTalosconfig(c.Talosconfig())
	if err != nil {
		t.Fatal(err)
	}
	crt := tc.Contexts[tc.Context].Crt
	kubeconfig := `apiVersion: v1
kind: Config
current-context: admin@lab
contexts:
- name: admin@lab
  context: {cluster: lab, user: admin@lab}
clusters:
- name: lab
  cluster: {server: "https://127.0.0.1:1", certificate-authority-data: ` + tc.Contexts[tc.Context].CA + `}
users:
- name: admin@lab
  user: {client-certificate-data: ` + crt + `, client-key-data: "!!not base64: never to be decoded!!"}
`
	in, err := certinfo.Read(ctx, request(c, []byte(kubeconfig)))
	if err != nil {
		t.Fatal(err)
	}
	// The same certificates as the talosconfig's: one entry, both sources.
	for _, c := range []struct{ talos, kube string }{
		{"talosconfig client certificate", "kubeconfig client certificate"},
		{"talosconfig CA bundle", "kubeconfig CA bundle"},
	} {
		if cert, ok := find(in, c.talos); !ok || !slices.Contains(cert.Sources, c.kube) {
			t.Errorf("the %s is not read: %+v, unread %v", c.kube, cert, in.Unread)
		}
	}
	if why := in.Unread["kube-apiserver 127.0.0.1:1 (TLS handshake)"]; why == "" {
		t.Errorf("the kube-apiserver handshake is not tried: unread %v", in.Unread)
	}
}
