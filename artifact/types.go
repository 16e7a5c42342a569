package artifact

import "fmt"

// rule is the content rule a file goes through.
type rule int

const (
	ruleReject rule = iota // refused on its type alone
	ruleCopy               // copied as it is
	ruleText               // copied, refused if it holds binary bytes
	ruleCSV                // rewritten by rewriteCSV
	ruleMarkup             // rewritten by sanitizeMarkup
	ruleZip                // copied, then scanned by scanZip
)

// class groups extensions that expect the same content.
type class int

const (
	classOther    class = iota // on the allowlist but unknown here
	classTable                 // csv, tsv
	classText                  // txt, log, json, yaml, ipynb…
	classMarkdown              // md
	classHTML                  // html, htm
	classXML                   // xml, svg
	classImage                 // png, jpg, gif, webp
	classPDF                   // pdf
	classParquet               // parquet
	classOffice                // xlsx, docx, pptx
	classZip                   // zip
)

// extType is what an extension promises.
type extType struct {
	class class
	mime  string
}

// extTypes are the extensions this package knows. An extension that a
// caller adds to the allowlist and that is not here is classOther.
var extTypes = map[string]extType{
	"csv": {classTable, "text/csv"}, "tsv": {classTable, "text/tab-separated-values"},
	"txt": {classText, "text/plain"}, "log": {classText, "text/plain"},
	"json": {classText, "application/json"}, "jsonl": {classText, "application/jsonl"},
	"ndjson": {classText, "application/x-ndjson"}, "yaml": {classText, "application/yaml"},
	"yml": {classText, "application/yaml"}, "ipynb": {classText, "application/x-ipynb+json"},
	"md":   {classMarkdown, "text/markdown"},
	"html": {classHTML, "text/html"}, "htm": {classHTML, "text/html"},
	"xml": {classXML, "application/xml"}, "svg": {classXML, "image/svg+xml"},
	"png": {classImage, "image/png"}, "jpg": {classImage, "image/jpeg"}, "jpeg": {classImage, "image/jpeg"},
	"gif": {classImage, "image/gif"}, "webp": {classImage, "image/webp"},
	"pdf":     {classPDF, "application/pdf"},
	"parquet": {classParquet, "application/vnd.apache.parquet"},
	"xlsx":    {classOffice, "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet"},
	"docx":    {classOffice, "application/vnd.openxmlformats-officedocument.wordprocessingml.document"},
	"pptx":    {classOffice, "application/vnd.openxmlformats-officedocument.presentationml.presentation"},
	"zip":     {classZip, "application/zip"},
}

// decision is what decide made of an extension and a sniffed kind.
type decision struct {
	rule   rule
	mime   string // the type to report
	note   string // a disagreement between extension and content, or ""
	reject string // why the file is refused on its type, or ""
}

// decide reconciles the extension with the sniffed content. The content
// wins: its kind picks the rule and the reported type, and a disagreement
// is noted. Pairs that a reader could be tricked by are refused: programs
// and OLE2 compound files under any name, markup or text under an image,
// PDF, Parquet or Office name, and binary content under a text name.
func decide(ext string, k kind, sniffed string) decision {
	t, known := extTypes[ext]
	if !known {
		t = extType{classOther, sniffed}
	}
	d := decision{mime: t.mime}
	mismatch := func() {
		d.mime = sniffed
		d.note = fmt.Sprintf("content is %s, not what .%s promises", sniffed, ext)
	}
	refuse := func(why string) decision {
		d.rule, d.mime = ruleReject, sniffed
		d.reject = why
		return d
	}
	switch k {
	case kindExec:
		return refuse(fmt.Sprintf("content is a program (%s)", sniffed))
	case kindCFB:
		return refuse("content is an OLE2 compound file (legacy or encrypted Office); its macros cannot be ruled out")
	}
	markup := k == kindHTML || k == kindSVG || k == kindXML
	switch t.class {
	case classTable:
		switch {
		case k == kindText:
			d.rule = ruleCSV
		case markup:
			return refuse(fmt.Sprintf("content is %s markup, not a .%s table", sniffed, ext))
		default:
			return refuse(fmt.Sprintf("content is binary (%s), not a .%s table", sniffed, ext))
		}
	case classText, classMarkdown, classHTML, classXML:
		switch {
		case k == kindText:
			d.rule = ruleText
			if t.class != classText {
				d.rule = ruleMarkup
			}
		case markup:
			d.rule = ruleMarkup
			if !markupFits(t.class, ext, k) {
				mismatch()
			}
		default:
			return refuse(fmt.Sprintf("content is binary (%s), not .%s text", sniffed, ext))
		}
	case classImage, classPDF, classParquet:
		if kindClass(k) != t.class {
			return refuse(fmt.Sprintf("content is %s, not a .%s file", sniffed, ext))
		}
		d.rule = ruleCopy
		if sniffed != t.mime {
			mismatch()
		}
	case classOffice, classZip:
		if k != kindZip {
			return refuse(fmt.Sprintf("content is %s, not a .%s archive", sniffed, ext))
		}
		d.rule = ruleZip
	default:
		d.rule = ruleCopy
		switch {
		case markup:
			d.rule = ruleMarkup
		case k == kindZip:
			d.rule = ruleZip
		}
	}
	return d
}

// markupFits reports whether markup of kind k is what the extension's
// class expects: any markup for html and md, SVG for .svg, SVG or XML (or
// an element without a declaration) for .xml.
func markupFits(c class, ext string, k kind) bool {
	switch {
	case c == classHTML || c == classMarkdown:
		return true
	case ext == "svg":
		return k == kindSVG
	case c == classXML:
		return true
	}
	return false
}

// kindClass maps binary kinds to the extension class that expects them.
func kindClass(k kind) class {
	switch k {
	case kindPNG, kindJPEG, kindGIF, kindWebP:
		return classImage
	case kindPDF:
		return classPDF
	case kindParquet:
		return classParquet
	}
	return classOther
}
