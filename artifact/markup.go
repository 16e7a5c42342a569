package artifact

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"

	"golang.org/x/net/html"
)

// Caps of the markup rule.
const (
	// maxToken caps one token (a tag with its attributes, or a run of
	// text); base64 images inside attributes make tags of megabytes.
	maxToken = 16 << 20
	// maxStyle caps the text of one <style> element, which is held until
	// its end to be checked as a whole.
	maxStyle = 4 << 20
)

// Categories of active content, as reasons name them.
const (
	catScript  = "script elements"
	catHandler = "event handlers"
	catJSURL   = "script URLs"
	catFrame   = "frames, objects or embeds"
	catRemote  = "remote references"
	catMeta    = "meta refresh or cookie elements"
	catBase    = "base elements"
	catStyle   = "styles that load or run something"
	catAnimate = "animations of href"
	catPI      = "xml-stylesheet instructions"
	// catCutTag is not active content: a tag cut off at the end is escaped.
	catCutTag = "tags cut off at the end of the file (escaped as text)"
)

// dropWithContent are elements removed together with everything inside.
var dropWithContent = map[string]string{
	"script": catScript, "handler": catScript, "listener": catScript,
	"iframe": catFrame, "frameset": catFrame, "object": catFrame, "applet": catFrame,
	"foreignobject": catFrame, "portal": catFrame, "fencedframe": catFrame,
}

// dropVoid are elements without content that are removed alone.
var dropVoid = map[string]string{"embed": catFrame, "frame": catFrame, "base": catBase}

// animations are the SVG elements that can set an attribute over time.
var animations = map[string]bool{"set": true, "animate": true, "animatemotion": true, "animatetransform": true, "animatecolor": true}

// urlAttrs are the attributes that hold URLs. srcset-like ones hold a list.
var urlAttrs = map[string]bool{
	"href": true, "src": true, "action": true, "formaction": true, "data": true,
	"poster": true, "background": true, "lowsrc": true, "dynsrc": true, "codebase": true,
	"longdesc": true, "cite": true, "ping": true, "manifest": true, "icon": true,
	"profile": true, "classid": true, "archive": true, "usemap": true, "srcdoc": true,
	"srcset": true, "imagesrcset": true, "base": true,
}

// markupResult is what sanitizeMarkup found.
type markupResult struct {
	removed map[string]int // category → count
	reject  string         // why the file must be refused, when it must
}

// fixes describes the removals for a sanitized verdict.
func (m markupResult) fixes() []string {
	var out []string
	for _, cat := range slices.Sorted(maps.Keys(m.removed)) {
		out = append(out, fmt.Sprintf("removed %d %s", m.removed[cat], cat))
	}
	return out
}

// sanitizer holds the state of one sanitizeMarkup run.
type sanitizer struct {
	z          *html.Tokenizer
	w          *bufio.Writer
	rejectMode bool
	res        markupResult
	raw        []byte
	skipName   string // local name of the element being dropped
	skipDepth  int
	style      *styleBuf
	rawOpen    string // a kept element that HTML reads as raw text, while open
}

// rawTextElements are read by an HTML parser as text up to "</name": a
// comment or attribute value that this tokenizer sees inside one of them
// may hold that end for a browser, and markup after it.
var rawTextElements = map[string]bool{
	"style": true, "textarea": true, "title": true, "xmp": true, "noembed": true,
	"noframes": true, "noscript": true, "plaintext": true, "iframe": true, "script": true,
}

// styleBuf holds a <style> element until its end tag.
type styleBuf struct {
	raw     bytes.Buffer    // the element as written
	text    strings.Builder // its text as written, as an HTML parser reads it
	decoded strings.Builder // its text with entities decoded, as XML reads it
	markup  bool            // it holds tags, which XML would read as children
}

// sanitizeMarkup copies HTML, SVG or XML from r to w and removes active
// content: script-like elements with their content; frames, objects,
// embeds and SVG foreignObject; base elements; meta refresh; event-handler
// attributes (on*); URLs with a script scheme or a data: type other than a
// raster image; URLs that make the browser fetch from elsewhere (a remote
// src, href or CSS url(), including SVG use and image); animations of href;
// styles that load or run something; xml-stylesheet instructions. Links a
// person clicks (a and area href to http, https, mailto, tel) stay.
//
// Markup is tokenized with golang.org/x/net/html in one mode for HTML and
// XML alike, the most revealing one: no element is read as raw text and
// CDATA is not honoured, so every tag that either an HTML or an XML parser
// could see is seen here; tokens that stay are copied byte for byte. A
// DOCTYPE with an internal subset (entity declarations, which XML parsers
// expand) is refused. With rejectMode the first finding refuses the file
// and nothing is removed.
func sanitizeMarkup(r io.Reader, w io.Writer, rejectMode bool) (markupResult, error) {
	s := &sanitizer{z: html.NewTokenizer(r), w: bufio.NewWriterSize(w, 64<<10), rejectMode: rejectMode}
	s.res.removed = map[string]int{}
	s.z.SetMaxBuf(maxToken)
	err := s.run()
	if ferr := s.w.Flush(); err == nil {
		err = ferr
	}
	return s.res, err
}

// run handles token after token until the input ends or the file is refused.
func (s *sanitizer) run() error {
	for {
		tt := s.z.Next()
		s.raw = append(s.raw[:0], s.z.Raw()...)
		var err error
		switch tt {
		case html.ErrorToken:
			return s.end()
		case html.StartTagToken, html.SelfClosingTagToken:
			s.z.NextIsNotRawText()
			s.checkRawEnd()
			err = s.startTag(tt == html.SelfClosingTagToken)
		case html.EndTagToken:
			err = s.endTag()
		case html.TextToken:
			err = s.text()
		case html.CommentToken:
			s.checkRawEnd()
			err = s.comment()
		case html.DoctypeToken:
			s.checkRawEnd()
			if bytes.IndexByte(s.raw, '[') >= 0 {
				s.res.reject = "DOCTYPE with an internal subset (entity declarations)"
				return nil
			}
			err = s.emit(s.raw)
		}
		if err != nil || s.res.reject != "" {
			return err
		}
	}
}

// checkRawEnd refuses the file when the current tag, comment or doctype
// holds the end of a raw-text element that is open: a browser would close
// the element there and read what follows as markup, which this tokenizer
// took for an attribute value or a comment.
func (s *sanitizer) checkRawEnd() {
	if s.rawOpen != "" && s.skipName == "" && bytes.Contains(bytes.ToLower(s.raw), []byte("</"+s.rawOpen)) {
		s.res.reject = fmt.Sprintf("markup hides the end of a <%s> element", s.rawOpen)
	}
}

// end handles the end of input: EOF, a read error or an oversized token.
func (s *sanitizer) end() error {
	err := s.z.Err()
	switch {
	case errors.Is(err, html.ErrBufferExceeded):
		s.res.reject = fmt.Sprintf("a markup token is larger than %d bytes", maxToken)
		return nil
	case err != io.EOF:
		return err
	}
	if s.style != nil {
		s.found(catStyle) // an unterminated style swallows the rest: drop it
	}
	if len(s.raw) > 0 && s.skipName == "" {
		// A tag cut off by the end of the file: browsers drop it, but
		// markup appended later could complete it, and in Markdown it is
		// text ("a<b"). Written escaped, it stays text everywhere.
		s.res.removed[catCutTag]++
		return s.emit(bytes.ReplaceAll(s.raw, []byte("<"), []byte("&lt;")))
	}
	return nil
}

// found records one piece of active content.
func (s *sanitizer) found(cat string) {
	s.res.removed[cat]++
	if s.rejectMode {
		s.res.reject = "active content: " + cat
	}
}

// emit writes bytes that stay, into the style buffer while one is open.
func (s *sanitizer) emit(b []byte) error {
	if s.style != nil {
		s.style.raw.Write(b)
		if s.style.raw.Len() > maxStyle {
			s.style = nil
			s.found(catStyle)
			s.skipName, s.skipDepth = "style", 1
		}
		return nil
	}
	_, err := s.w.Write(b)
	return err
}

// localName strips a namespace prefix: svg:script is a script.
func localName(name []byte) string {
	if i := bytes.LastIndexByte(name, ':'); i >= 0 {
		name = name[i+1:]
	}
	return string(name)
}

// tagAttr is one attribute as the tokenizer read it.
type tagAttr struct{ key, local, val string }

// readTag returns the local name and the attributes of the current tag.
func (s *sanitizer) readTag() (string, []tagAttr) {
	name, more := s.z.TagName()
	local := localName(name)
	var attrs []tagAttr
	for more {
		var k, v []byte
		k, v, more = s.z.TagAttr()
		attrs = append(attrs, tagAttr{key: string(k), local: localName(k), val: string(v)})
	}
	return local, attrs
}

// startTag handles a start or self-closing tag.
func (s *sanitizer) startTag(selfClosing bool) error {
	local, attrs := s.readTag()
	if s.skipName != "" {
		if local == s.skipName && !selfClosing {
			s.skipDepth++
		}
		return nil
	}
	if s.style != nil {
		s.style.markup = true
		return s.emit(s.raw)
	}
	if cat := elementRisk(local, attrs); cat != "" {
		s.found(cat)
		if _, void := dropVoid[local]; !selfClosing && !void && local != "meta" {
			s.skipName, s.skipDepth = local, 1
		}
		return nil
	}
	if rawTextElements[local] && s.rawOpen == "" {
		s.rawOpen = local
	}
	if local == "style" && !selfClosing {
		s.style = &styleBuf{}
	}
	keep := make([]bool, len(attrs))
	dropped := false
	for i, a := range attrs {
		cat := attrRisk(local, a)
		keep[i] = cat == ""
		if cat != "" {
			s.found(cat)
			dropped = true
		}
	}
	if !dropped {
		return s.emit(s.raw)
	}
	if s.rejectMode {
		return nil
	}
	tag, ok := rebuildTag(s.raw, attrs, keep, selfClosing)
	if !ok {
		s.res.reject = "a tag could not be rewritten safely"
		return nil
	}
	return s.emit(tag)
}

// endTag handles an end tag.
func (s *sanitizer) endTag() error {
	name, _ := s.z.TagName()
	local := localName(name)
	if s.skipName != "" {
		if local == s.skipName {
			if s.skipDepth--; s.skipDepth == 0 {
				s.skipName = ""
			}
		}
		return nil
	}
	if local == s.rawOpen {
		s.rawOpen = ""
	}
	if s.style != nil && local == "style" {
		return s.closeStyle()
	}
	return s.emit(s.raw)
}

// closeStyle checks a buffered style element as a whole and writes it, or
// drops it when it loads or runs something or holds markup.
func (s *sanitizer) closeStyle() error {
	st := s.style
	s.style = nil
	if st.markup || cssRisk(st.text.String()) != "" || cssRisk(st.decoded.String()) != "" {
		s.found(catStyle)
		return nil
	}
	if err := s.emit(st.raw.Bytes()); err != nil {
		return err
	}
	return s.emit(s.raw)
}

// text handles a run of text.
func (s *sanitizer) text() error {
	if s.skipName != "" {
		return nil
	}
	if s.style != nil {
		s.style.text.Write(s.raw)
		s.style.decoded.Write(s.z.Text())
	}
	return s.emit(s.raw)
}

// comment handles comments, processing instructions and bogus comments.
func (s *sanitizer) comment() error {
	if s.skipName != "" {
		return nil
	}
	if bytes.HasPrefix(bytes.ToLower(s.raw), []byte("<?xml-stylesheet")) {
		s.found(catPI)
		return nil
	}
	return s.emit(s.raw)
}

// elementRisk returns the category of an element that goes as a whole, or "".
func elementRisk(local string, attrs []tagAttr) string {
	if cat, ok := dropWithContent[local]; ok {
		return cat
	}
	if cat, ok := dropVoid[local]; ok {
		return cat
	}
	switch {
	case local == "meta":
		for _, a := range attrs {
			if a.local == "http-equiv" {
				v := strings.ToLower(strings.TrimSpace(a.val))
				if v == "refresh" || v == "set-cookie" {
					return catMeta
				}
			}
		}
	case animations[local]:
		for _, a := range attrs {
			if a.local == "attributename" {
				v := strings.ToLower(strings.TrimSpace(a.val))
				if i := strings.LastIndexByte(v, ':'); i >= 0 {
					v = v[i+1:]
				}
				if v == "href" || strings.HasPrefix(v, "on") || v == "style" {
					return catAnimate
				}
			}
		}
	}
	return ""
}

// attrRisk returns the category of an attribute that must go, or "".
func attrRisk(element string, a tagAttr) string {
	switch {
	case strings.HasPrefix(a.local, "on"):
		return catHandler
	case a.local == "style":
		if cssRisk(a.val) != "" {
			return catStyle
		}
		return ""
	case urlAttrs[a.local]:
		return urlRisk(element, a)
	case strings.Contains(strings.ToLower(a.val), "url("):
		if cssRisk(a.val) != "" {
			return catRemote
		}
	}
	return ""
}

// urlRisk classifies the URL or URL list of an attribute.
func urlRisk(element string, a tagAttr) string {
	urls := []string{a.val}
	if a.local == "srcset" || a.local == "imagesrcset" {
		urls = urls[:0]
		for part := range strings.SplitSeq(a.val, ",") {
			if f := strings.Fields(part); len(f) > 0 {
				urls = append(urls, f[0])
			}
		}
	}
	link := a.local == "href" && (element == "a" || element == "area")
	for _, u := range urls {
		switch classifyURL(u) {
		case urlScript:
			return catJSURL
		case urlRemote:
			return catRemote
		case urlLink:
			if !link {
				return catRemote
			}
		}
	}
	return ""
}

// attrSpan is where one attribute's name sits in a raw tag.
type attrSpan struct {
	key        string // lower-cased
	start, end int    // the name, case kept
}

// scanAttrs finds the attribute names of a raw start tag the way the
// x/net/html tokenizer reads them (WHATWG tag states): it returns the end
// of the tag name and the names with their original case, first of
// duplicates only, empty names skipped.
func scanAttrs(raw []byte) (int, []attrSpan) {
	isSpace := func(c byte) bool { return c == ' ' || c == '\n' || c == '\r' || c == '\t' || c == '\f' }
	i := 1
	for i < len(raw) && !isSpace(raw[i]) && raw[i] != '/' && raw[i] != '>' {
		i++
	}
	nameEnd := i
	skip := func() {
		for i < len(raw) && isSpace(raw[i]) {
			i++
		}
	}
	var spans []attrSpan
	seen := map[string]bool{}
	for skip(); i < len(raw) && raw[i] != '>'; skip() {
		start := i
		for i < len(raw) {
			c := raw[i]
			if c == '=' && i == start {
				i++
				continue
			}
			if c == '=' || isSpace(c) || c == '/' || c == '>' {
				break
			}
			i++
		}
		keyEnd := i
		i = skipAttrValue(raw, i)
		key := strings.ToLower(string(raw[start:keyEnd]))
		if keyEnd > start && !seen[key] {
			seen[key] = true
			spans = append(spans, attrSpan{key: key, start: start, end: keyEnd})
		}
	}
	return nameEnd, spans
}

// skipAttrValue moves past "= value" after an attribute name, if any.
func skipAttrValue(raw []byte, i int) int {
	isSpace := func(c byte) bool { return c == ' ' || c == '\n' || c == '\r' || c == '\t' || c == '\f' }
	for i < len(raw) && isSpace(raw[i]) {
		i++
	}
	if i >= len(raw) {
		return i
	}
	switch raw[i] {
	case '/':
		return i + 1
	case '=':
		i++
	default:
		return i
	}
	for i < len(raw) && isSpace(raw[i]) {
		i++
	}
	if i >= len(raw) || raw[i] == '>' {
		return i
	}
	if q := raw[i]; q == '"' || q == '\'' {
		if end := bytes.IndexByte(raw[i+1:], q); end >= 0 {
			return i + 1 + end + 1
		}
		return len(raw)
	}
	for i < len(raw) && !isSpace(raw[i]) && raw[i] != '>' {
		i++
	}
	return i
}

// rebuildTag writes a start tag with only the kept attributes, names in
// their original case (SVG's viewBox must stay viewBox) and values quoted
// and escaped. It fails when its own reading of the names disagrees with
// the tokenizer's.
func rebuildTag(raw []byte, attrs []tagAttr, keep []bool, selfClosing bool) ([]byte, bool) {
	nameEnd, spans := scanAttrs(raw)
	if len(spans) != len(attrs) {
		return nil, false
	}
	var b bytes.Buffer
	b.Write(raw[:nameEnd])
	for i, a := range attrs {
		if spans[i].key != a.key {
			return nil, false
		}
		if !keep[i] {
			continue
		}
		b.WriteByte(' ')
		b.Write(raw[spans[i].start:spans[i].end])
		b.WriteString(`="`)
		b.WriteString(html.EscapeString(a.val))
		b.WriteByte('"')
	}
	if selfClosing {
		b.WriteByte('/')
	}
	b.WriteByte('>')
	return b.Bytes(), true
}
