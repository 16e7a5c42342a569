package main

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"

	"github.com/airlock-sandbox/airlock/egress"
	"github.com/airlock-sandbox/airlock/sandbox"
)

// allowFlag reads --allow-host or --allow-cidr values into egress rules.
// With cidrOnly set (--allow-cidr) only address ranges are taken.
//
// The forms, each with an optional port (without one a rule allows ports
// 80 and 443; with one, only that port):
//
//	example.com  *.example.com  example.com:8443     a host name or pattern
//	10.1.2.3  10.1.2.3:8080  [fd00::1]  [fd00::1]:8443   one address
//	10.0.0.0/8  10.0.0.0/8:11434  fd00::/8  [fd00::/8]:8443   a CIDR range
//
// An address is the range of that address alone (/32, /128). An IPv6
// address or range takes a port only in brackets. Every rule is checked as
// the egress proxy checks it (egress.CheckRule), so a bad one is a usage
// error before any sandbox starts.
type allowFlag struct {
	rules    *[]sandbox.EgressRule
	cidrOnly bool
}

func (a allowFlag) String() string { return "" }

func (a allowFlag) Set(s string) error {
	r, err := parseAllow(s, a.cidrOnly)
	if err != nil {
		return err
	}
	*a.rules = append(*a.rules, r)
	return nil
}

// parseAllow reads one value of --allow-host (or, with cidrOnly, of
// --allow-cidr) as an egress rule. Errors wrap sandbox.ErrInvalid.
func parseAllow(s string, cidrOnly bool) (sandbox.EgressRule, error) {
	var r sandbox.EgressRule
	host, port, err := splitAllowPort(s)
	if err != nil {
		return r, err
	}
	switch {
	case strings.Contains(host, "/"):
		r.CIDR = host
	case cidrOnly:
		return r, fmt.Errorf("%q is not an address range such as 10.0.0.0/8 or fd00::/8 (a name goes to --allow-host): %w", s, sandbox.ErrInvalid)
	case strings.HasPrefix(host, "*."):
		r.Host = host
	default:
		h, err := egress.ParseHost(host)
		if err != nil {
			return r, err
		}
		if h.IsAddr() {
			r.CIDR = netip.PrefixFrom(h.Addr, h.Addr.BitLen()).String()
		} else {
			r.Host = host
		}
	}
	if port != 0 {
		r.Ports = []int{port}
	}
	return r, egress.CheckRule(r)
}

// splitAllowPort splits "HOST:PORT", "[IPV6]:PORT" and "[IPV6/N]:PORT"
// into the host part, without brackets, and the port; a value without a
// port gives 0. A value with more than one colon and no brackets is an
// IPv6 address or range, without a port.
func splitAllowPort(s string) (string, int, error) {
	if inner, ok := strings.CutPrefix(s, "["); ok {
		inner, rest, ok := strings.Cut(inner, "]")
		switch {
		case !ok:
			return "", 0, fmt.Errorf("%q has an unclosed bracket: %w", s, sandbox.ErrInvalid)
		case !strings.Contains(inner, ":"):
			return "", 0, fmt.Errorf("%q: brackets hold an IPv6 address or range only: %w", s, sandbox.ErrInvalid)
		case rest == "":
			return inner, 0, nil
		}
		p, ok := strings.CutPrefix(rest, ":")
		if !ok {
			return "", 0, fmt.Errorf("%q: want [ADDRESS]:PORT: %w", s, sandbox.ErrInvalid)
		}
		port, err := parsePort(p, s)
		return inner, port, err
	}
	if strings.Count(s, ":") != 1 {
		return s, 0, nil
	}
	host, p, _ := strings.Cut(s, ":")
	port, err := parsePort(p, s)
	return host, port, err
}

// parsePort reads a port of the value s: decimal digits, no sign and no
// leading zero, from 1 to 65535.
func parsePort(p, s string) (int, error) {
	n, err := strconv.Atoi(p)
	if err != nil || p[0] < '1' || p[0] > '9' || n > 65535 {
		return 0, fmt.Errorf("%q: port %q is not a number from 1 to 65535: %w", s, p, sandbox.ErrInvalid)
	}
	return n, nil
}
