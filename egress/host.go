package egress

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"unicode/utf8"

	"golang.org/x/net/idna"

	"github.com/airlock-sandbox/airlock/sandbox"
)

// Bounds on host names. maxInput caps what is even looked at; the others
// are the DNS limits on a name without its trailing dot.
const (
	maxInput    = 1024
	maxNameLen  = 253
	maxLabelLen = 63
)

// idnaProfile converts internationalised names to their ASCII form. It maps
// nothing (no case folding, no width folding): a name must already be in
// its canonical form, apart from ASCII upper case, which parseHost lowers.
// Hyphens in the third and fourth place are allowed because real host
// names use them; leading and trailing hyphens are checked by checkLDH.
var idnaProfile = idna.New(idna.ValidateForRegistration(), idna.CheckHyphens(false))

// Host is a parsed destination: a DNS name or an IP address, never both.
type Host struct {
	// Name is a lower-case ASCII name (IDNA A-labels) without trailing dot.
	Name string
	// Addr is set when the destination was written as an IP address.
	Addr netip.Addr
}

// IsAddr reports whether the host is an IP literal.
func (h Host) IsAddr() bool { return h.Addr.IsValid() }

// String writes the host as a name or an address.
func (h Host) String() string {
	if h.IsAddr() {
		return h.Addr.String()
	}
	return h.Name
}

// ParseHost parses a host as it appears in a request, without a port: a
// DNS name, a canonical IPv4 address or an IPv6 address (bracketed or
// not). It refuses, with an error wrapping sandbox.ErrInvalid, anything
// malformed or ambiguous, including IPv4 addresses in notations other than
// the dotted quad (their value is named in the error).
func ParseHost(s string) (Host, error) {
	if err := checkRaw(s); err != nil {
		return Host{}, err
	}
	if strings.HasPrefix(s, "[") {
		return parseBracketed(s)
	}
	if strings.Contains(s, ":") {
		return parseIPv6(s, s)
	}
	name := strings.TrimSuffix(asciiLower(s), ".")
	if h, ok, err := numericHost(name); ok || err != nil {
		return h, err
	}
	ascii, err := idnaProfile.ToASCII(name)
	if err != nil {
		return Host{}, fmt.Errorf("host %q is not a valid name (%v): %w", s, err, sandbox.ErrInvalid)
	}
	if err := checkLDH(ascii); err != nil {
		return Host{}, fmt.Errorf("host %q: %w", s, err)
	}
	return Host{Name: ascii}, nil
}

// checkRaw refuses bytes that never belong in a host: controls, spaces,
// percent signs (percent-encoding, zone identifiers), user info and URL
// delimiters, and invalid UTF-8.
func checkRaw(s string) error {
	if s == "" {
		return fmt.Errorf("empty host: %w", sandbox.ErrInvalid)
	}
	if len(s) > maxInput {
		return fmt.Errorf("host of %d bytes is too long: %w", len(s), sandbox.ErrInvalid)
	}
	if !utf8.ValidString(s) {
		return fmt.Errorf("host %q is not valid UTF-8: %w", s, sandbox.ErrInvalid)
	}
	for _, r := range s {
		if r < 0x21 || r == 0x7f || (r >= 0x80 && r < 0xa0) {
			return fmt.Errorf("host %q contains a control or space character: %w", s, sandbox.ErrInvalid)
		}
		if strings.ContainsRune(`%@/\?#,;"'<>{}|^`+"`", r) {
			return fmt.Errorf("host %q contains %q: %w", s, r, sandbox.ErrInvalid)
		}
	}
	return nil
}

// parseBracketed reads "[v6]" as used in URLs and CONNECT targets.
func parseBracketed(s string) (Host, error) {
	inner, ok := strings.CutSuffix(s[1:], "]")
	if !ok || strings.ContainsAny(inner, "[]") {
		return Host{}, fmt.Errorf("host %q has unbalanced brackets: %w", s, sandbox.ErrInvalid)
	}
	return parseIPv6(inner, s)
}

// parseIPv6 reads an IPv6 address; raw is what the client wrote.
func parseIPv6(s, raw string) (Host, error) {
	a, err := netip.ParseAddr(s)
	if err != nil || !a.Is6() {
		return Host{}, fmt.Errorf("host %q is not a valid IPv6 address: %w", raw, sandbox.ErrInvalid)
	}
	return Host{Addr: a}, nil
}

// asciiLower lowers ASCII letters only; other characters are left for the
// IDNA profile to judge.
func asciiLower(s string) string {
	return strings.Map(func(r rune) rune {
		if r >= 'A' && r <= 'Z' {
			return r + ('a' - 'A')
		}
		return r
	}, s)
}

// checkLDH enforces the DNS length limits and the hyphen rule on an ASCII
// name: labels of 1 to 63 letters, digits and hyphens, not starting or
// ending with a hyphen, 253 bytes in all.
func checkLDH(name string) error {
	if len(name) > maxNameLen {
		return fmt.Errorf("name longer than %d bytes: %w", maxNameLen, sandbox.ErrInvalid)
	}
	for label := range strings.SplitSeq(name, ".") {
		switch {
		case label == "":
			return fmt.Errorf("empty label: %w", sandbox.ErrInvalid)
		case len(label) > maxLabelLen:
			return fmt.Errorf("label longer than %d bytes: %w", maxLabelLen, sandbox.ErrInvalid)
		case label[0] == '-' || label[len(label)-1] == '-':
			return fmt.Errorf("label %q starts or ends with a hyphen: %w", label, sandbox.ErrInvalid)
		}
		for i := 0; i < len(label); i++ {
			if c := label[i]; !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
				return fmt.Errorf("label %q contains %q: %w", label, c, sandbox.ErrInvalid)
			}
		}
	}
	return nil
}

// numericHost decides whether a lower-case name is an IPv4 address. As in
// the WHATWG URL standard, a name whose last label is a number (decimal, or
// hexadecimal with 0x) is an address and never a DNS name. It returns ok
// for a canonical dotted quad, an error for every other numeric notation
// (naming the address it stands for) and neither for a real name.
func numericHost(name string) (Host, bool, error) {
	last := name[strings.LastIndexByte(name, '.')+1:]
	if !isNumberLabel(last) {
		return Host{}, false, nil
	}
	if a, err := netip.ParseAddr(name); err == nil && a.Is4() {
		return Host{Addr: a}, true, nil
	}
	a, err := parseLooseIPv4(name)
	if err != nil {
		return Host{}, false, fmt.Errorf("host %q ends in a number but is not an IPv4 address: %w", name, sandbox.ErrInvalid)
	}
	return Host{}, false, fmt.Errorf("host %q is IPv4 address %s in a non-canonical notation: %w", name, a, sandbox.ErrInvalid)
}

// isNumberLabel reports whether a label is all decimal digits, or 0x
// followed by hexadecimal digits (possibly none).
func isNumberLabel(l string) bool {
	if hex, ok := strings.CutPrefix(l, "0x"); ok {
		return strings.Trim(hex, "0123456789abcdef") == ""
	}
	return l != "" && strings.Trim(l, "0123456789") == ""
}

// parseLooseIPv4 reads the inet_aton notations: one to four parts, each
// decimal, octal (leading 0) or hexadecimal (0x); the last part fills the
// remaining bytes. It exists to name the address that a disguised literal
// stands for.
func parseLooseIPv4(s string) (netip.Addr, error) {
	parts := strings.Split(s, ".")
	if len(parts) > 4 {
		return netip.Addr{}, fmt.Errorf("too many parts: %w", sandbox.ErrInvalid)
	}
	var v uint64
	for i, p := range parts {
		n, err := parseIPv4Part(p)
		if err != nil {
			return netip.Addr{}, err
		}
		bits := uint(8)
		if i == len(parts)-1 {
			bits = uint(8 * (5 - len(parts)))
		}
		if n >= 1<<bits {
			return netip.Addr{}, fmt.Errorf("part %q out of range: %w", p, sandbox.ErrInvalid)
		}
		v = v<<bits | n
	}
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)}), nil
}

// parseIPv4Part reads one part of a loose IPv4 address.
func parseIPv4Part(p string) (uint64, error) {
	base, digits := 10, p
	switch {
	case strings.HasPrefix(p, "0x"):
		base, digits = 16, p[2:]
		if digits == "" {
			return 0, nil
		}
	case len(p) > 1 && p[0] == '0':
		base, digits = 8, p[1:]
	}
	n, err := strconv.ParseUint(digits, base, 32)
	if err != nil || digits == "" || digits[0] == '+' {
		return 0, fmt.Errorf("part %q is not a number: %w", p, sandbox.ErrInvalid)
	}
	return n, nil
}

// parsePort reads a port written as 1 to 5 decimal digits without a
// leading zero, in the range 1–65535.
func parsePort(s string) (int, error) {
	if s == "" || len(s) > 5 || s[0] == '0' || strings.Trim(s, "0123456789") != "" {
		return 0, fmt.Errorf("port %q is not a number from 1 to 65535: %w", s, sandbox.ErrInvalid)
	}
	n, _ := strconv.Atoi(s)
	if n > 65535 {
		return 0, fmt.Errorf("port %q is not a number from 1 to 65535: %w", s, sandbox.ErrInvalid)
	}
	return n, nil
}

// ParseAuthority parses "host:port" as in a CONNECT request or a URL. The
// port may be left out only when defaultPort is not zero. IPv6 addresses
// must be bracketed when a port follows.
func ParseAuthority(s string, defaultPort int) (Host, int, error) {
	if err := checkRaw(s); err != nil {
		return Host{}, 0, err
	}
	hostPart, portPart, hasPort := s, "", false
	if strings.HasPrefix(s, "[") {
		end := strings.IndexByte(s, ']')
		if end < 0 {
			return Host{}, 0, fmt.Errorf("authority %q has unbalanced brackets: %w", s, sandbox.ErrInvalid)
		}
		hostPart = s[:end+1]
		if rest := s[end+1:]; rest != "" {
			p, ok := strings.CutPrefix(rest, ":")
			if !ok {
				return Host{}, 0, fmt.Errorf("authority %q has text after the address: %w", s, sandbox.ErrInvalid)
			}
			portPart, hasPort = p, true
		}
	} else if i := strings.LastIndexByte(s, ':'); i >= 0 {
		hostPart, portPart, hasPort = s[:i], s[i+1:], true
		if strings.Contains(hostPart, ":") {
			return Host{}, 0, fmt.Errorf("authority %q: IPv6 addresses must be bracketed: %w", s, sandbox.ErrInvalid)
		}
	}
	port := defaultPort
	if hasPort || defaultPort == 0 {
		p, err := parsePort(portPart)
		if err != nil {
			return Host{}, 0, fmt.Errorf("authority %q: %w", s, err)
		}
		port = p
	}
	h, err := ParseHost(hostPart)
	return h, port, err
}
