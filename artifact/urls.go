package artifact

import "strings"

// urlClass is what a URL in markup or CSS would make a browser do.
type urlClass int

const (
	urlLocal  urlClass = iota // relative path or fragment: stays with the file
	urlImage                  // data: URL of a raster image
	urlLink                   // http, https, mailto, tel: fine as a link a person clicks
	urlRemote                 // any other absolute or network-path URL: fetched from elsewhere
	urlScript                 // javascript:, vbscript:, data: of markup or script: runs code
)

// scriptSchemes run code when a browser follows them.
var scriptSchemes = map[string]bool{
	"javascript": true, "vbscript": true, "livescript": true, "mocha": true, "jscript": true,
}

// imageData are the data: media types that hold only pixels.
var imageData = map[string]bool{
	"image/png": true, "image/jpeg": true, "image/jpg": true, "image/gif": true, "image/webp": true,
}

// classifyURL tells what a URL value does, reading it the way the WHATWG
// URL parser does: tabs and newlines anywhere are dropped, leading and
// trailing controls and spaces are trimmed, and a backslash counts as a
// slash.
func classifyURL(v string) urlClass {
	v = strings.Map(func(r rune) rune {
		if r == '\t' || r == '\n' || r == '\r' {
			return -1
		}
		return r
	}, v)
	v = strings.TrimFunc(v, func(r rune) bool { return r <= ' ' })
	if len(v) >= 2 && (v[0] == '/' || v[0] == '\\') && (v[1] == '/' || v[1] == '\\') {
		return urlRemote
	}
	scheme, rest, ok := strings.Cut(v, ":")
	if !ok || !isScheme(scheme) {
		return urlLocal
	}
	scheme = strings.ToLower(scheme)
	switch {
	case scriptSchemes[scheme]:
		return urlScript
	case scheme == "data":
		media, _, _ := strings.Cut(rest, ",")
		media, _, _ = strings.Cut(media, ";")
		if imageData[strings.ToLower(strings.TrimSpace(media))] {
			return urlImage
		}
		return urlScript
	case scheme == "http" || scheme == "https" || scheme == "mailto" || scheme == "tel":
		return urlLink
	}
	return urlRemote
}

// isScheme reports whether s is a URL scheme: a letter, then letters,
// digits, '+', '-' or '.'.
func isScheme(s string) bool {
	if s == "" || !isASCIILetter(s[0]) {
		return false
	}
	for i := 1; i < len(s); i++ {
		c := s[i]
		if !isASCIILetter(c) && (c < '0' || c > '9') && c != '+' && c != '-' && c != '.' {
			return false
		}
	}
	return true
}
