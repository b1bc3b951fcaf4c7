package cluster

import (
	"regexp"
	"strings"
)

// x509Detail is the part of a TLS failure that names the certificate's problem.
var x509Detail = regexp.MustCompile(`x509: [^"]*`)

// ExplainTLS explains a Talos API call that failed the TLS handshake with the node's apid
// certificate, with the fix; "" for any other error. Talos issues apid's certificate for the
// node's addresses and hostnames and renews it while machined runs
// (internal/app/machined/pkg/controllers/secrets/api.go, v1.13.9), so an expired one means the
// node's clock or machined is wrong, and a missing name means the address used is not one the
// node has (its address changed) or is not in machine.certSANs.
func ExplainTLS(msg string) string {
	d := x509Detail.FindString(msg)
	switch {
	case strings.Contains(msg, "x509: certificate has expired or is not yet valid"):
		return "apid's certificate is outside its validity (" + d + "): Talos renews it while the node runs, so the node's clock or machined is wrong; " +
			"fix: check the node's time (talosctl -n <node> time, with --insecure if needed) and reboot it so it issues a new certificate"
	case strings.Contains(msg, "x509: certificate is valid for"), strings.Contains(msg, "doesn't contain any IP SANs"):
		return "apid's certificate does not name the address the bot used (" + d + "): the node's address changed, or that address is not in its certificate; " +
			"fix: update the inventory (Terraform) to the node's current address, or add the address to machine.certSANs"
	}
	return ""
}
