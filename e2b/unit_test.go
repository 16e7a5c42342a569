package e2b

import (
	"encoding/json"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/sandbox"
)

func TestResolve(t *testing.T) {
	for in, want := range map[string]string{
		"": "/tmp", "~": "/tmp", "~/a": "/tmp/a", "a/b": "/tmp/a/b", "/workspace/output/x": "/workspace/output/x",
		"/tmp/../etc/passwd": "/etc/passwd", "../x": "/x",
	} {
		if got := resolve(in); got != want {
			t.Errorf("resolve(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestEgressRules(t *testing.T) {
	yes, no := true, false
	cases := []struct {
		name string
		req  newSandbox
		want []sandbox.EgressRule
		err  bool
	}{
		{name: "nothing"},
		{name: "internet off", req: newSandbox{AllowInternetAccess: &no}},
		{name: "internet on without hosts", req: newSandbox{AllowInternetAccess: &yes}, err: true},
		{name: "hosts, CIDRs and addresses", req: newSandbox{Network: &network{AllowOut: []string{"example.com", "*.pypi.org", "10.1.0.0/16", "192.0.2.7", "2001:db8::1"}, DenyOut: []string{allTraffic}}},
			want: []sandbox.EgressRule{{Host: "example.com"}, {Host: "*.pypi.org"}, {CIDR: "10.1.0.0/16"}, {CIDR: "192.0.2.7/32"}, {CIDR: "2001:db8::1/128"}}},
		{name: "a deny rule airlock lacks", req: newSandbox{Network: &network{DenyOut: []string{"1.2.3.4"}}}, err: true},
		{name: "transform rules", req: newSandbox{Network: &network{Rules: json.RawMessage(`{"a.com":[{}]}`)}}, err: true},
	}
	for _, c := range cases {
		got, err := egressRules(c.req)
		if (err != nil) != c.err {
			t.Errorf("%s: err %v", c.name, err)
			continue
		}
		gj, _ := json.Marshal(got)
		wj, _ := json.Marshal(c.want)
		if string(gj) != string(wj) {
			t.Errorf("%s: %s, want %s", c.name, gj, wj)
		}
	}
}

func TestMetadataQuery(t *testing.T) {
	// What the SDK sends for {"a b": "c&d", "k": "v"}: each pair escaped,
	// joined as a query string, then escaped again as one parameter.
	got, err := metadataQuery("a%2520b=c%2526d&k=v")
	if err != nil || len(got) != 2 || got["a b"] != "c&d" || got["k"] != "v" {
		t.Errorf("%v %v", got, err)
	}
}

func TestPageToken(t *testing.T) {
	ns, id, err := parsePageToken(pageTokenOf(time.Unix(5, 6), "abc"))
	if err != nil || ns != 5_000_000_006 || id != "abc" {
		t.Errorf("%d %q %v", ns, id, err)
	}
	if _, _, err := parsePageToken("not-a-token"); err == nil {
		t.Error("a bad token was read")
	}
}

func TestSignature(t *testing.T) {
	g := newGrants()
	gr := g.issue("sbx", "base", caller{tenant: "alice"})
	now := time.Unix(1000, 0)
	sig := signature("/tmp/a", "read", "", gr.token, "2000")
	if found, ok := g.signed("", "/tmp/a", "read", "", sig, "2000", now); !ok || found != gr {
		t.Error("a good signature was refused")
	}
	if _, ok := g.signed("other", "/tmp/a", "read", "", sig, "2000", now); ok {
		t.Error("a signature was taken for another sandbox")
	}
	for name, args := range map[string][4]string{
		"another path":      {"/tmp/b", "read", "", "2000"},
		"another operation": {"/tmp/a", "write", "", "2000"},
		"another user":      {"/tmp/a", "read", "user", "2000"},
		"expired":           {"/tmp/a", "read", "", "999"},
	} {
		s := sig
		if name == "expired" {
			s = signature("/tmp/a", "read", "", gr.token, "999")
		}
		if _, ok := g.signed("", args[0], args[1], args[2], s, args[3], now); ok {
			t.Errorf("%s: accepted", name)
		}
	}
}

func TestRoute(t *testing.T) {
	r := httptest.NewRequest("GET", "/health", nil)
	r.Host = "49999-0123abcd.sandbox.example"
	if id, port, ok := route(r); !ok || id != "0123abcd" || port != JupyterPort {
		t.Errorf("host route: %q %q %v", id, port, ok)
	}
	r = httptest.NewRequest("GET", "/health", nil)
	r.Header.Set("E2b-Sandbox-Id", "x1")
	if id, port, ok := route(r); !ok || id != "x1" || port != EnvdPort {
		t.Errorf("header route: %q %q %v", id, port, ok)
	}
	r = httptest.NewRequest("GET", "/v2/sandboxes", nil)
	r.Host = "api.sandbox.example"
	if _, _, ok := route(r); ok {
		t.Error("the control plane was routed to a sandbox")
	}
}
