package server_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"
)

// openAPI is the parsed document a server serves.
type openAPI map[string]any

func (ts *testServer) openAPI(t *testing.T) openAPI {
	t.Helper()
	a := ts.call(t, "GET", "/openapi.json", "", "", nil, "")
	if a.status != 200 {
		t.Fatalf("GET /openapi.json: %d %s", a.status, a.body)
	}
	var doc openAPI
	if err := json.Unmarshal(a.body, &doc); err != nil {
		t.Fatalf("the document is not JSON: %v", err)
	}
	if doc["openapi"] != "3.1.0" {
		t.Fatalf("openapi version %v, want 3.1.0", doc["openapi"])
	}
	return doc
}

// ops lists the document's operations as "METHOD /path".
func (d openAPI) ops() []string {
	var out []string
	for p, item := range d["paths"].(map[string]any) {
		for m := range item.(map[string]any) {
			out = append(out, strings.ToUpper(m)+" "+p)
		}
	}
	sort.Strings(out)
	return out
}

// op is one operation of the document.
func (d openAPI) op(method, path string) map[string]any {
	item, _ := d["paths"].(map[string]any)[path].(map[string]any)
	op, _ := item[strings.ToLower(method)].(map[string]any)
	return op
}

// resolve follows a $ref of the document.
func (d openAPI) resolve(v map[string]any) map[string]any {
	for {
		r, ok := v["$ref"].(string)
		if !ok {
			return v
		}
		var cur any = map[string]any(d)
		for _, part := range strings.Split(strings.TrimPrefix(r, "#/"), "/") {
			cur = cur.(map[string]any)[part]
		}
		v = cur.(map[string]any)
	}
}

var wildcard = regexp.MustCompile(`\{([a-z]+)(\.\.\.)?\}`)

// TestOpenAPIRoutes walks the mux's routes and the document: every route
// the server serves is documented, and every documented operation is
// served (a request to it reaches a handler: not a 405, not the fallback
// 404 of unknown routes).
func TestOpenAPIRoutes(t *testing.T) {
	ts := newTestServer(t)
	doc := ts.openAPI(t)
	documented := map[string]bool{}
	for _, op := range doc.ops() {
		documented[op] = true
	}
	served := map[string]bool{}
	for _, r := range ts.srv.Routes() {
		method, pattern, ok := strings.Cut(r, " ")
		if !ok {
			t.Errorf("route %q is mounted for every method; document it with one", r)
			continue
		}
		op := method + " " + wildcard.ReplaceAllString(pattern, "{$1}")
		served[op] = true
		if !documented[op] {
			t.Errorf("the mux serves %s, which the document lacks", r)
		}
	}
	if len(served) < 15 {
		t.Fatalf("Routes lists %d routes: the walk walks nothing", len(served))
	}
	for op := range documented {
		if !served[op] {
			t.Errorf("the document has %s, which the mux does not register", op)
		}
	}
	probe := func(method, path string) (int, string) {
		p := wildcard.ReplaceAllStringFunc(path, func(w string) string {
			if strings.HasPrefix(w, "{path") {
				return "input/probe.txt"
			}
			return "probe"
		})
		a := ts.call(t, method, p, testKey, "application/json", strings.NewReader("{}"), "")
		return a.status, string(a.body)
	}
	for op := range documented {
		method, path, _ := strings.Cut(op, " ")
		status, body := probe(method, path)
		if status == http.StatusMethodNotAllowed || strings.Contains(body, "no such route") {
			t.Errorf("the document has %s, but the mux answers %d %s", op, status, body)
		}
	}
	// the probe can tell a route that is not served
	for _, op := range []string{"PATCH /v1/sessions/{id}", "GET /v1/nothing"} {
		method, path, _ := strings.Cut(op, " ")
		if status, body := probe(method, path); status != 405 && !strings.Contains(body, "no such route") {
			t.Errorf("the probe finds %s served (%d %s): it cannot tell", op, status, body)
		}
	}
}

// example builds a JSON value with every property the schema has.
func (d openAPI) example(sc map[string]any, depth int) any {
	sc = d.resolve(sc)
	if alts, ok := sc["anyOf"].([]any); ok {
		return d.example(alts[0].(map[string]any), depth)
	}
	typ := sc["type"]
	if list, ok := typ.([]any); ok {
		typ = list[0]
	}
	switch typ {
	case "object":
		out := map[string]any{}
		props, _ := sc["properties"].(map[string]any)
		for name, p := range props {
			out[name] = d.example(p.(map[string]any), depth+1)
		}
		if ap, ok := sc["additionalProperties"].(map[string]any); ok && len(props) == 0 {
			out["k"] = d.example(ap, depth+1)
		}
		return out
	case "array":
		return []any{d.example(sc["items"].(map[string]any), depth+1)}
	case "string":
		switch sc["format"] {
		case "date-time":
			return time.Now().UTC().Format(time.RFC3339)
		}
		if strings.Contains(fmt.Sprint(sc["description"]), "duration") {
			return "1s"
		}
		return "x"
	case "integer", "number":
		return 1
	case "boolean":
		return true
	}
	return "x"
}

// objects lists the JSON paths of the objects with named properties in
// v, the top one ("") first.
func objects(v any, at string) []string {
	var out []string
	switch x := v.(type) {
	case map[string]any:
		if at != "" && len(x) == 1 && x["k"] != nil {
			// a map's value, not a struct
		} else {
			out = append(out, at)
		}
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			out = append(out, objects(x[k], at+"/"+k)...)
		}
	case []any:
		for i, e := range x {
			out = append(out, objects(e, at+"/"+strconv.Itoa(i))...)
		}
	}
	return out
}

// withExtra is a deep copy of v with an undocumented field added to the
// object at path at.
func withExtra(v any, at string) any {
	b, _ := json.Marshal(v)
	var c any
	_ = json.Unmarshal(b, &c)
	cur := c
	for _, part := range strings.Split(at, "/")[1:] {
		switch x := cur.(type) {
		case map[string]any:
			cur = x[part]
		case []any:
			i, _ := strconv.Atoi(part)
			cur = x[i]
		}
	}
	cur.(map[string]any)["zz_not_documented"] = 1
	return c
}

// TestOpenAPIBodies: for each route with a JSON body, a body with every
// field the document gives is read by the handler's strict decoder (it
// may then refuse the values, never the fields or their types), and a
// body with one field more, at the top or in any nested object, is
// refused as an unknown field.
func TestOpenAPIBodies(t *testing.T) {
	ts := newTestServer(t)
	doc := ts.openAPI(t)
	checked := 0
	for _, op := range doc.ops() {
		method, path, _ := strings.Cut(op, " ")
		rb, ok := doc.op(method, path)["requestBody"].(map[string]any)
		if !ok {
			continue
		}
		media, ok := rb["content"].(map[string]any)["application/json"].(map[string]any)
		if !ok {
			continue
		}
		body := doc.example(media["schema"].(map[string]any), 0)
		target := func() string {
			id := ts.newSession(t)
			p := strings.ReplaceAll(path, "{id}", id)
			if strings.Contains(p, "{pid}") {
				a := ts.json(t, "POST", "/v1/sessions/"+id+"/exec", map[string]any{"cmd": []string{"sleep", "30"}, "background": true})
				var pr struct{ ID string }
				if a.status != 202 || json.Unmarshal(a.body, &pr) != nil {
					t.Fatalf("start a process: %d %s", a.status, a.body)
				}
				p = strings.ReplaceAll(p, "{pid}", pr.ID)
			}
			if strings.Contains(p, "{") {
				t.Fatalf("%s: a path parameter this test cannot fill", op)
			}
			return p
		}
		a := ts.json(t, method, target(), body)
		if a.status == 400 && strings.Contains(string(a.body), "not valid JSON for this request") {
			t.Errorf("%s: the handler refuses a body with every documented field: %s\nbody: %s", op, a.body, mustJSON(body))
		}
		for _, at := range objects(body, "") {
			a := ts.json(t, method, target(), withExtra(body, at))
			if a.status != 400 || !strings.Contains(string(a.body), "unknown field") {
				t.Errorf("%s: a body with an undocumented field at %q: %d %s, want 400 unknown field", op, at+"/", a.status, a.body)
			}
		}
		checked++
	}
	if checked < 4 {
		t.Errorf("%d routes with a JSON body checked, want at least 4 (sessions, ttl, exec, signal)", checked)
	}
}

func mustJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// validate checks a JSON value against a schema of the document and lists
// what does not match.
func (d openAPI) validate(sc map[string]any, v any, at string) []string {
	sc = d.resolve(sc)
	if alts, ok := sc["anyOf"].([]any); ok {
		var first []string
		for i, alt := range alts {
			p := d.validate(alt.(map[string]any), v, at)
			if len(p) == 0 {
				return nil
			}
			if i == 0 {
				first = p
			}
		}
		return first
	}
	var types []string
	switch ty := sc["type"].(type) {
	case string:
		types = []string{ty}
	case []any:
		for _, x := range ty {
			types = append(types, x.(string))
		}
	default:
		return nil // any value
	}
	kind := "null"
	switch x := v.(type) {
	case map[string]any:
		kind = "object"
	case []any:
		kind = "array"
	case string:
		kind = "string"
	case bool:
		kind = "boolean"
	case float64:
		kind = "number"
		if x == float64(int64(x)) {
			kind = "integer"
		}
	}
	okType := false
	for _, ty := range types {
		if ty == kind || ty == "number" && kind == "integer" {
			okType = true
		}
	}
	if !okType {
		return []string{fmt.Sprintf("%s: %s, want %v", at, kind, types)}
	}
	var out []string
	switch x := v.(type) {
	case map[string]any:
		props, _ := sc["properties"].(map[string]any)
		for k, e := range x {
			if p, ok := props[k]; ok {
				out = append(out, d.validate(p.(map[string]any), e, at+"/"+k)...)
				continue
			}
			switch ap := sc["additionalProperties"].(type) {
			case bool:
				if !ap {
					out = append(out, fmt.Sprintf("%s: field %q is not documented", at, k))
				}
			case map[string]any:
				out = append(out, d.validate(ap, e, at+"/"+k)...)
			}
		}
		if req, ok := sc["required"].([]any); ok {
			for _, r := range req {
				if _, ok := x[r.(string)]; !ok {
					out = append(out, fmt.Sprintf("%s: required field %q is missing", at, r))
				}
			}
		}
	case []any:
		if items, ok := sc["items"].(map[string]any); ok {
			for i, e := range x {
				out = append(out, d.validate(items, e, at+"/"+strconv.Itoa(i))...)
			}
		}
	}
	return out
}

// check checks one answer of operation op against the document: its
// status is documented, and its body matches the schema of its type.
func (d openAPI) check(t *testing.T, op string, a answer) {
	t.Helper()
	method, path, _ := strings.Cut(op, " ")
	o := d.op(method, path)
	if o == nil {
		t.Errorf("%s is not documented", op)
		return
	}
	resp, ok := o["responses"].(map[string]any)[strconv.Itoa(a.status)].(map[string]any)
	if !ok {
		t.Errorf("%s answered %d, which the document does not list: %s", op, a.status, a.body)
		return
	}
	resp = d.resolve(resp)
	ct, _, _ := strings.Cut(a.header.Get("Content-Type"), ";")
	content, _ := resp["content"].(map[string]any)
	if len(a.body) == 0 {
		if len(content) > 0 && a.status != 204 {
			t.Errorf("%s %d: an empty body where the document gives content", op, a.status)
		}
		return
	}
	media, ok := content[ct].(map[string]any)
	if !ok {
		t.Errorf("%s %d answered %s, which the document does not list (%v)", op, a.status, ct, keys(content))
		return
	}
	sc, _ := media["schema"].(map[string]any)
	if ct == "application/octet-stream" {
		return
	}
	var values [][]byte
	if ct == "application/x-ndjson" {
		sc := bufio.NewScanner(bytes.NewReader(a.body))
		sc.Buffer(nil, 16<<20)
		for sc.Scan() {
			values = append(values, append([]byte(nil), sc.Bytes()...))
		}
	} else {
		values = [][]byte{a.body}
	}
	for _, b := range values {
		var v any
		if err := json.Unmarshal(b, &v); err != nil {
			t.Errorf("%s %d: not JSON: %v: %s", op, a.status, err, b)
			continue
		}
		for _, p := range d.validate(sc, v, "") {
			t.Errorf("%s %d: the answer does not match the document: %s\n%s", op, a.status, p, b)
		}
	}
}

func keys(m map[string]any) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// TestOpenAPIAnswers calls every documented operation on a real server,
// the way a client uses it, and checks each answer against the document:
// a status it lists, a body of the schema it gives. An operation the walk
// does not call fails the test, so that a new route comes with a call.
func TestOpenAPIAnswers(t *testing.T) {
	ts := newTestServer(t)
	doc := ts.openAPI(t)
	called := map[string]bool{}
	do := func(op, path string, a answer, want int) answer {
		t.Helper()
		called[op] = true
		if a.status != want {
			t.Errorf("%s (%s): %d %s, want %d", op, path, a.status, a.body, want)
		}
		doc.check(t, op, a)
		return a
	}
	js := func(op, path string, v any, want int) answer {
		t.Helper()
		method, _, _ := strings.Cut(op, " ")
		return do(op, path, ts.json(t, method, path, v), want)
	}
	raw := func(op, path, body string, want int) answer {
		t.Helper()
		method, _, _ := strings.Cut(op, " ")
		return do(op, path, ts.call(t, method, path, testKey, "application/octet-stream", strings.NewReader(body), ""), want)
	}
	var sess struct{ ID string }
	_ = json.Unmarshal(js("POST /v1/sessions", "/v1/sessions", map[string]any{"ttl_seconds": 600, "metadata": map[string]string{"t": "1"}}, 201).body, &sess)
	s := "/v1/sessions/" + sess.ID
	js("GET /v1/sessions", "/v1/sessions", nil, 200)
	js("GET /v1/sessions/{id}", s, nil, 200)
	js("POST /v1/sessions/{id}/ttl", s+"/ttl", map[string]any{"ttl_seconds": 900}, 200)
	raw("PUT /v1/sessions/{id}/files/{path}", s+"/files/output/a.csv", "x,=1+1\n", 201)
	a := raw("GET /v1/sessions/{id}/files/{path}", s+"/files/output/a.csv", "", 200)
	if a.header.Get("X-Airlock-Verdict") != "sanitized" {
		t.Errorf("download of a CSV with a formula: verdict %q", a.header.Get("X-Airlock-Verdict"))
	}
	raw("GET /v1/sessions/{id}/files/{path}", s+"/files/output", "", 200)
	raw("GET /v1/sessions/{id}/files/{path}", s+"/files/output/nothing.csv", "", 404)
	raw("PUT /v1/sessions/{id}/files/{path}", s+"/files/output/run.sh", "#!/bin/sh\n", 201)
	raw("GET /v1/sessions/{id}/files/{path}", s+"/files/output/run.sh", "", 403)
	js("GET /v1/sessions/{id}/artifacts", s+"/artifacts", nil, 200)
	raw("DELETE /v1/sessions/{id}/files/{path}", s+"/files/output/run.sh", "", 204)
	js("POST /v1/sessions/{id}/exec", s+"/exec", map[string]any{"cmd": []string{"sh", "-c", "echo hi; echo ho >&2"}}, 200)
	b, _ := json.Marshal(map[string]any{"cmd": []string{"sh", "-c", "echo hi; echo ho >&2"}})
	a = do("POST /v1/sessions/{id}/exec", s+"/exec", ts.call(t, "POST", s+"/exec", testKey, "application/json", bytes.NewReader(b), "application/x-ndjson"), 200)
	if !strings.Contains(string(a.body), `"type":"result"`) {
		t.Errorf("the stream has no result: %s", a.body)
	}
	js("POST /v1/sessions/{id}/exec", s+"/exec", map[string]any{"cmd": []string{"sh", "-c", "exit 0"}, "zz": 1}, 400)
	var pr struct{ ID string }
	_ = json.Unmarshal(js("POST /v1/sessions/{id}/exec", s+"/exec", map[string]any{"cmd": []string{"cat"}, "background": true}, 202).body, &pr)
	p := s + "/processes/" + pr.ID
	js("GET /v1/sessions/{id}/processes", s+"/processes", nil, 200)
	js("GET /v1/sessions/{id}/processes/{pid}", p+"?wait=0.05", nil, 200)
	raw("POST /v1/sessions/{id}/processes/{pid}/stdin", p+"/stdin", "hello\n", 204)
	raw("POST /v1/sessions/{id}/processes/{pid}/stdin", p+"/stdin?eof=1", "", 204)
	js("GET /v1/sessions/{id}/processes/{pid}", p+"?wait=10", nil, 200)
	raw("POST /v1/sessions/{id}/processes/{pid}/stdin", p+"/stdin", "late\n", 409)
	_ = json.Unmarshal(js("POST /v1/sessions/{id}/exec", s+"/exec", map[string]any{"cmd": []string{"sleep", "30"}, "background": true}, 202).body, &pr)
	js("POST /v1/sessions/{id}/processes/{pid}/signal", s+"/processes/"+pr.ID+"/signal", map[string]any{"signal": "TERM"}, 204)
	js("POST /v1/sessions/{id}/processes/{pid}/signal", s+"/processes/"+pr.ID+"/signal", map[string]any{"signal": "NOPE"}, 400)
	js("GET /v1/sessions/{id}/processes/{pid}", s+"/processes/"+pr.ID+"?wait=10", nil, 200)
	js("GET /v1/sessions/{id}/processes/{pid}", s+"/processes/nothing", nil, 404)
	var cx struct{ ID string }
	_ = json.Unmarshal(js("POST /v1/sessions/{id}/contexts", s+"/contexts", map[string]any{"language": "python", "cwd": "/tmp"}, 201).body, &cx)
	js("GET /v1/sessions/{id}/contexts", s+"/contexts", nil, 200)
	a = js("POST /v1/sessions/{id}/code", s+"/code", map[string]any{"code": "x = 20\nx * 2 + 2", "context": cx.ID}, 200)
	if !strings.Contains(string(a.body), `"text/plain":"42"`) {
		t.Errorf("a code call's result: %s", a.body)
	}
	b, _ = json.Marshal(map[string]any{"code": "print(x)", "context": cx.ID})
	a = do("POST /v1/sessions/{id}/code", s+"/code", ts.call(t, "POST", s+"/code", testKey, "application/json", bytes.NewReader(b), "application/x-ndjson"), 200)
	if !strings.Contains(string(a.body), `"type":"stdout","text":"20\n"`) || !strings.Contains(string(a.body), `"type":"end"`) {
		t.Errorf("a code stream: %s", a.body)
	}
	js("POST /v1/sessions/{id}/code", s+"/code", map[string]any{"code": "1", "language": "cobol"}, 400)
	raw("POST /v1/sessions/{id}/contexts/{context}/restart", s+"/contexts/"+cx.ID+"/restart", "", 204)
	raw("DELETE /v1/sessions/{id}/contexts/{context}", s+"/contexts/"+cx.ID, "", 204)
	js("POST /v1/sessions/{id}/code", s+"/code", map[string]any{"code": "1", "context": cx.ID}, 404)
	js("GET /v1/audit", "/v1/audit", nil, 501)
	do("GET /v1/sessions", "/v1/sessions", ts.call(t, "GET", "/v1/sessions", "", "", nil, ""), 401)
	do("GET /openapi.json", "/openapi.json", ts.call(t, "GET", "/openapi.json", "", "", nil, ""), 200)
	do("GET /healthz", "/healthz", ts.call(t, "GET", "/healthz", "", "", nil, ""), 200)
	do("GET /readyz", "/readyz", ts.call(t, "GET", "/readyz", "", "", nil, ""), 200)
	js("DELETE /v1/sessions/{id}", s, nil, 204)
	js("GET /v1/sessions/{id}", s, nil, 410)
	js("DELETE /v1/sessions/{id}", "/v1/sessions/nothing", nil, 404)
	for _, op := range doc.ops() {
		if !called[op] {
			t.Errorf("%s is documented but this test does not call it: add a call", op)
		}
	}
}
