package egress

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/airlock-sandbox/airlock/sandbox"
)

// rule is one compiled sandbox.EgressRule.
type rule struct {
	// text is the rule as written, for reasons and logs.
	text string
	// name is an exact name, or for a wildcard the suffix after "*.".
	name     string
	wildcard bool
	// prefix is set for a CIDR rule.
	prefix netip.Prefix
	ports  []int
}

// ruleSet is the compiled allowlist.
type ruleSet []rule

// compileRules checks and compiles the allow rules of a policy. Errors wrap
// sandbox.ErrInvalid.
func compileRules(allow []sandbox.EgressRule) (ruleSet, error) {
	rs := make(ruleSet, 0, len(allow))
	for i, er := range allow {
		r, err := compileRule(er)
		if err != nil {
			return nil, fmt.Errorf("egress rule %d: %w", i, err)
		}
		rs = append(rs, r)
	}
	return rs, nil
}

// CheckRule returns the error that a Proxy would give for rule, wrapping
// sandbox.ErrInvalid, or nil when the rule is sound. A caller can refuse a
// bad rule with it before it creates a sandbox.
func CheckRule(r sandbox.EgressRule) error {
	_, err := compileRule(r)
	return err
}

// AllowHint writes the rule that lets the proxy dial address a on port, in
// the form airlock run's --allow-host and --allow-cidr take: the address's
// own prefix (/32 or /128), with ":port" unless the port is 80 or 443, the
// default ports of a rule; an IPv6 prefix with a port is bracketed
// ("[fd00::1/128]:8443"). It goes into refusals, to say how to allow what
// was refused.
func AllowHint(a netip.Addr, port int) string {
	a = a.Unmap().WithZone("")
	p := netip.PrefixFrom(a, a.BitLen())
	switch {
	case port == 80 || port == 443:
		return p.String()
	case a.Is4():
		return fmt.Sprintf("%s:%d", p, port)
	}
	return fmt.Sprintf("[%s]:%d", p, port)
}

// compileRule compiles one rule.
func compileRule(er sandbox.EgressRule) (rule, error) {
	if (er.Host == "") == (er.CIDR == "") {
		return rule{}, fmt.Errorf("give exactly one of host or cidr: %w", sandbox.ErrInvalid)
	}
	r := rule{ports: slices.Clone(er.Ports)}
	if len(r.ports) == 0 {
		r.ports = []int{80, 443} // the default of sandbox.EgressRule
	}
	for _, p := range r.ports {
		if p < 1 || p > 65535 {
			return rule{}, fmt.Errorf("port %d out of range: %w", p, sandbox.ErrInvalid)
		}
	}
	if er.CIDR != "" {
		return compileCIDR(r, er.CIDR)
	}
	return compileHost(r, er.Host)
}

// compileCIDR reads a CIDR rule; IPv4 ranges must be written as IPv4 and
// host bits must be zero.
func compileCIDR(r rule, s string) (rule, error) {
	p, err := netip.ParsePrefix(s)
	switch {
	case err != nil:
		return rule{}, fmt.Errorf("cidr %q: %v: %w", s, err, sandbox.ErrInvalid)
	case p.Addr().Is4In6():
		return rule{}, fmt.Errorf("cidr %q: write IPv4 ranges in IPv4 form: %w", s, sandbox.ErrInvalid)
	case p != p.Masked():
		return rule{}, fmt.Errorf("cidr %q has bits set after the prefix (did you mean %s?): %w", s, p.Masked(), sandbox.ErrInvalid)
	}
	r.prefix, r.text = p, p.String()
	return r, nil
}

// compileHost reads a host pattern: a name, or "*." and a name.
func compileHost(r rule, s string) (rule, error) {
	rest, wildcard := strings.CutPrefix(s, "*.")
	h, err := ParseHost(rest)
	if err != nil {
		return rule{}, fmt.Errorf("host pattern %q: %w", s, err)
	}
	if h.IsAddr() {
		return rule{}, fmt.Errorf("host pattern %q is an address; use a cidr rule: %w", s, sandbox.ErrInvalid)
	}
	r.name, r.wildcard, r.text = h.Name, wildcard, h.Name
	if wildcard {
		r.text = "*." + h.Name
	}
	return r, nil
}

// matchName returns the first host rule that allows a parsed name on a
// port. A wildcard matches names strictly below its suffix.
func (rs ruleSet) matchName(name string, port int) (rule, bool) {
	for _, r := range rs {
		if r.name == "" || !slices.Contains(r.ports, port) {
			continue
		}
		if name == r.name && !r.wildcard || r.wildcard && strings.HasSuffix(name, "."+r.name) {
			return r, true
		}
	}
	return rule{}, false
}

// matchAddr returns the first CIDR rule that allows an address on a port.
// IPv4-mapped IPv6 addresses are matched as IPv4.
func (rs ruleSet) matchAddr(a netip.Addr, port int) (rule, bool) {
	a = a.Unmap()
	for _, r := range rs {
		if r.prefix.IsValid() && r.prefix.Contains(a) && slices.Contains(r.ports, port) {
			return r, true
		}
	}
	return rule{}, false
}
