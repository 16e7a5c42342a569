package artifact

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"path"
	"strings"

	"golang.org/x/net/html"
)

// officeMIME maps the content type of an Office main part to the type of
// the file.
var officeMIME = map[string]string{
	"application/vnd.openxmlformats-officedocument.spreadsheetml.sheet.main+xml":         extTypes["xlsx"].mime,
	"application/vnd.openxmlformats-officedocument.wordprocessingml.document.main+xml":   extTypes["docx"].mime,
	"application/vnd.openxmlformats-officedocument.presentationml.presentation.main+xml": extTypes["pptx"].mime,
}

// riskyContentTypes are pieces of content types that mark macros, ActiveX,
// embedded OLE objects and links to other workbooks.
var riskyContentTypes = []struct{ piece, what string }{
	{"macroenabled", "macro-enabled content type"},
	{"vbaproject", "macro project (VBA)"},
	{"vbadata", "macro data (VBA)"},
	{"macrosheet", "Excel 4.0 macro sheet"},
	{"dialogsheet", "Excel dialog sheet"},
	{"activex", "ActiveX control"},
	{"oleobject", "embedded OLE object"},
	{"externallink", "link to an external workbook"},
}

// riskyParts are part names (lower case) that carry the same things.
var riskyParts = []struct {
	match func(string) bool
	what  string
}{
	{func(n string) bool { return strings.HasPrefix(path.Base(n), "vbaproject") }, "macro project (VBA)"},
	{func(n string) bool { return path.Base(n) == "vbadata.xml" }, "macro data (VBA)"},
	{func(n string) bool { return strings.Contains("/"+n, "/activex/") }, "ActiveX control"},
	{func(n string) bool { return strings.HasPrefix(n, "xl/externallinks/") }, "link to an external workbook"},
	{func(n string) bool { return strings.HasPrefix(n, "xl/macrosheets/") }, "Excel 4.0 macro sheet"},
	{func(n string) bool { return strings.HasPrefix(n, "xl/dialogsheets/") }, "Excel dialog sheet"},
}

// riskyFields are Word field types that run or fetch something: DDE runs a
// program, the others pull content from another file or location.
var riskyFields = map[string]string{
	"DDE": "DDE field", "DDEAUTO": "DDE field", "INCLUDETEXT": "field that includes another file",
	"INCLUDEPICTURE": "field that includes another file", "LINK": "field that links another file",
	"IMPORT": "field that includes another file",
}

// riskyFunctions are spreadsheet functions that call code or the network.
var riskyFunctions = []string{"WEBSERVICE(", "CALL(", "REGISTER(", "REGISTER.ID(", "EXEC("}

// ooxmlScan collects what the parts of an Office Open XML package say.
type ooxmlScan struct {
	mainType string // content type of the main part
}

// mime is the type of the package, from its main part.
func (ox *ooxmlScan) mime() string {
	if m, ok := officeMIME[ox.mainType]; ok {
		return m
	}
	return "application/zip"
}

// part checks one part of an Office package: its name, its head (OLE2
// objects, programs, nested packages), and for the parts that can carry
// them, content types, relationships, Word fields and formulas.
func (c *checker) part(name string, r io.Reader, ox *ooxmlScan, nest *nesting) (string, error) {
	lower := strings.ToLower(name)
	for _, rp := range riskyParts {
		if rp.match(lower) {
			return rp.what, nil
		}
	}
	br := bufio.NewReaderSize(r, sniffLen)
	switch peekKind(br) {
	case kindCFB:
		return "embedded OLE2 object (it may hold macros or a program)", nil
	case kindExec:
		return "embedded program", nil
	case kindZip:
		var o outcome
		if err := c.zip(br, sink{w: io.Discard}, nest, &o); err != nil {
			return "", err
		}
		return o.reject, nil
	}
	switch {
	case lower == "[content_types].xml":
		return walkXML(br, ox.contentTypes)
	case strings.HasSuffix(lower, ".rels"):
		return walkXML(br, relationships)
	case strings.HasPrefix(lower, "word/") && strings.HasSuffix(lower, ".xml"):
		return walkXML(br, (&fieldScan{}).token)
	case strings.HasPrefix(lower, "xl/") && strings.HasSuffix(lower, ".xml"):
		return walkXML(br, (&formulaScan{}).token)
	}
	_, err := io.Copy(io.Discard, br)
	return "", err
}

// xmlToken is one token of walkXML: a start tag (with attributes), an
// end tag or text.
type xmlToken struct {
	tt    html.TokenType
	local string
	attrs []tagAttr
	text  string
}

// walkXML tokenizes an XML part with the tokenizer of the markup rule (no
// raw text, bounded tokens) and calls fn on every tag and text until fn
// returns a reason to refuse.
func walkXML(r io.Reader, fn func(xmlToken) string) (string, error) {
	z := html.NewTokenizer(r)
	z.SetMaxBuf(maxToken)
	s := &sanitizer{z: z}
	for {
		tt := z.Next()
		var t xmlToken
		switch tt {
		case html.ErrorToken:
			switch err := z.Err(); {
			case err == io.EOF:
				return fn(xmlToken{tt: html.ErrorToken}), nil
			case errors.Is(err, html.ErrBufferExceeded):
				return fmt.Sprintf("an XML token is larger than %d bytes", maxToken), nil
			default:
				return "", err
			}
		case html.StartTagToken, html.SelfClosingTagToken:
			z.NextIsNotRawText()
			t.local, t.attrs = s.readTag()
		case html.EndTagToken:
			name, _ := z.TagName()
			t.local = localName(name)
		case html.TextToken:
			t.text = string(z.Text())
		default:
			continue
		}
		t.tt = tt
		if why := fn(t); why != "" {
			return why, nil
		}
	}
}

// attr returns the value of the attribute with the given local name.
func (t xmlToken) attr(local string) string {
	for _, a := range t.attrs {
		if a.local == local {
			return a.val
		}
	}
	return ""
}

// contentTypes checks the Default and Override entries of
// [Content_Types].xml and notes the main part's type.
func (ox *ooxmlScan) contentTypes(t xmlToken) string {
	if t.tt != html.StartTagToken && t.tt != html.SelfClosingTagToken {
		return ""
	}
	ct := strings.ToLower(t.attr("contenttype"))
	for _, r := range riskyContentTypes {
		if strings.Contains(ct, r.piece) {
			return fmt.Sprintf("%s (%s)", r.what, ct)
		}
	}
	if _, ok := officeMIME[ct]; ok {
		ox.mainType = ct
	}
	return ""
}

// relationships checks a .rels part: a relationship to outside the package
// is allowed only as a hyperlink to an http, https, mailto or tel URL;
// relationships to macro projects and controls are refused too.
func relationships(t xmlToken) string {
	if t.local != "relationship" || t.tt == html.EndTagToken {
		return ""
	}
	typ, target := t.attr("type"), t.attr("target")
	kind := typ[strings.LastIndexByte(typ, '/')+1:]
	switch strings.ToLower(kind) {
	case "vbaproject", "wordvbadata":
		return "macro project (VBA)"
	case "control", "activexcontrolbinary":
		return "ActiveX control"
	}
	if !strings.EqualFold(t.attr("targetmode"), "external") {
		return ""
	}
	if kind == "hyperlink" && classifyURL(target) == urlLink {
		return ""
	}
	return fmt.Sprintf("external relationship %s to %s", kind, truncate(target, 80))
}

// fieldScan follows the fields of a WordprocessingML part: simple fields
// carry their instruction in an attribute, complex ones in instrText runs
// between fldChar begin and separate or end.
type fieldScan struct {
	open    []*fieldState
	inInstr bool
}

// fieldState is one complex field being read.
type fieldState struct {
	instr    strings.Builder
	computed bool // its type comes from a nested field
	done     bool
}

// token handles one token of a Word part.
func (fs *fieldScan) token(t xmlToken) string {
	switch t.tt {
	case html.StartTagToken, html.SelfClosingTagToken:
		switch t.local {
		case "fldsimple":
			return fieldRisk(t.attr("instr"), false)
		case "fldchar":
			return fs.fieldChar(strings.ToLower(t.attr("fldchartype")))
		case "instrtext":
			fs.inInstr = t.tt == html.StartTagToken
		}
	case html.EndTagToken:
		if t.local == "instrtext" {
			fs.inInstr = false
		}
	case html.TextToken:
		if fs.inInstr && len(fs.open) > 0 {
			fs.open[len(fs.open)-1].instr.WriteString(t.text)
		} else if fs.inInstr {
			return fieldRisk(t.text, false)
		}
	case html.ErrorToken:
		for _, f := range fs.open {
			if why := f.check(); why != "" {
				return why
			}
		}
	}
	return ""
}

// fieldChar handles a begin, separate or end mark of a complex field.
func (fs *fieldScan) fieldChar(typ string) string {
	switch typ {
	case "begin":
		if n := len(fs.open); n > 0 && strings.TrimSpace(fs.open[n-1].instr.String()) == "" {
			fs.open[n-1].computed = true
		}
		fs.open = append(fs.open, &fieldState{})
	case "separate", "end":
		n := len(fs.open)
		if n == 0 {
			return ""
		}
		f := fs.open[n-1]
		if why := f.check(); why != "" {
			return why
		}
		if typ == "end" {
			fs.open = fs.open[:n-1]
		}
	}
	return ""
}

// check evaluates a complex field once.
func (f *fieldState) check() string {
	if f.done {
		return ""
	}
	f.done = true
	return fieldRisk(f.instr.String(), f.computed)
}

// fieldRisk returns why a field instruction is refused, or "". A field
// whose type is computed by a nested field cannot be told and is refused.
func fieldRisk(instr string, computed bool) string {
	if computed {
		return "field whose type is computed by a nested field"
	}
	words := strings.Fields(instr)
	if len(words) == 0 {
		return ""
	}
	typ := strings.ToUpper(strings.Trim(words[0], `"'\`))
	if what, ok := riskyFields[typ]; ok {
		return fmt.Sprintf("%s (%s)", what, truncate(strings.Join(words, " "), 80))
	}
	return ""
}

// formulaScan looks at the formulas (f) and defined names of a
// SpreadsheetML part.
type formulaScan struct {
	in      bool
	formula strings.Builder
}

// token handles one token of a spreadsheet part.
func (fs *formulaScan) token(t xmlToken) string {
	isFormula := t.local == "f" || t.local == "definedname"
	switch t.tt {
	case html.StartTagToken:
		if isFormula {
			fs.in = true
			fs.formula.Reset()
		}
	case html.TextToken:
		if fs.in {
			fs.formula.WriteString(t.text)
		}
	case html.EndTagToken:
		if isFormula && fs.in {
			fs.in = false
			return formulaRisk(fs.formula.String())
		}
	}
	return ""
}

// formulaRisk returns why a formula is refused: a DDE reference
// (program|topic!item, a '|' outside strings and quoted sheet names), or a
// function that calls code or the network.
func formulaRisk(f string) string {
	var bare strings.Builder
	var quote byte
	for i := 0; i < len(f); i++ {
		c := f[i]
		switch {
		case quote != 0 && c == quote:
			quote = 0
		case quote != 0:
		case c == '"' || c == '\'':
			quote = c
		default:
			bare.WriteByte(c)
		}
	}
	code := strings.ToUpper(bare.String())
	if strings.Contains(code, "|") {
		return "DDE formula (" + truncate(f, 80) + ")"
	}
	for _, fn := range riskyFunctions {
		if strings.Contains(code, fn) {
			return "formula calls " + strings.TrimSuffix(fn, "(")
		}
	}
	return ""
}
