package egress

import (
	"fmt"
	"net/netip"
)

// special is one address range that the proxy never dials on its own
// judgement, and why.
type special struct {
	prefix netip.Prefix
	reason string
}

// mustSpecial builds a table entry from a prefix that is known to parse.
func mustSpecial(p, reason string) special {
	return special{netip.MustParsePrefix(p), reason}
}

// specialV4 lists the IPv4 ranges that are not public unicast, after the
// IANA special-purpose address registry. More specific ranges come first
// so that they give the reason.
var specialV4 = []special{
	mustSpecial("255.255.255.255/32", "broadcast"),
	mustSpecial("0.0.0.0/8", "this-network (0.0.0.0/8)"),
	mustSpecial("10.0.0.0/8", "private (RFC 1918)"),
	mustSpecial("100.64.0.0/10", "shared address space (CGNAT)"),
	mustSpecial("127.0.0.0/8", "loopback"),
	mustSpecial("169.254.0.0/16", "link-local (cloud metadata lives here)"),
	mustSpecial("172.16.0.0/12", "private (RFC 1918)"),
	mustSpecial("192.0.0.0/24", "IETF protocol assignments"),
	mustSpecial("192.0.2.0/24", "documentation (TEST-NET-1)"),
	mustSpecial("192.88.99.0/24", "deprecated 6to4 relay anycast"),
	mustSpecial("192.168.0.0/16", "private (RFC 1918)"),
	mustSpecial("198.18.0.0/15", "benchmarking"),
	mustSpecial("198.51.100.0/24", "documentation (TEST-NET-2)"),
	mustSpecial("203.0.113.0/24", "documentation (TEST-NET-3)"),
	mustSpecial("224.0.0.0/4", "multicast"),
	mustSpecial("240.0.0.0/4", "reserved"),
}

// specialV6 lists the IPv6 ranges that are not public unicast and embed no
// IPv4 address. Anything outside 2000::/3 is refused as well.
var specialV6 = []special{
	mustSpecial("::/128", "unspecified"),
	mustSpecial("::1/128", "loopback"),
	mustSpecial("64:ff9b:1::/48", "local-use NAT64"),
	mustSpecial("100::/64", "discard-only"),
	mustSpecial("2001:2::/48", "benchmarking"),
	mustSpecial("2001:10::/28", "deprecated ORCHID"),
	mustSpecial("2001:db8::/32", "documentation"),
	mustSpecial("3fff::/20", "documentation"),
	mustSpecial("5f00::/16", "SRv6 segment identifiers"),
	mustSpecial("fc00::/7", "unique local (private)"),
	mustSpecial("fe80::/10", "link-local"),
	mustSpecial("fec0::/10", "deprecated site-local"),
	mustSpecial("ff00::/8", "multicast"),
	mustSpecial("2000::/3", ""),
}

// Prefixes of IPv6 forms that carry an IPv4 address.
var (
	compatV4  = netip.MustParsePrefix("::/96")
	nat64     = netip.MustParsePrefix("64:ff9b::/96")
	sixToFour = netip.MustParsePrefix("2002::/16")
	teredo    = netip.MustParsePrefix("2001::/32")
)

// NonPublic says why an address must not be dialled without a CIDR rule
// that covers it, or returns "" for a public unicast address. IPv4-mapped
// addresses are judged as the IPv4 address they are; IPv6 forms that embed
// an IPv4 address (IPv4-compatible, NAT64, 6to4, Teredo) are refused when
// the embedded address would be.
func NonPublic(a netip.Addr) string {
	a = a.Unmap()
	if a.Is4() {
		return reasonIn(specialV4, a)
	}
	if a.Zone() != "" {
		return "has a zone identifier"
	}
	if a == netip.IPv6Unspecified() || a == netip.IPv6Loopback() {
		return reasonIn(specialV6, a)
	}
	if r := embeddedReason(a); r != "" {
		return r
	}
	switch {
	case compatV4.Contains(a):
		return "deprecated IPv4-compatible address"
	case nat64.Contains(a):
		return ""
	}
	for _, s := range specialV6 {
		if s.prefix.Contains(a) {
			return s.reason
		}
	}
	return "reserved (outside global unicast 2000::/3)"
}

// reasonIn returns the reason of the first range of table holding a.
func reasonIn(table []special, a netip.Addr) string {
	for _, s := range table {
		if s.prefix.Contains(a) {
			return s.reason
		}
	}
	return ""
}

// embedded is an IPv4 address found inside an IPv6 address.
type embedded struct {
	form string
	v4   netip.Addr
}

// embeddedV4 lists the IPv4 addresses that an IPv6 address carries.
func embeddedV4(a netip.Addr) []embedded {
	b := a.As16()
	v4 := func(x []byte) netip.Addr { return netip.AddrFrom4([4]byte(x)) }
	switch {
	case compatV4.Contains(a):
		return []embedded{{"IPv4-compatible", v4(b[12:16])}}
	case nat64.Contains(a):
		return []embedded{{"NAT64", v4(b[12:16])}}
	case sixToFour.Contains(a):
		return []embedded{{"6to4", v4(b[2:6])}}
	case teredo.Contains(a):
		client := []byte{^b[12], ^b[13], ^b[14], ^b[15]}
		return []embedded{{"Teredo server", v4(b[4:8])}, {"Teredo client", v4(client)}}
	}
	return nil
}

// embeddedReason refuses an IPv6 address that carries a non-public IPv4
// address.
func embeddedReason(a netip.Addr) string {
	for _, e := range embeddedV4(a) {
		if r := reasonIn(specialV4, e.v4); r != "" {
			return fmt.Sprintf("%s form of %s, %s", e.form, e.v4, r)
		}
	}
	return ""
}
