package egress

import (
	"net/netip"
	"strings"
	"testing"
)

func TestNonPublicRefuses(t *testing.T) {
	for _, tc := range []struct{ addr, mention string }{
		{"0.0.0.0", "this-network"},
		{"0.1.2.3", "this-network"},
		{"10.0.0.1", "private"},
		{"10.255.255.255", "private"},
		{"100.64.0.1", "CGNAT"},
		{"100.127.255.254", "CGNAT"},
		{"127.0.0.1", "loopback"},
		{"127.255.255.254", "loopback"},
		{"169.254.169.254", "link-local"},
		{"169.254.170.2", "link-local"},
		{"172.16.0.1", "private"},
		{"172.31.255.255", "private"},
		{"192.0.0.170", "IETF"},
		{"192.0.2.1", "documentation"},
		{"192.88.99.1", "6to4"},
		{"192.168.1.1", "private"},
		{"198.18.0.1", "benchmarking"},
		{"198.19.255.255", "benchmarking"},
		{"198.51.100.7", "documentation"},
		{"203.0.113.9", "documentation"},
		{"224.0.0.251", "multicast"},
		{"239.255.255.250", "multicast"},
		{"240.0.0.1", "reserved"},
		{"255.255.255.255", "broadcast"},
		{"::", "unspecified"},
		{"::1", "loopback"},
		{"::ffff:127.0.0.1", "loopback"},
		{"::ffff:169.254.169.254", "link-local"},
		{"::ffff:10.1.2.3", "private"},
		{"::127.0.0.1", "IPv4-compatible form of 127.0.0.1"},
		{"::a9fe:a9fe", "IPv4-compatible form of 169.254.169.254"},
		{"::8.8.8.8", "deprecated IPv4-compatible"},
		{"::ffff:0:7f00:1", "reserved"},
		{"64:ff9b::127.0.0.1", "NAT64 form of 127.0.0.1"},
		{"64:ff9b::a9fe:a9fe", "NAT64 form of 169.254.169.254"},
		{"64:ff9b:1::8.8.8.8", "local-use NAT64"},
		{"2002:7f00:1::", "6to4 form of 127.0.0.1"},
		{"2002:a9fe:a9fe::1", "6to4 form of 169.254.169.254"},
		{"2002:c0a8:101::1", "6to4 form of 192.168.1.1"},
		{"2001:0:7f00:1::", "Teredo server form of 127.0.0.1"},
		{"2001:0:808:808::80ff:fffe", "Teredo client form of 127.0.0.1"},
		{"2001:0:808:808::5601:5601", "Teredo client form of 169.254.169.254"},
		{"100::1", "discard"},
		{"2001:2::1", "benchmarking"},
		{"2001:10::1", "ORCHID"},
		{"2001:db8::1", "documentation"},
		{"3fff::1", "documentation"},
		{"5f00::1", "SRv6"},
		{"fc00::1", "unique local"},
		{"fd12:3456::1", "unique local"},
		{"fe80::1", "link-local"},
		{"febf::1", "link-local"},
		{"fec0::1", "site-local"},
		{"ff02::1", "multicast"},
		{"ff0e::1", "multicast"},
		{"4000::1", "reserved"},
		{"1::1", "reserved"},
		{"fe80::1%eth0", "zone"},
	} {
		got := NonPublic(netip.MustParseAddr(tc.addr))
		if got == "" || !strings.Contains(got, tc.mention) {
			t.Errorf("NonPublic(%s) = %q; want a reason mentioning %q", tc.addr, got, tc.mention)
		}
	}
}

func TestNonPublicAllowsPublic(t *testing.T) {
	for _, a := range []string{
		"1.1.1.1", "8.8.8.8", "9.255.255.255", "11.0.0.1", "100.63.255.255", "100.128.0.0",
		"126.255.255.255", "128.0.0.1", "169.253.255.255", "169.255.0.0", "172.15.255.255",
		"172.32.0.0", "192.0.1.255", "192.167.255.255", "192.169.0.0", "198.17.255.255",
		"198.20.0.0", "223.255.255.255", "::ffff:8.8.8.8", "2606:4700:4700::1111",
		"2001:4860:4860::8888", "2a00:1450:4001::1", "64:ff9b::8.8.8.8", "2002:808:808::1",
		"2001:0:808:808::f7f7:f7f7", "2001:db9::1", "3fff:1000::1",
	} {
		if got := NonPublic(netip.MustParseAddr(a)); got != "" {
			t.Errorf("NonPublic(%s) = %q; want public", a, got)
		}
	}
}
