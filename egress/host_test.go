package egress

import (
	"errors"
	"net/netip"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/sandbox"
)

func TestParseHostNames(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"example.com", "example.com"},
		{"EXAMPLE.Com", "example.com"},
		{"example.com.", "example.com"},
		{"a-b.example", "a-b.example"},
		{"r3---sn-abc.example.com", "r3---sn-abc.example.com"},
		{"bücher.de", "xn--bcher-kva.de"},
		{"xn--bcher-kva.de", "xn--bcher-kva.de"},
		{"XN--BCHER-KVA.DE", "xn--bcher-kva.de"},
		{"faß.de", "xn--fa-hia.de"},
		{"123.example.com", "123.example.com"},
		{"0x7f.example.com", "0x7f.example.com"},
		{"127.0.0.1.example.com", "127.0.0.1.example.com"},
		{"localhost", "localhost"},
		{strings.Repeat("a", 63) + ".com", strings.Repeat("a", 63) + ".com"},
	} {
		h, err := ParseHost(tc.in)
		if err != nil || h.Name != tc.want || h.IsAddr() {
			t.Errorf("ParseHost(%q) = %+v, %v; want name %q", tc.in, h, err, tc.want)
		}
	}
}

func TestParseHostLiterals(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"127.0.0.1", "127.0.0.1"},
		{"127.0.0.1.", "127.0.0.1"},
		{"169.254.169.254", "169.254.169.254"},
		{"8.8.8.8", "8.8.8.8"},
		{"[::1]", "::1"},
		{"::1", "::1"},
		{"[::ffff:127.0.0.1]", "::ffff:127.0.0.1"},
		{"[::ffff:7f00:1]", "::ffff:127.0.0.1"},
		{"[2001:DB8::1]", "2001:db8::1"},
		{"[64:ff9b::a9fe:a9fe]", "64:ff9b::a9fe:a9fe"},
	} {
		h, err := ParseHost(tc.in)
		if err != nil || !h.IsAddr() || h.Addr != netip.MustParseAddr(tc.want) {
			t.Errorf("ParseHost(%q) = %+v, %v; want address %s", tc.in, h, err, tc.want)
		}
	}
}

// TestParseHostRefuses covers disguised literals and malformed names: each
// must fail with ErrInvalid, and disguised literals must name their value.
func TestParseHostRefuses(t *testing.T) {
	for _, tc := range []struct{ in, mention string }{
		{"2130706433", "127.0.0.1"},
		{"0x7f000001", "127.0.0.1"},
		{"0x7f.1", "127.0.0.1"},
		{"0X7F.0.0.1", "127.0.0.1"},
		{"0177.0.0.1", "127.0.0.1"},
		{"0177.1", "127.0.0.1"},
		{"127.1", "127.0.0.1"},
		{"127.0.1", "127.0.0.1"},
		{"127.000.000.001", "127.0.0.1"},
		{"017700000001", "127.0.0.1"},
		{"169.254.43518", "169.254.169.254"},
		{"0xa9fea9fe", "169.254.169.254"},
		{"0xa9.0xfe.0xa9.0xfe", "169.254.169.254"},
		{"2852039166", "169.254.169.254"},
		{"0", "0.0.0.0"},
		{"0x", "0.0.0.0"},
		{"10.0x0.0.1", "10.0.0.1"},
		{"4294967296", "not an IPv4"},
		{"1.2.3.4.5", "not an IPv4"},
		{"256.1.1.1", "not an IPv4"},
		{"1.2.3.256", "not an IPv4"},
		{"08.1.1.1", "not an IPv4"},
		{"example.123", "not an IPv4"},
		{"example.0x1f", "not an IPv4"},
		{"", "empty"},
		{".", "label"},
		{"..", "label"},
		{"example..com", ""},
		{".example.com", ""},
		{"example.com..", "label"},
		{"exa mple.com", "space"},
		{"example.com\x00.evil", "control"},
		{"exa\tmple.com", "control"},
		{"exa\x7fmple.com", "control"},
		{"user@example.com", "@"},
		{"example.com%00", "%"},
		{"%65xample.com", "%"},
		{"[fe80::1%25eth0]", "%"},
		{"fe80::1%eth0", "%"},
		{"exa_mple.com", ""},
		{"-example.com", "hyphen"},
		{"example-.com", "hyphen"},
		{"example.com/path", "/"},
		{"example.com\\", "\\"},
		{"example.com?", "?"},
		{"example.com#", "#"},
		{"*.example.com", ""},
		{"ｅｘａｍｐｌｅ.com", ""},
		{"exa\u200bmple.com", ""},
		{"ex\u212aample.com", ""},
		{"BÜCHER.de", ""},
		{"１２７.0.0.1", ""},
		{"127。0。0。1", ""},
		{"xn--zz.de", ""},
		{"xn--.de", ""},
		{"xn--example-2z6c.com", ""},
		{"\xff\xfe.com", "UTF-8"},
		{strings.Repeat("a", 64) + ".com", ""},
		{strings.Repeat("a.", 127) + "com", "not a valid name"},
		{strings.Repeat("a", 2000), "too long"},
		{"[::1", "brackets"},
		{"[::1]]", "brackets"},
		{"[127.0.0.1]", "IPv6"},
		{"[example.com]", "IPv6"},
		{"1:2", "IPv6"},
	} {
		h, err := ParseHost(tc.in)
		if !errors.Is(err, sandbox.ErrInvalid) {
			t.Errorf("ParseHost(%q) = %+v, %v; want ErrInvalid", tc.in, h, err)
			continue
		}
		if !strings.Contains(err.Error(), tc.mention) {
			t.Errorf("ParseHost(%q) error %q does not mention %q", tc.in, err, tc.mention)
		}
	}
}

func TestParseAuthority(t *testing.T) {
	for _, tc := range []struct {
		in   string
		def  int
		host string
		port int
	}{
		{"example.com:443", 0, "example.com", 443},
		{"Example.COM.:8443", 0, "example.com", 8443},
		{"example.com", 80, "example.com", 80},
		{"[::1]:443", 0, "::1", 443},
		{"[2001:db8::1]", 80, "2001:db8::1", 80},
		{"1.2.3.4:65535", 0, "1.2.3.4", 65535},
	} {
		h, port, err := ParseAuthority(tc.in, tc.def)
		if err != nil || h.String() != tc.host || port != tc.port {
			t.Errorf("ParseAuthority(%q) = %v %d %v; want %s %d", tc.in, h, port, err, tc.host, tc.port)
		}
	}
	for _, in := range []string{
		"example.com", "example.com:", "example.com:0", "example.com:65536", "example.com:0443",
		"example.com:+443", "example.com:-1", "example.com:44 3", "example.com:443:443", "example.com:https",
		"user:pass@example.com:443", "user@example.com:443", "::1:443", "[::1]443", "[::1]:", "[::1]:x",
		"example.com:4430000", ":443", "example.com:%34%34%33", "[::1]",
	} {
		if h, port, err := ParseAuthority(in, 0); !errors.Is(err, sandbox.ErrInvalid) {
			t.Errorf("ParseAuthority(%q) = %v %d %v; want ErrInvalid", in, h, port, err)
		}
	}
}

func TestParseTarget(t *testing.T) {
	for _, tc := range []struct {
		in   string
		host string
		port int
	}{
		{"http://example.com/", "example.com", 80},
		{"HTTP://Example.com:8080/a?b#c", "example.com", 8080},
		{"http://example.com?x", "example.com", 80},
		{"http://[2001:db8::1]:81/", "2001:db8::1", 81},
	} {
		h, port, err := parseTarget(tc.in)
		if err != nil || h.String() != tc.host || port != tc.port {
			t.Errorf("parseTarget(%q) = %v %d %v; want %s %d", tc.in, h, port, err, tc.host, tc.port)
		}
	}
	for _, in := range []string{
		"/path", "*", "https://example.com/", "ftp://example.com/", "http://", "http:///x",
		"http://user@example.com/", "http://user:pw@example.com/", "http://%31%32%37.0.0.1/",
		"http://example.com%2f@evil/", "http://example.com:80:80/", "http://exa mple.com/",
	} {
		if h, port, err := parseTarget(in); !errors.Is(err, sandbox.ErrInvalid) {
			t.Errorf("parseTarget(%q) = %v %d %v; want ErrInvalid", in, h, port, err)
		}
	}
}
