// Package egress is the host-side egress proxy of airlock's network layer.
//
// A sandbox has its own network namespace with only a loopback interface and
// no route anywhere. When its policy allows some hosts, the supervisor hands
// the proxy a listening socket that lives on the sandbox's loopback, and the
// sandbox's HTTP_PROXY, HTTPS_PROXY and ALL_PROXY variables point at it (see
// [Env]). A program that ignores those variables has no route and fails; a
// program that uses them reaches only what the [sandbox.NetworkPolicy]
// allows, because every connection the proxy makes leaves from the host.
//
// One listening port speaks three protocols, told apart by the first byte a
// client sends: HTTP CONNECT tunnels (for HTTPS), plain HTTP requests in
// absolute form ("GET http://host/path HTTP/1.1"), and SOCKS5 with host names
// (socks5h). For every request the proxy:
//
//   - parses the destination strictly: host names are lower-cased, one
//     trailing dot is dropped and internationalised names are converted to
//     their ASCII form with a strict IDNA profile; anything malformed (NUL
//     bytes, spaces, percent signs, user info, empty or over-long labels,
//     underscores, odd ports) is refused rather than repaired;
//   - treats anything that reads as an IP address in any notation (dotted,
//     decimal, hexadecimal, octal, short forms, bracketed IPv6) as a literal,
//     which only a CIDR rule can allow, and refuses IPv4 forms other than
//     the canonical dotted quad outright;
//   - matches host names against the rules: "example.com" matches that name
//     only, and "*.example.com" matches every name below example.com at any
//     depth but not example.com itself;
//   - resolves an allowed name itself, refuses it when any of its addresses
//     is loopback, private, link-local, shared (CGNAT), multicast, reserved
//     or otherwise not public, including IPv6 forms that embed such an IPv4
//     address, unless a CIDR rule covers that address, and dials exactly the
//     address it checked, so a rebinding DNS server has no second chance;
//   - for tunnels (CONNECT and SOCKS5), reads the TLS ClientHello before
//     dialling and requires its server name (SNI) to be the tunnel's host
//     (a tunnel to an address that a CIDR rule allows needs none, since
//     clients send no server name for addresses); a tunnel that does not
//     start with a TLS ClientHello is refused;
//   - for plain HTTP, requires the Host header to name the request's host
//     and takes a new decision whenever a kept-alive connection moves to
//     another host.
//
// Per-session caps bound the number of concurrent upstream connections, the
// bytes sent and received in total and the lifetime of one connection.
// Every decision, and every cap that is hit, is recorded as a
// [sandbox.EgressEvent] (see [Proxy.Events]) and logged. A refused request
// gets an answer that says why (an HTTP 403 with a one-line reason, a SOCKS
// reply code, or a TLS unrecognized_name alert) and nothing is dialled.
//
// A wildcard rule lets the sandbox make the host resolve any name below the
// rule's domain, which the domain's own name servers can observe; allow
// wildcards only for domains whose operators are trusted with that.
package egress
