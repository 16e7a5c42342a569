package egress

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"time"
)

// verdict is the outcome of checking one destination.
type verdict struct {
	allowed bool
	reason  string
	// addrs are the checked addresses to dial, in order.
	addrs []netip.Addr
}

// deny builds a refusal with a formatted reason.
func deny(format string, args ...any) verdict {
	return verdict{reason: fmt.Sprintf(format, args...)}
}

// decide checks a destination against the rules. An IP literal needs a
// CIDR rule. A name needs a host rule; it is then resolved once, and every
// address it has must be public or covered by a CIDR rule.
func (p *Proxy) decide(ctx context.Context, h Host, port int) verdict {
	if h.IsAddr() {
		a := h.Addr.Unmap()
		r, ok := p.rules.matchAddr(a, port)
		if !ok {
			return deny("IP literal %s is not allowed on port %d: only cidr rules allow addresses; allow it with --allow-host %s", a, port, AllowHint(a, port))
		}
		return verdict{allowed: true, reason: "allowed by cidr rule " + r.text, addrs: []netip.Addr{a}}
	}
	r, ok := p.rules.matchName(h.Name, port)
	if !ok {
		return deny("%s port %d is not in the allowlist", h.Name, port)
	}
	addrs, err := p.resolve(ctx, h.Name)
	if err != nil {
		return deny("%s is allowed by rule %s but cannot be resolved: %v", h.Name, r.text, err)
	}
	for i, a := range addrs {
		a = a.Unmap()
		addrs[i] = a
		if _, ok := p.rules.matchAddr(a, port); ok {
			continue
		}
		if why := NonPublic(a); why != "" {
			return deny("%s resolves to %s, which is %s; allow it with --allow-host %s (or --allow-cidr, or a cidr rule in the policy)", h.Name, a, why, AllowHint(a, port))
		}
	}
	return verdict{allowed: true, reason: "allowed by rule " + r.text, addrs: addrs}
}

// resolve looks a name up once, with a timeout.
func (p *Proxy) resolve(ctx context.Context, name string) ([]netip.Addr, error) {
	ctx, cancel := context.WithTimeout(ctx, resolveTimeout)
	defer cancel()
	addrs, err := p.resolver.LookupNetIP(ctx, "ip", name)
	if err != nil {
		return nil, err
	}
	if len(addrs) == 0 {
		return nil, errors.New("no addresses")
	}
	return slices.Clone(addrs), nil
}

// dialAny connects to the checked addresses in order and returns the
// first connection that opens.
func (p *Proxy) dialAny(ctx context.Context, addrs []netip.Addr, port int) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(ctx, dialTimeout)
	defer cancel()
	var errs []error
	for _, a := range addrs {
		c, err := p.dial(ctx, netip.AddrPortFrom(a, uint16(port)))
		if err == nil {
			return c, nil
		}
		errs = append(errs, err)
		if ctx.Err() != nil {
			break
		}
	}
	return nil, fmt.Errorf("dial %d address(es): %v", len(addrs), errs[len(errs)-1])
}

// netDial is the production dialler: a plain TCP connection to exactly the
// given address.
func netDial(ctx context.Context, ap netip.AddrPort) (net.Conn, error) {
	d := net.Dialer{Timeout: dialTimeout, KeepAlive: 30 * time.Second}
	return d.DialContext(ctx, "tcp", ap.String())
}
