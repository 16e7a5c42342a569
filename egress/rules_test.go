package egress

import (
	"errors"
	"net/netip"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/sandbox"
)

func TestMatchName(t *testing.T) {
	rs, err := compileRules([]sandbox.EgressRule{
		{Host: "Example.COM."},
		{Host: "*.api.test"},
		{Host: "bücher.de"},
		{Host: "ports.test", Ports: []int{8443}},
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		host string
		port int
		want bool
	}{
		{"example.com", 443, true},
		{"EXAMPLE.com.", 80, true},
		{"example.com", 8080, false},
		{"www.example.com", 443, false},
		{"example.com.evil.test", 443, false},
		{"notexample.com", 443, false},
		{"a.api.test", 443, true},
		{"a.b.c.api.test", 80, true},
		{"api.test", 443, false},
		{"evilapi.test", 443, false},
		{"api.test.evil", 443, false},
		{"xn--bcher-kva.de", 443, true},
		{"BÜCHER.de", 443, false},
		{"ports.test", 8443, true},
		{"ports.test", 443, false},
	} {
		h, err := ParseHost(tc.host)
		if err != nil {
			if tc.want {
				t.Errorf("ParseHost(%q): %v", tc.host, err)
			}
			continue
		}
		if _, got := rs.matchName(h.Name, tc.port); got != tc.want {
			t.Errorf("matchName(%q, %d) = %v; want %v", tc.host, tc.port, got, tc.want)
		}
	}
}

func TestMatchAddr(t *testing.T) {
	rs, err := compileRules([]sandbox.EgressRule{
		{CIDR: "10.1.0.0/16", Ports: []int{5432}},
		{CIDR: "2001:db8::/32"},
		{Host: "example.com"},
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		addr string
		port int
		want bool
	}{
		{"10.1.2.3", 5432, true},
		{"::ffff:10.1.2.3", 5432, true},
		{"10.1.2.3", 443, false},
		{"10.2.0.1", 5432, false},
		{"2001:db8::5", 443, true},
		{"2001:db9::5", 443, false},
		{"64:ff9b::10.1.2.3", 5432, false},
	} {
		if _, got := rs.matchAddr(netip.MustParseAddr(tc.addr), tc.port); got != tc.want {
			t.Errorf("matchAddr(%s, %d) = %v; want %v", tc.addr, tc.port, got, tc.want)
		}
	}
}

func TestCompileRulesRefuses(t *testing.T) {
	for _, r := range []sandbox.EgressRule{
		{},
		{Host: "example.com", CIDR: "10.0.0.0/8"},
		{Host: "*"},
		{Host: "*."},
		{Host: "a.*.example.com"},
		{Host: "*example.com"},
		{Host: "**.example.com"},
		{Host: "127.0.0.1"},
		{Host: "[::1]"},
		{Host: "2130706433"},
		{Host: "exa mple.com"},
		{Host: "example.com", Ports: []int{0}},
		{Host: "example.com", Ports: []int{65536}},
		{CIDR: "10.0.0.1/8"},
		{CIDR: "10.0.0.0"},
		{CIDR: "10.0.0.0/33"},
		{CIDR: "::ffff:10.0.0.0/104"},
		{CIDR: "fe80::/10%eth0"},
	} {
		_, err := New(Options{Policy: sandbox.NetworkPolicy{Allow: []sandbox.EgressRule{r}}})
		if !errors.Is(err, sandbox.ErrInvalid) {
			t.Errorf("New with rule %+v: %v; want ErrInvalid", r, err)
		}
		if cerr := CheckRule(r); !errors.Is(cerr, sandbox.ErrInvalid) || !strings.Contains(err.Error(), cerr.Error()) {
			t.Errorf("CheckRule(%+v) = %v; want the error of New, %v", r, cerr, err)
		}
	}
	if err := CheckRule(sandbox.EgressRule{CIDR: "10.0.0.0/8", Ports: []int{11434}}); err != nil {
		t.Errorf("CheckRule of a sound rule: %v", err)
	}
	if _, err := New(Options{Policy: sandbox.NetworkPolicy{MaxBytesIn: -1}}); !errors.Is(err, sandbox.ErrInvalid) {
		t.Errorf("New with a negative cap: %v; want ErrInvalid", err)
	}
}

// TestAllowHint: the hint names the address's own prefix, and the port
// when it is not a default one. cmd/airlock's tests check that
// --allow-host reads every hint back as the rule it means.
func TestAllowHint(t *testing.T) {
	for _, tt := range []struct {
		addr string
		port int
		want string
	}{
		{"10.1.2.3", 443, "10.1.2.3/32"},
		{"10.1.2.3", 80, "10.1.2.3/32"},
		{"10.1.2.3", 11434, "10.1.2.3/32:11434"},
		{"::ffff:10.1.2.3", 443, "10.1.2.3/32"},
		{"fd00::1", 443, "fd00::1/128"},
		{"fd00::1", 8443, "[fd00::1/128]:8443"},
	} {
		a := netip.MustParseAddr(tt.addr)
		if got := AllowHint(a, tt.port); got != tt.want {
			t.Errorf("AllowHint(%s, %d) = %q, want %q", a, tt.port, got, tt.want)
		}
	}
}
