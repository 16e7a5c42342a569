package artifact

import (
	"bytes"
	"net/http"
	"strings"
)

// kind is what a file's content is, as far as the rules care.
type kind int

// Kinds of content. The order means nothing.
const (
	kindBinary  kind = iota // binary data of no kind we know
	kindText                // text without markup
	kindHTML                // HTML markup
	kindXML                 // XML that is not SVG
	kindSVG                 // SVG image (XML)
	kindPNG                 // PNG image
	kindJPEG                // JPEG image
	kindGIF                 // GIF image
	kindWebP                // WebP image
	kindPDF                 // PDF document
	kindParquet             // Apache Parquet table
	kindZip                 // zip archive, Office Open XML included
	kindCFB                 // OLE2 compound file: legacy or encrypted Office
	kindExec                // program: ELF, PE, Mach-O, wasm, Java class
	kindArchive             // compressed stream or archive other than zip
)

// sniffLen is how much of the head sniff looks at.
const sniffLen = 4096

// magic is a content signature at offset 0.
type magic struct {
	prefix string
	kind   kind
	mime   string
}

// magics are the signatures sniff knows besides http.DetectContentType,
// which has no table for programs, compound files or Parquet.
var magics = []magic{
	{"\x7fELF", kindExec, "application/x-executable"},
	{"MZ", kindExec, "application/vnd.microsoft.portable-executable"},
	{"\xfe\xed\xfa\xce", kindExec, "application/x-mach-binary"},
	{"\xfe\xed\xfa\xcf", kindExec, "application/x-mach-binary"},
	{"\xce\xfa\xed\xfe", kindExec, "application/x-mach-binary"},
	{"\xcf\xfa\xed\xfe", kindExec, "application/x-mach-binary"},
	{"\xca\xfe\xba\xbe", kindExec, "application/java-vm"},
	{"\x00asm", kindExec, "application/wasm"},
	{"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1", kindCFB, "application/x-ole-storage"},
	{"PAR1", kindParquet, "application/vnd.apache.parquet"},
	{"PK\x03\x04", kindZip, "application/zip"},
	{"PK\x05\x06", kindZip, "application/zip"},
	{"\x89PNG\r\n\x1a\n", kindPNG, "image/png"},
	{"\xff\xd8\xff", kindJPEG, "image/jpeg"},
	{"GIF87a", kindGIF, "image/gif"},
	{"GIF89a", kindGIF, "image/gif"},
	{"%PDF-", kindPDF, "application/pdf"},
	{"\x1f\x8b", kindArchive, "application/gzip"},
	{"BZh", kindArchive, "application/x-bzip2"},
	{"\xfd7zXZ\x00", kindArchive, "application/x-xz"},
	{"7z\xbc\xaf\x27\x1c", kindArchive, "application/x-7z-compressed"},
	{"Rar!\x1a\x07", kindArchive, "application/vnd.rar"},
	{"\x28\xb5\x2f\xfd", kindArchive, "application/zstd"},
}

// sniff tells the kind and MIME type of content from its head. Its own
// signatures come first; http.DetectContentType (the WHATWG algorithm)
// decides the rest, and markup is told apart by its first element.
func sniff(head []byte) (kind, string) {
	if len(head) > sniffLen {
		head = head[:sniffLen]
	}
	for _, m := range magics {
		if bytes.HasPrefix(head, []byte(m.prefix)) {
			return m.kind, m.mime
		}
	}
	if len(head) >= 12 && string(head[:4]) == "RIFF" && string(head[8:12]) == "WEBP" {
		return kindWebP, "image/webp"
	}
	mime := http.DetectContentType(head)
	base, _, _ := strings.Cut(mime, ";")
	switch {
	case base == "text/html" || base == "text/xml" || base == "text/plain":
		return sniffText(head)
	case strings.HasPrefix(base, "text/"):
		return kindText, "text/plain"
	case base == "application/wasm":
		return kindExec, base
	case base == "application/x-gzip" || base == "application/x-rar-compressed":
		return kindArchive, base
	}
	return kindBinary, base
}

// sniffText decides between plain text, HTML, SVG and other XML from the
// first element that the head holds; binary bytes make it binary.
func sniffText(head []byte) (kind, string) {
	if isBinary(head) {
		return kindBinary, "application/octet-stream"
	}
	switch firstElement(head) {
	case "":
		return kindText, "text/plain"
	case "svg":
		return kindSVG, "image/svg+xml"
	case "?xml":
		return kindXML, "application/xml"
	}
	return kindHTML, "text/html"
}

// isBinary reports bytes that never occur in text, per the WHATWG sniffing
// algorithm: C0 controls other than tab, newlines, form feed and escape.
func isBinary(b []byte) bool {
	for _, c := range b {
		if c <= 0x08 || c == 0x0b || (c >= 0x0e && c <= 0x1a) || (c >= 0x1c && c <= 0x1f) {
			return true
		}
	}
	return false
}

// firstElement returns the lower-cased local name of the first tag in head
// after white space, a byte-order mark, comments, a doctype and an XML
// declaration. It returns "?xml" when a declaration came first and the
// element is not svg, "?" when markup (a comment or doctype) came first but
// no element, and "" when the text does not start with markup at all. A tag
// is "<" and a letter, the way a browser's tokenizer sees it.
func firstElement(head []byte) string {
	s := strings.TrimPrefix(string(head), "\ufeff")
	seen := ""
	for {
		s = strings.TrimLeft(s, " \t\r\n\f")
		var closer string
		switch {
		case strings.HasPrefix(s, "<?"):
			closer, seen = "?>", "?xml"
		case strings.HasPrefix(s, "<!--"):
			closer = "-->"
		case strings.HasPrefix(s, "<!"):
			closer = ">"
		case len(s) > 1 && s[0] == '<' && isASCIILetter(s[1]):
			name := strings.ToLower(s[1:])
			if i := strings.IndexAny(name, " \t\r\n\f/>"); i >= 0 {
				name = name[:i]
			}
			if j := strings.LastIndexByte(name, ':'); j >= 0 {
				name = name[j+1:]
			}
			if name == "svg" || seen != "?xml" {
				return name
			}
			return seen
		default:
			return seen
		}
		if seen == "" {
			seen = "?"
		}
		end := strings.Index(s, closer)
		if end < 0 {
			return seen
		}
		s = s[end+len(closer):]
	}
}

// isASCIILetter reports whether c starts a tag name.
func isASCIILetter(c byte) bool { return c|0x20 >= 'a' && c|0x20 <= 'z' }
