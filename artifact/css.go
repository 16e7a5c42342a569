package artifact

import (
	"strconv"
	"strings"
)

// cssKeywords make a style sheet run code or load from elsewhere whatever
// their arguments: old IE expressions and behaviors, Mozilla bindings and
// imports.
var cssKeywords = []string{"expression(", "-moz-binding", "@import", "javascript:", "vbscript:"}

// cssLoaders are the CSS functions whose arguments are URLs to load.
var cssLoaders = []string{"url(", "src(", "image-set(", "image(", "cross-fade("}

// cssRisk returns why CSS text would run code or fetch something from
// outside the file, or "" when it does neither. The text is first
// decoded as a CSS tokenizer would: comments removed, backslash escapes
// resolved, case folded; then every URL given to a loading function is
// classified. Fragment references such as url(#gradient) and data: images
// are fine.
func cssRisk(css string) string {
	s := strings.ToLower(decodeCSS(css))
	for _, k := range cssKeywords {
		if strings.Contains(s, k) {
			return "style uses " + strings.TrimSuffix(k, "(")
		}
	}
	if hasProperty(s, "behavior") {
		return "style uses behavior"
	}
	for _, fn := range cssLoaders {
		for rest := s; ; {
			i := strings.Index(rest, fn)
			if i < 0 {
				break
			}
			rest = rest[i+len(fn):]
			arg, _, _ := strings.Cut(rest, ")")
			for _, u := range cssURLs(arg, fn == "url(" || fn == "src(") {
				if c := classifyURL(u); c != urlLocal && c != urlImage {
					return "style loads " + truncate(u, 60)
				}
			}
		}
	}
	return ""
}

// hasProperty reports whether the property name occurs in s on its own,
// not as the tail of a longer name such as scroll-behavior.
func hasProperty(s, name string) bool {
	for i := 0; ; {
		j := strings.Index(s[i:], name)
		if j < 0 {
			return false
		}
		at := i + j
		if at == 0 || !(isASCIILetter(s[at-1]) || s[at-1] == '-') {
			return true
		}
		i = at + len(name)
	}
}

// cssURLs splits the argument of a loading function into its URLs: the
// whole argument for url() and src(), the quoted strings for the others.
func cssURLs(arg string, whole bool) []string {
	if whole {
		return []string{strings.Trim(strings.TrimSpace(arg), `"'`)}
	}
	var out []string
	for {
		i := strings.IndexAny(arg, `"'`)
		if i < 0 {
			return out
		}
		q := arg[i]
		arg = arg[i+1:]
		u, rest, _ := strings.Cut(arg, string(q))
		out = append(out, u)
		arg = rest
	}
}

// decodeCSS removes comments and resolves backslash escapes: "\75 rl("
// and "u\rl(" both spell "url(" to a browser.
func decodeCSS(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); {
		switch {
		case strings.HasPrefix(s[i:], "/*"):
			end := strings.Index(s[i+2:], "*/")
			if end < 0 {
				return b.String()
			}
			i += end + 4
		case s[i] == '\\' && i+1 < len(s):
			i += decodeEscape(&b, s[i+1:]) + 1
		default:
			b.WriteByte(s[i])
			i++
		}
	}
	return b.String()
}

// decodeEscape writes the character of one CSS escape (the text after the
// backslash) and returns how many bytes it took.
func decodeEscape(b *strings.Builder, s string) int {
	n := 0
	for n < len(s) && n < 6 && isHex(s[n]) {
		n++
	}
	if n == 0 {
		if s[0] == '\n' || s[0] == '\f' || s[0] == '\r' {
			return 1 // an escaped newline is a line continuation
		}
		b.WriteByte(s[0])
		return 1
	}
	code, _ := strconv.ParseUint(s[:n], 16, 32)
	if code == 0 || code > 0x10ffff {
		code = 0xfffd
	}
	b.WriteRune(rune(code))
	if n < len(s) && (s[n] == ' ' || s[n] == '\t' || s[n] == '\n') {
		n++
	}
	return n
}

// isHex reports a hexadecimal digit.
func isHex(c byte) bool {
	return c >= '0' && c <= '9' || c|0x20 >= 'a' && c|0x20 <= 'f'
}

// truncate shortens s for a reason text.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
