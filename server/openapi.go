package server

import (
	"encoding"
	"encoding/json"
	"fmt"
	"io/fs"
	"net/http"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/sandbox"
)

// routeDoc is what the OpenAPI document says of one route. The body and
// answer types are given as values (api.Session{}): their JSON schemas
// are read from the Go types by reflection, so the document cannot drift
// from what the handlers read and write.
type routeDoc struct {
	// ID is the operation's id, Tag its group, Summary one line on it.
	ID, Tag, Summary string
	// Request is a value of the JSON body's type; nil when the route
	// takes none.
	Request any
	// RawRequest describes a body of raw bytes; "" when there is none.
	RawRequest string
	// Status is the success status; Response a value of its JSON body's
	// type, nil for an empty answer.
	Status   int
	Response any
	// RawResponse describes an answer of raw bytes at Status, beside
	// Response (a file download, or a folder's listing).
	RawResponse string
	// Stream is a value of the event type of the NDJSON answer at Status
	// that a client asking for it (Accept: application/x-ndjson) gets.
	Stream any
	// Also lists other success answers.
	Also []answer
	// Query lists the query parameters.
	Query []param
	// Errors lists the error statuses besides those of every API route
	// (401, 429, 500, 503).
	Errors []int
}

// answer is one more success answer of a route.
type answer struct {
	Status      int
	Type        any
	Description string
}

// param is one query parameter.
type param struct {
	Name, Type, Description string
}

// commonErrors are the statuses any authenticated route may answer.
var commonErrors = []int{401, 429, 500, 503}

// errorDescriptions say what each error status means here.
var errorDescriptions = map[int]string{
	400: "the request is malformed: a bad body, path or parameter (code invalid)",
	401: "no API key, or one the server does not know (code unauthorized)",
	403: "the artifact filter rejected the file (code forbidden); X-Airlock-Verdict and X-Airlock-Reason say why",
	404: "no such session, file, process or context for this tenant; another tenant's is not found either (code not_found)",
	408: "the body did not arrive in time (code timeout)",
	409: "something that must not exist does, or a process has no open stdin (code conflict)",
	410: "the session existed and ended: TTL, idle timeout, deleted, its sandbox died (code ended)",
	413: "the body is over the server's cap, or a file over the sandbox's (code too_large)",
	429: "the key's rate (code rate_limited) or the tenant's quota (code limit) is full; Retry-After says when to try again",
	500: "the server failed (code internal); the message names the request id",
	501: "the server or its backend cannot do this (code unsupported)",
	503: "the server is shutting down (code unavailable)",
}

// serveOpenAPI serves the OpenAPI document that New built.
func (s *Server) serveOpenAPI(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", api.ContentJSON)
	w.Header().Set("Cache-Control", "no-cache")
	_, _ = w.Write(s.openapi)
}

// pathParam finds the {name} and {name...} wildcards of a pattern.
var pathParam = regexp.MustCompile(`\{([a-z]+)(\.\.\.)?\}`)

// openAPIPath is a mux pattern as an OpenAPI path: {path...} is {path}.
func openAPIPath(pattern string) string {
	return pathParam.ReplaceAllString(pattern, "{$1}")
}

// pathParams describe the wildcards of the routes.
var pathParams = map[string]string{
	"id":      "the session's id",
	"pid":     "the background process's id",
	"path":    "a path relative to /workspace (input/data.csv, output/chart.png), or tmp/… for /tmp; it may hold slashes",
	"context": "the interpreter context's id",
}

// mountedMethods are the methods an Extra handler mounted without one is
// documented under.
var mountedMethods = []string{"GET", "POST", "PUT", "DELETE"}

// buildOpenAPI writes the OpenAPI 3.1 document of every route.
func (s *Server) buildOpenAPI() ([]byte, error) {
	g := &schemaGen{names: map[reflect.Type]string{}, schemas: map[string]any{}}
	paths := map[string]map[string]any{}
	for _, rt := range s.routes {
		p := openAPIPath(rt.Pattern)
		if paths[p] == nil {
			paths[p] = map[string]any{}
		}
		methods := []string{rt.Method}
		if rt.Method == "" {
			methods = mountedMethods
		}
		for _, m := range methods {
			op, err := g.operation(rt, m)
			if err != nil {
				return nil, fmt.Errorf("%s %s: %w", m, rt.Pattern, err)
			}
			key := strings.ToLower(m)
			if _, dup := paths[p][key]; dup {
				return nil, fmt.Errorf("%s %s: documented twice", m, p)
			}
			paths[p][key] = op
		}
	}
	errResponses := map[string]any{}
	for status, desc := range errorDescriptions {
		r := map[string]any{"description": desc, "content": map[string]any{api.ContentJSON: map[string]any{"schema": ref("Error")}}}
		h := map[string]any{"X-Request-Id": map[string]any{"$ref": "#/components/headers/RequestID"}}
		switch status {
		case 429, 503:
			h["Retry-After"] = map[string]any{"description": "seconds to wait before trying again", "schema": map[string]any{"type": "integer"}}
		case 403:
			h["X-Airlock-Verdict"] = map[string]any{"$ref": "#/components/headers/Verdict"}
			h["X-Airlock-Reason"] = map[string]any{"$ref": "#/components/headers/Reason"}
		}
		r["headers"] = h
		errResponses[strconv.Itoa(status)] = r
	}
	if _, err := g.schema(reflect.TypeFor[api.Error](), true); err != nil {
		return nil, err
	}
	doc := map[string]any{
		"openapi": "3.1.0",
		"info": map[string]any{
			"title":   "airlock HTTP API",
			"version": "v1",
			"description": "Sessions of sandboxes for code an LLM wrote: files, commands, background processes, code, artifacts and the audit log. " +
				"Send the key as 'Authorization: Bearer KEY'; each key belongs to a tenant, which never sees another's sessions (404). " +
				"JSON bodies are decoded strictly: an unknown field is a 400. Streams are NDJSON, one event per line, sent as they happen.",
		},
		"security": []any{map[string]any{"bearer": []any{}}},
		"paths":    paths,
		"components": map[string]any{
			"schemas":         g.schemas,
			"responses":       errResponses,
			"securitySchemes": map[string]any{"bearer": map[string]any{"type": "http", "scheme": "bearer", "description": "an API key of the server's keys file"}},
			"headers": map[string]any{
				"RequestID": map[string]any{"description": "names the request in the server's log; a client may send its own", "schema": map[string]any{"type": "string"}},
				"Verdict":   map[string]any{"description": "the artifact filter's verdict: accepted, sanitized or rejected", "schema": map[string]any{"type": "string", "enum": []string{sandbox.VerdictAccepted, sandbox.VerdictSanitized, sandbox.VerdictRejected}}},
				"Reason":    map[string]any{"description": "why the filter sanitized or rejected the file", "schema": map[string]any{"type": "string"}},
			},
		},
	}
	return json.MarshalIndent(doc, "", "  ")
}

// operation documents one method of a route.
func (g *schemaGen) operation(rt route, method string) (map[string]any, error) {
	d := rt.Doc
	op := map[string]any{}
	if rt.Mounted {
		op["summary"] = "served by a handler mounted beside the API (Options.Extra), which authenticates itself"
		op["security"] = []any{}
		op["responses"] = map[string]any{"default": map[string]any{"description": "the mounted handler's answer"}}
		op["operationId"] = strings.ToLower(method) + strings.NewReplacer("/", "_", "{", "", "}", "", ".", "").Replace(rt.Pattern)
		return op, nil
	}
	if d.ID == "" || d.Summary == "" || d.Status == 0 {
		return nil, fmt.Errorf("no documentation: give its routeDoc an ID, a Summary and a Status")
	}
	op["operationId"], op["summary"] = d.ID, d.Summary
	if d.Tag != "" {
		op["tags"] = []string{d.Tag}
	}
	if rt.Public {
		op["security"] = []any{}
	}
	var params []any
	for _, m := range pathParam.FindAllStringSubmatch(rt.Pattern, -1) {
		desc, ok := pathParams[m[1]]
		if !ok {
			return nil, fmt.Errorf("path parameter {%s} has no description", m[1])
		}
		params = append(params, map[string]any{"name": m[1], "in": "path", "required": true, "description": desc, "schema": map[string]any{"type": "string"}})
	}
	for _, q := range d.Query {
		params = append(params, map[string]any{"name": q.Name, "in": "query", "description": q.Description, "schema": map[string]any{"type": q.Type}})
	}
	if params != nil {
		op["parameters"] = params
	}
	switch {
	case d.Request != nil && d.RawRequest != "":
		return nil, fmt.Errorf("both a JSON and a raw body")
	case d.Request != nil:
		sc, err := g.schema(reflect.TypeOf(d.Request), true)
		if err != nil {
			return nil, err
		}
		op["requestBody"] = map[string]any{"required": true, "content": map[string]any{api.ContentJSON: map[string]any{"schema": sc}}}
	case d.RawRequest != "":
		op["requestBody"] = map[string]any{"required": true, "description": d.RawRequest,
			"content": map[string]any{"application/octet-stream": map[string]any{"schema": map[string]any{"type": "string", "format": "binary"}}}}
	}
	responses := map[string]any{}
	main := map[string]any{"description": http.StatusText(d.Status)}
	content := map[string]any{}
	if d.Response != nil {
		sc, err := g.schema(reflect.TypeOf(d.Response), true)
		if err != nil {
			return nil, err
		}
		content[api.ContentJSON] = map[string]any{"schema": sc}
	}
	if d.RawResponse != "" {
		main["description"] = d.RawResponse + "; a folder answers its listing as JSON"
		content["application/octet-stream"] = map[string]any{"schema": map[string]any{"type": "string", "format": "binary"}}
		main["headers"] = map[string]any{
			"X-Airlock-Verdict": map[string]any{"$ref": "#/components/headers/Verdict"},
			"X-Airlock-Reason":  map[string]any{"$ref": "#/components/headers/Reason"},
		}
	}
	if d.Stream != nil {
		sc, err := g.schema(reflect.TypeOf(d.Stream), true)
		if err != nil {
			return nil, err
		}
		// OpenAPI 3.1 has no schema for a sequence: the schema is one line's
		content[api.ContentNDJSON] = map[string]any{"schema": sc}
		main["description"] = main["description"].(string) + "; with Accept: application/x-ndjson, a stream of events as they happen, one JSON object per line, each of the x-ndjson schema"
	}
	if len(content) > 0 {
		main["content"] = content
	}
	responses[strconv.Itoa(d.Status)] = main
	for _, a := range d.Also {
		sc, err := g.schema(reflect.TypeOf(a.Type), true)
		if err != nil {
			return nil, err
		}
		responses[strconv.Itoa(a.Status)] = map[string]any{"description": a.Description,
			"content": map[string]any{api.ContentJSON: map[string]any{"schema": sc}}}
	}
	errs := slices.Clone(d.Errors)
	if !rt.Public {
		errs = append(errs, commonErrors...)
	}
	sort.Ints(errs)
	for _, st := range slices.Compact(errs) {
		if _, ok := errorDescriptions[st]; !ok {
			return nil, fmt.Errorf("error status %d has no description", st)
		}
		responses[strconv.Itoa(st)] = map[string]any{"$ref": "#/components/responses/" + strconv.Itoa(st)}
	}
	op["responses"] = responses
	return op, nil
}

func ref(name string) map[string]any {
	return map[string]any{"$ref": "#/components/schemas/" + name}
}

// schemaGen turns Go types into JSON schemas the way encoding/json
// writes and reads them; named structs become components.
type schemaGen struct {
	names   map[reflect.Type]string
	schemas map[string]any
}

var (
	timeType     = reflect.TypeFor[time.Time]()
	durationType = reflect.TypeFor[sandbox.Duration]()
	fileModeType = reflect.TypeFor[fs.FileMode]()
	marshaler    = reflect.TypeFor[json.Marshaler]()
	unmarshaler  = reflect.TypeFor[json.Unmarshaler]()
	textMarsh    = reflect.TypeFor[encoding.TextMarshaler]()
	textUnmarsh  = reflect.TypeFor[encoding.TextUnmarshaler]()
)

// customJSON tells whether t (or *t) reads or writes its own JSON.
func customJSON(t reflect.Type) bool {
	for _, x := range []reflect.Type{t, reflect.PointerTo(t)} {
		if x.Implements(marshaler) || x.Implements(unmarshaler) || x.Implements(textMarsh) || x.Implements(textUnmarsh) {
			return true
		}
	}
	return false
}

// schema is t's schema; a value that may be JSON null (a pointer, or a
// slice or map without omitempty) allows null unless notNull.
func (g *schemaGen) schema(t reflect.Type, notNull bool) (map[string]any, error) {
	switch t {
	case timeType:
		return map[string]any{"type": "string", "format": "date-time"}, nil
	case durationType:
		return map[string]any{"type": []string{"string", "number"},
			"description": `a duration: written as a Go duration string ("30s", "1m30s"); read as one, or as a number of seconds`}, nil
	case fileModeType:
		return map[string]any{"type": "integer", "minimum": 0, "format": "uint32",
			"description": "Go's fs.FileMode: the permission bits, and type bits such as 1<<31 for a folder and 1<<27 for a symbolic link"}, nil
	}
	if customJSON(t) {
		return nil, fmt.Errorf("type %v reads or writes its own JSON: tell the OpenAPI generator its schema", t)
	}
	nullable := func(sc map[string]any) map[string]any {
		if notNull {
			return sc
		}
		if ty, ok := sc["type"].(string); ok {
			sc["type"] = []string{ty, "null"}
			return sc
		}
		return map[string]any{"anyOf": []any{sc, map[string]any{"type": "null"}}}
	}
	switch t.Kind() {
	case reflect.Bool:
		return map[string]any{"type": "boolean"}, nil
	case reflect.Int, reflect.Int64:
		return map[string]any{"type": "integer", "format": "int64"}, nil
	case reflect.Int8, reflect.Int16, reflect.Int32:
		return map[string]any{"type": "integer", "format": "int32"}, nil
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return map[string]any{"type": "integer", "minimum": 0}, nil
	case reflect.Float32, reflect.Float64:
		return map[string]any{"type": "number"}, nil
	case reflect.String:
		return map[string]any{"type": "string"}, nil
	case reflect.Interface:
		return map[string]any{}, nil
	case reflect.Pointer:
		sc, err := g.schema(t.Elem(), true)
		if err != nil {
			return nil, err
		}
		return nullable(sc), nil
	case reflect.Slice, reflect.Array:
		if t.Elem().Kind() == reflect.Uint8 {
			return nullable(map[string]any{"type": "string", "contentEncoding": "base64"}), nil
		}
		items, err := g.schema(t.Elem(), true)
		if err != nil {
			return nil, err
		}
		sc := map[string]any{"type": "array", "items": items}
		if t.Kind() == reflect.Slice {
			return nullable(sc), nil
		}
		return sc, nil
	case reflect.Map:
		if t.Key().Kind() != reflect.String {
			return nil, fmt.Errorf("map %v: only string keys have a JSON form here", t)
		}
		vals, err := g.schema(t.Elem(), true)
		if err != nil {
			return nil, err
		}
		return nullable(map[string]any{"type": "object", "additionalProperties": vals}), nil
	case reflect.Struct:
		if t.Name() == "" {
			return g.object(t)
		}
		name, err := g.component(t)
		if err != nil {
			return nil, err
		}
		return ref(name), nil
	}
	return nil, fmt.Errorf("type %v has no JSON form", t)
}

// component makes t's schema a component, once, and names it: the type's
// name, which must be unique among the components.
func (g *schemaGen) component(t reflect.Type) (string, error) {
	if name, ok := g.names[t]; ok {
		return name, nil
	}
	name := t.Name()
	for other, n := range g.names {
		if n == name {
			return "", fmt.Errorf("two types named %s: %v and %v", name, other, t)
		}
	}
	g.names[t] = name
	sc, err := g.object(t)
	if err != nil {
		return "", err
	}
	sc["title"] = t.PkgPath()[strings.LastIndexByte(t.PkgPath(), '/')+1:] + "." + name
	g.schemas[name] = sc
	return name, nil
}

// object is a struct's schema: its JSON fields as encoding/json sees
// them (tags, omitempty, embedded structs flattened). A field without
// omitempty is always written, so it is required.
func (g *schemaGen) object(t reflect.Type) (map[string]any, error) {
	props := map[string]any{}
	var required []string
	if err := g.fields(t, props, &required); err != nil {
		return nil, err
	}
	sc := map[string]any{"type": "object", "properties": props, "additionalProperties": false}
	if len(required) > 0 {
		sort.Strings(required)
		sc["required"] = required
	}
	return sc, nil
}

func (g *schemaGen) fields(t reflect.Type, props map[string]any, required *[]string) error {
	for i := range t.NumField() {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		if tag == "-" {
			continue
		}
		name, opts, _ := strings.Cut(tag, ",")
		if f.Anonymous && name == "" {
			ft := f.Type
			if ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			if ft.Kind() == reflect.Struct {
				if err := g.fields(ft, props, required); err != nil {
					return err
				}
				continue
			}
		}
		if !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		omit := strings.Contains(","+opts+",", ",omitempty,") || strings.Contains(","+opts+",", ",omitzero,")
		if strings.Contains(","+opts+",", ",string,") {
			return fmt.Errorf("%v.%s: the ,string option has no schema here", t, f.Name)
		}
		sc, err := g.schema(f.Type, omit)
		if err != nil {
			return fmt.Errorf("%v.%s: %w", t, f.Name, err)
		}
		if _, dup := props[name]; dup {
			return fmt.Errorf("%v: two fields named %q", t, name)
		}
		props[name] = sc
		if !omit {
			*required = append(*required, name)
		}
	}
	return nil
}
