package egress

import (
	"strings"
	"testing"
)

// FuzzParseHost checks that the host parser never panics and that what it
// accepts is canonical: a name comes back unchanged when parsed again and
// obeys the DNS rules; an address has no zone. ParseAuthority is held to
// the same rules. The seed corpus is in testdata/fuzz/FuzzParseHost.
func FuzzParseHost(f *testing.F) {
	f.Fuzz(func(t *testing.T, s string) {
		h, err := ParseHost(s)
		if err == nil {
			checkCanonical(t, s, h)
		}
		h, port, err := ParseAuthority(s, 443)
		if err == nil {
			checkCanonical(t, s, h)
			if port < 1 || port > 65535 {
				t.Errorf("ParseAuthority(%q) port %d", s, port)
			}
		}
	})
}

func checkCanonical(t *testing.T, s string, h Host) {
	if h.IsAddr() {
		if h.Name != "" || h.Addr.Zone() != "" {
			t.Errorf("ParseHost(%q) = %+v: an address with a name or a zone", s, h)
		}
		return
	}
	if err := checkLDH(h.Name); err != nil {
		t.Errorf("ParseHost(%q) = %q: %v", s, h.Name, err)
	}
	if strings.ToLower(h.Name) != h.Name {
		t.Errorf("ParseHost(%q) = %q: not lower case", s, h.Name)
	}
	last := h.Name[strings.LastIndexByte(h.Name, '.')+1:]
	if isNumberLabel(last) {
		t.Errorf("ParseHost(%q) = %q: a name ending in a number", s, h.Name)
	}
	again, err := ParseHost(h.Name)
	if err != nil || again != h {
		t.Errorf("ParseHost(%q) = %q, but that parses as %+v, %v", s, h.Name, again, err)
	}
}
