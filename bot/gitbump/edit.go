// Package gitbump prepares the Terraform version bump as a Git change once
// an operation that changed a declared version has succeeded (R18): it edits
// the one variable in the configured variables file, commits it on a new
// branch, pushes it, and optionally opens a pull request through the
// forge's API. It implements engine.RunHook; the engine tells it which declared
// variables a run made true (engine.RunOutput.Declared), never which plugin ran.
package gitbump

import (
	"fmt"
	"regexp"
	"strconv"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/zclconf/go-cty/cty"
)

// versionRE is what a declared version may be: a release tag with or
// without its leading v (and an optional pre-release).
var versionRE = regexp.MustCompile(`^v?\d+\.\d+\.\d+(-[0-9A-Za-z.-]+)?$`)

// EditVariable sets variable name to value in a Terraform file and returns
// the new file and the old value. In a .tf file it edits the default of
// `variable "name" { default = "…" }`; in a .tfvars file the top-level
// `name = "…"`. Only the bytes of the old string literal change: comments,
// spacing and every other line stay byte-identical.
func EditVariable(filename string, src []byte, name, value string) (out []byte, old string, err error) {
	if !versionRE.MatchString(value) {
		return nil, "", fmt.Errorf("%q is not a version", value)
	}
	f, diags := hclsyntax.ParseConfig(src, filename, hcl.InitialPos)
	if diags.HasErrors() {
		return nil, "", fmt.Errorf("parse %s: %s", filename, diags.Error())
	}
	body, ok := f.Body.(*hclsyntax.Body)
	if !ok {
		return nil, "", fmt.Errorf("parse %s: not HCL native syntax", filename)
	}
	var attr *hclsyntax.Attribute
	if a, ok := body.Attributes[name]; ok {
		attr = a
	}
	for _, b := range body.Blocks {
		if b.Type == "variable" && len(b.Labels) == 1 && b.Labels[0] == name {
			if attr != nil {
				return nil, "", fmt.Errorf("%s sets %s twice", filename, name)
			}
			a, ok := b.Body.Attributes["default"]
			if !ok {
				return nil, "", fmt.Errorf("%s: variable %q has no default to change (set it where the value is given, e.g. a .tfvars file, and configure git_followup.file)", filename, name)
			}
			attr = a
		}
	}
	if attr == nil {
		return nil, "", fmt.Errorf("%s declares no variable %q (configure git_followup.file to the file that does)", filename, name)
	}
	tmpl, ok := attr.Expr.(*hclsyntax.TemplateExpr)
	if !ok || len(tmpl.Parts) != 1 {
		return nil, "", fmt.Errorf("%s: %s is not a plain string literal; change it by hand", filename, name)
	}
	lit, ok := tmpl.Parts[0].(*hclsyntax.LiteralValueExpr)
	if !ok || !lit.Val.Type().Equals(cty.String) || !lit.Val.IsKnown() || lit.Val.IsNull() {
		return nil, "", fmt.Errorf("%s: %s is not a plain string literal; change it by hand", filename, name)
	}
	old = lit.Val.AsString()
	r := tmpl.SrcRange
	if r.Start.Byte < 0 || r.End.Byte > len(src) || r.End.Byte-r.Start.Byte < 2 || src[r.Start.Byte] != '"' || src[r.End.Byte-1] != '"' {
		return nil, "", fmt.Errorf("%s: %s is not a quoted string; change it by hand", filename, name)
	}
	out = make([]byte, 0, len(src)+len(value))
	out = append(out, src[:r.Start.Byte]...)
	out = append(out, strconv.Quote(value)...) // a version needs no HCL escapes
	out = append(out, src[r.End.Byte:]...)
	return out, old, nil
}
