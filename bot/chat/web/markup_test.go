package web_test

import (
	"regexp"
	"strings"
	"testing"

	"github.com/talosbot/talosbot/bot/chat/web"
)

func TestRenderHTML(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"*Audit* (last 1h), newest first", "<p><strong>Audit</strong> (last 1h), newest first</p>"},
		{"**bold** and _italic_ and ~gone~", "<p><strong>bold</strong> and <em>italic</em> and <s>gone</s></p>"},
		{"run `/talos resume <id>` now", "<p>run <code>/talos resume &lt;id&gt;</code> now</p>"},
		{"no_approval_commands: [\"*\"] and a*b*c", `<p>no_approval_commands: [&#34;*&#34;] and a*b*c</p>`},
		{"✅ *done*—next", "<p>✅ <strong>done</strong>—next</p>"},
		{"line one\n  indented two", "<p>line one\n  indented two</p>"},
		{"para\n\nnext", "<p>para</p><p>next</p>"},
		{"```\nseq | who\n1 | <b>\n```\nafter", "<pre><code>seq | who\n1 | &lt;b&gt;</code></pre><p>after</p>"},
		{"```yaml\nkey: *x*\n```", "<pre><code>key: *x*</code></pre>"},
		{"```inline code```", "<pre><code>inline code</code></pre>"},
		{"```\nunclosed", "<pre><code>unclosed</code></pre>"},
		{"• one\n• *two*\n  more of two\n1. first\n2. second", "<ul><li>one</li><li><strong>two</strong>\nmore of two</li></ul><ol><li>first</li><li>second</li></ol>"},
		{"3. third\n  - sub", `<ol start="3"><li>third</li></ol><ul><li class="sub">sub</li></ul>`},
		{"| node | state |\n|---|:---:|\n| cp-1 | `done` |\n| a\\|b | x |", `<div class="table"><table><thead><tr><th>node</th><th>state</th></tr></thead><tbody><tr><td>cp-1</td><td><code>done</code></td></tr><tr><td>a|b</td><td>x</td></tr></tbody></table></div>`},
		{"> quoted *reason*\n> two", "<blockquote>quoted <strong>reason</strong>\ntwo</blockquote>"},
		{"# Title\n## Sub", "<h3>Title</h3><h4>Sub</h4>"},
		{"see https://talos.dev/x?a=1&b=2.", `<p>see <a href="https://talos.dev/x?a=1&amp;b=2" target="_blank" rel="noopener noreferrer">https://talos.dev/x?a=1&amp;b=2</a>.</p>`},
	} {
		if got := web.RenderHTML(c.in); got != c.want {
			t.Errorf("RenderHTML(%q)\n got %s\nwant %s", c.in, got, c.want)
		}
	}
}

// TestRenderHTMLEscapes: chat text (a freeze reason, a node name, a
// cluster's error) never becomes markup on the operator's page.
func TestRenderHTMLEscapes(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{`<script>alert(1)</script>`, `<p>&lt;script&gt;alert(1)&lt;/script&gt;</p>`},
		{`<img src=x onerror=alert(1)>`, `<p>&lt;img src=x onerror=alert(1)&gt;</p>`},
		{`*<b onmouseover=x>*`, `<p><strong>&lt;b onmouseover=x&gt;</strong></p>`},
		{`[click](javascript:alert(1))`, `<p>[click](javascript:alert(1))</p>`},
		{`<javascript:alert(1)|click>`, `<p>&lt;javascript:alert(1)|click&gt;</p>`},
		{`[x](https://a.example/"onmouseover="alert(1))`, `<p>[x](<a href="https://a.example/" target="_blank" rel="noopener noreferrer">https://a.example/</a>&#34;onmouseover=&#34;alert(1))</p>`},
		{`<https://a.example/|<img src=x>>`, `<p>&lt;<a href="https://a.example/" target="_blank" rel="noopener noreferrer">https://a.example/</a>|&lt;img src=x&gt;&gt;</p>`},
		{"| <i>h</i> |\n|---|\n| <svg onload=x> |", `<div class="table"><table><thead><tr><th>&lt;i&gt;h&lt;/i&gt;</th></tr></thead><tbody><tr><td>&lt;svg onload=x&gt;</td></tr></tbody></table></div>`},
		{"&amp; &lt;", `<p>&amp;amp; &amp;lt;</p>`},
	} {
		if got := web.RenderHTML(c.in); got != c.want {
			t.Errorf("RenderHTML(%q)\n got %s\nwant %s", c.in, got, c.want)
		}
	}
}

// TestRenderHTMLShowsWhereLinksGo: chat text has no link syntax, so a
// freeze reason or an alert label cannot show "Approve here" over another
// address; a URL is shown as itself.
func TestRenderHTMLShowsWhereLinksGo(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{`<!channel> <https://evil.example|Approve here>`, `<p>&lt;!channel&gt; &lt;<a href="https://evil.example" target="_blank" rel="noopener noreferrer">https://evil.example</a>|Approve here&gt;</p>`},
		{`[Approve here](https://evil.example)`, `<p>[Approve here](<a href="https://evil.example" target="_blank" rel="noopener noreferrer">https://evil.example</a>)</p>`},
	} {
		if got := web.RenderHTML(c.in); got != c.want {
			t.Errorf("RenderHTML(%q)\n got %s\nwant %s", c.in, got, c.want)
		}
	}
}

// allowedTag is every tag RenderHTML may write, with its only attributes.
var allowedTag = regexp.MustCompile(`^<(/?(p|strong|em|s|code|pre|ul|ol|li|table|thead|tbody|tr|th|td|blockquote|h3|h4|div)|ol start="\d+"|li class="sub"|div class="table"|a href="https?://[^"<>]*" target="_blank" rel="noopener noreferrer"|/a)>$`)

// FuzzRenderHTML: whatever the text, the output holds only the renderer's
// own tags and attributes, and every other '<' and '>' is escaped.
func FuzzRenderHTML(f *testing.F) {
	for _, s := range []string{"*a* _b_ ~c~ `d`", "```\n<x>\n```", "| a |\n|---|\n| b |", "• x\n1. y", "<https://x.example|y>", "[a](https://b.example)", "> q", "# h", `<img src=x onerror=alert(1)>`, "**a*b**"} {
		f.Add(s)
	}
	tags := regexp.MustCompile(`<[^<>]*>`)
	f.Fuzz(func(t *testing.T, s string) {
		out := web.RenderHTML(s)
		for _, tag := range tags.FindAllString(out, -1) {
			if !allowedTag.MatchString(tag) {
				t.Fatalf("RenderHTML(%q) wrote tag %s:\n%s", s, tag, out)
			}
		}
		if rest := tags.ReplaceAllString(out, ""); strings.ContainsAny(rest, "<>") {
			t.Fatalf("RenderHTML(%q) left an unescaped < or >:\n%s", s, out)
		}
	})
}
