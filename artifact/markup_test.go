package artifact

import (
	"bytes"
	"strings"
	"testing"
)

func TestSanitizeMarkup(t *testing.T) {
	tests := []struct {
		name   string
		in     string
		want   string // "" means: same as in
		fixes  []string
		reject string // substring of the reject reason
	}{
		{name: "clean html", in: `<html><body><p class="x">a &amp; b</p><img src="plot.png"></body></html>`},
		{name: "clean svg keeps case", in: `<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 10 10"><linearGradient id="g"/><rect fill="url(#g)" width="10"/></svg>`},
		{name: "script", in: `<p>a</p><script>alert(1)</script><p>b</p>`, want: `<p>a</p><p>b</p>`, fixes: []string{"removed 1 script elements"}},
		{name: "svg script with cdata", in: `<svg><script><![CDATA[ if (a<b) alert(1) ]]></script><g/></svg>`, want: `<svg><g/></svg>`, fixes: []string{"removed 1 script elements"}},
		{name: "prefixed script", in: `<svg xmlns:h="http://www.w3.org/1999/xhtml"><h:script>alert(1)</h:script></svg>`, want: `<svg xmlns:h="http://www.w3.org/1999/xhtml"></svg>`, fixes: []string{"removed 1 script elements"}},
		{name: "onload keeps viewBox", in: `<svg viewBox="0 0 1 1" onload="alert(1)" width=3>x</svg>`, want: `<svg viewBox="0 0 1 1" width="3">x</svg>`, fixes: []string{"removed 1 event handlers"}},
		{name: "upper-case handler", in: `<img SRC="a.png" OnError='x'>`, want: `<img SRC="a.png">`, fixes: []string{"removed 1 event handlers"}},
		{name: "javascript href", in: `<a href=" java&#x09;script:alert(1)">x</a>`, want: `<a>x</a>`, fixes: []string{"removed 1 script URLs"}},
		{name: "vbscript", in: `<a href="VBScript:x">x</a>`, want: `<a>x</a>`, fixes: []string{"removed 1 script URLs"}},
		{name: "data html", in: `<a href="data:text/html;base64,PHNjcmlwdD4=">x</a>`, want: `<a>x</a>`, fixes: []string{"removed 1 script URLs"}},
		{name: "data png stays", in: `<img src="data:image/png;base64,iVBORw0KGgo=">`},
		{name: "https link stays", in: `<a href="https://example.com/">x</a><a href="mailto:a@b">m</a>`},
		{name: "remote image", in: `<img src="https://evil.example/t.gif">`, want: `<img>`, fixes: []string{"removed 1 remote references"}},
		{name: "network path", in: `<img src="//evil.example/t.gif">`, want: `<img>`, fixes: []string{"removed 1 remote references"}},
		{name: "srcset", in: `<img srcset="a.png 1x, https://e.x/b.png 2x">`, want: `<img>`, fixes: []string{"removed 1 remote references"}},
		{name: "iframe", in: `<iframe src="x.html"><p>in</p></iframe>after`, want: `after`, fixes: []string{"removed 1 frames, objects or embeds"}},
		{name: "object and embed", in: `<object data="x.swf"><param name=a></object><embed src="x">`, want: ``, fixes: []string{"removed 2 frames, objects or embeds"}},
		{name: "foreignObject", in: `<svg><foreignObject><div>x</div></foreignObject><g/></svg>`, want: `<svg><g/></svg>`, fixes: []string{"removed 1 frames, objects or embeds"}},
		{name: "use remote", in: `<svg><use href="https://e.x/s.svg#a"/><use xlink:href="#b"/></svg>`, want: `<svg><use/><use xlink:href="#b"/></svg>`, fixes: []string{"removed 1 remote references"}},
		{name: "use data svg", in: `<svg><use href="data:image/svg+xml;base64,PHN2Zz4="/></svg>`, want: `<svg><use/></svg>`, fixes: []string{"removed 1 script URLs"}},
		{name: "css url remote attr", in: `<div style="background: u\72l(https://e.x/a)">x</div>`, want: `<div>x</div>`, fixes: []string{"removed 1 styles that load or run something"}},
		{name: "css url local attr", in: `<rect style="fill:url(#g)" filter="url(#f)"/>`},
		{name: "presentation attr remote", in: `<rect fill="url(https://e.x/p#g)"/>`, want: `<rect/>`, fixes: []string{"removed 1 remote references"}},
		{name: "style element remote", in: `<style>a{background:url("http://e.x/a")}</style><p>x</p>`, want: `<p>x</p>`, fixes: []string{"removed 1 styles that load or run something"}},
		{name: "style element split by comment", in: `<svg><style>a{b:u<!---->rl(http://e.x/a)}</style></svg>`, want: `<svg></svg>`, fixes: []string{"removed 1 styles that load or run something"}},
		{name: "style element clean", in: `<style>p > b { color: red } .x{scroll-behavior:smooth}</style>`},
		{name: "import", in: `<style>@import "x.css";</style>`, want: ``, fixes: []string{"removed 1 styles that load or run something"}},
		{name: "meta refresh", in: `<meta http-equiv="Refresh" content="0;url=https://e.x"><meta charset="utf-8">`, want: `<meta charset="utf-8">`, fixes: []string{"removed 1 meta refresh or cookie elements"}},
		{name: "base", in: `<base href="https://e.x/">x`, want: `x`, fixes: []string{"removed 1 base elements"}},
		{name: "animate href", in: `<svg><a><animate attributeName="href" values="javascript:alert(1)"/><text>x</text></a></svg>`, want: `<svg><a><text>x</text></a></svg>`, fixes: []string{"removed 1 animations of href"}},
		{name: "xml-stylesheet", in: `<?xml version="1.0"?><?xml-stylesheet href="https://e.x/x.xsl"?><svg/>`, want: `<?xml version="1.0"?><svg/>`, fixes: []string{"removed 1 xml-stylesheet instructions"}},
		{name: "nested objects", in: `<object><object></object><script>x</script></object>ok`, want: `ok`, fixes: []string{"removed 1 frames, objects or embeds"}},
		{name: "form action", in: `<form action="https://e.x/steal"><input name=a></form>`, want: `<form><input name=a></form>`, fixes: []string{"removed 1 remote references"}},
		{name: "script in svg style raw text for html", in: `<svg><style><img src=x onerror=alert(1)></style></svg>`, want: `<svg></svg>`, fixes: []string{"removed 1 styles that load or run something"}},
		{name: "textarea content is sanitized too", in: `<textarea><img src=x onerror=alert(1)></textarea>`, want: `<textarea><img src="x"></textarea>`, fixes: []string{"removed 1 event handlers"}},
		{name: "comment hides style end", in: `<style><!-- </style><img src=x onerror=alert(1)> --></style>`, reject: "hides the end of a <style>"},
		{name: "attribute hides title end", in: `<title><a title="</title><img src=x onerror=alert(1)>"></a></title>`, reject: "hides the end of a <title>"},
		{name: "doctype subset", in: `<!DOCTYPE svg [<!ENTITY x "<script>alert(1)</script>">]><svg>&x;</svg>`, reject: "internal subset"},
		{name: "svg doctype stays", in: `<!DOCTYPE svg PUBLIC "-//W3C//DTD SVG 1.1//EN" "http://www.w3.org/Graphics/SVG/1.1/DTD/svg11.dtd"><svg/>`},
		{name: "cdata hiding tags is seen", in: `<![CDATA[ ><img src=x onerror=alert(1)> ]]>`, want: `<![CDATA[ ><img src="x"> ]]>`, fixes: []string{"removed 1 event handlers"}},
		{name: "unterminated tag escaped", in: `<p>x</p><img src=x onerror=alert(1)`, want: `<p>x</p>&lt;img src=x onerror=alert(1)`, fixes: []string{"removed 1 tags cut off at the end of the file (escaped as text)"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out bytes.Buffer
			res, err := sanitizeMarkup(strings.NewReader(tt.in), &out, false)
			if err != nil {
				t.Fatal(err)
			}
			if tt.reject != "" {
				if !strings.Contains(res.reject, tt.reject) {
					t.Fatalf("reject = %q, want it to contain %q", res.reject, tt.reject)
				}
				return
			}
			if res.reject != "" {
				t.Fatalf("rejected: %s", res.reject)
			}
			want := tt.want
			if want == "" && tt.fixes == nil {
				want = tt.in
			}
			if got := out.String(); got != want {
				t.Errorf("output\n got %s\nwant %s", got, want)
			}
			if got := strings.Join(res.fixes(), "; "); got != strings.Join(tt.fixes, "; ") {
				t.Errorf("fixes = %q, want %q", got, tt.fixes)
			}
			strict, err := sanitizeMarkup(&out, &bytes.Buffer{}, true)
			if err != nil || strict.reject != "" {
				t.Errorf("output still has active content: %v %s", err, strict.reject)
			}
		})
	}
}

func TestSanitizeMarkupRejectMode(t *testing.T) {
	res, err := sanitizeMarkup(strings.NewReader(`<p>ok</p><svg onload="x"/>`), &bytes.Buffer{}, true)
	if err != nil || res.reject != "active content: event handlers" {
		t.Fatalf("got %q, %v", res.reject, err)
	}
	res, err = sanitizeMarkup(strings.NewReader(`<p>ok</p>`), &bytes.Buffer{}, true)
	if err != nil || res.reject != "" {
		t.Fatalf("clean file rejected: %q, %v", res.reject, err)
	}
}

func TestJoinedTokensAreRejected(t *testing.T) {
	// Removing the script joins "<" and "img ..." into a new tag: the check
	// of the result must refuse the file.
	in := "a <<script>x</script>img src=x onerror=alert(1)>"
	c := newChecker(Normalize(testPolicy()))
	o, err := c.content("x.html", strings.NewReader(in), sink{w: &bytes.Buffer{}}, newNesting())
	if err != nil {
		t.Fatal(err)
	}
	if o.reject == "" {
		t.Fatalf("joined markup not refused (strict mode inside archives)")
	}
	out := &memOutput{}
	o, err = c.content("x.html", strings.NewReader(in), sink{w: out, ra: out}, newNesting())
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(o.reject, "after removing active content") {
		t.Fatalf("reject = %q, output %q", o.reject, out.Bytes())
	}
}

func TestCSSRisk(t *testing.T) {
	for in, risky := range map[string]bool{
		"color: red":                                   false,
		"fill: url(#g)":                                false,
		"background: url(data:image/png;x)":            false,
		"background: url(https://e.x/a)":               true,
		"background: URL( 'http://e.x' )":              true,
		`background: \75 rl(http://e.x)`:               true,
		"background: u/**/rl(//e.x/a)":                 true, // browsers read two tokens here; flagging it is the safe side
		"background: image-set('http://e.x/a.png' 1x)": true,
		"width: expression(alert(1))":                  true,
		"behavior: url(x.htc)":                         true,
		"scroll-behavior: smooth":                      false,
		"@import 'a.css'":                              true,
		"-moz-binding: url(x.xml#y)":                   true,
		"cursor: url(file:///etc/passwd)":              true,
	} {
		if got := cssRisk(in) != ""; got != risky {
			t.Errorf("cssRisk(%q) = %q, want risky %v", in, cssRisk(in), risky)
		}
	}
}

func TestClassifyURL(t *testing.T) {
	for in, want := range map[string]urlClass{
		"plot.png": urlLocal, "#x": urlLocal, "a/b:c": urlLocal, "": urlLocal,
		"https://e.x": urlLink, "HTTP://e.x": urlLink, "mailto:a@b": urlLink,
		"//e.x/a": urlRemote, `\\host\share`: urlRemote, "/\\e.x": urlRemote, "file:///etc/passwd": urlRemote, "ftp://e.x": urlRemote,
		"javascript:x": urlScript, " JaVa\tScRiPt:x": urlScript, "\x01javascript:x": urlScript, "data:text/html,x": urlScript,
		"data:image/svg+xml,x": urlScript, "data:image/png;base64,x": urlImage, "data: IMAGE/JPEG ;base64,x": urlImage,
	} {
		if got := classifyURL(in); got != want {
			t.Errorf("classifyURL(%q) = %v, want %v", in, got, want)
		}
	}
}

func FuzzMarkup(f *testing.F) {
	for _, s := range []string{
		`<p onclick=x>a</p><script>b</script>`, `<svg><style>a{b:url(http://x)}</style><use href="//x"/></svg>`,
		`<a href="javascript:1">x</a><![CDATA[<b>]]>`, `<title><!--</title>--></title>`, `a <<script></script>img src=x onerror=y>`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		var out bytes.Buffer
		res, err := sanitizeMarkup(bytes.NewReader(in), &out, false)
		if err != nil {
			t.Fatal(err)
		}
		if res.reject != "" || len(res.removed) == 0 {
			if res.reject == "" && !bytes.Equal(in, out.Bytes()) {
				t.Fatalf("nothing removed but output differs:\n in %q\nout %q", in, out.Bytes())
			}
			return
		}
		// What the checker does after a removal: the result either passes
		// strict mode or the file is refused. Either way, a file that is
		// handed out has no active content, which strict mode confirms.
		strict, err := sanitizeMarkup(bytes.NewReader(out.Bytes()), &bytes.Buffer{}, true)
		if err != nil {
			t.Fatal(err)
		}
		if strict.reject == "" {
			again, _ := sanitizeMarkup(bytes.NewReader(out.Bytes()), &bytes.Buffer{}, false)
			delete(again.removed, catCutTag) // a joined "<a" at the end: inert
			if len(again.removed) != 0 {
				t.Fatalf("strict mode passed but a second pass still removes %v", again.removed)
			}
		}
	})
}
