package sandbox

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"
)

func TestParseSize(t *testing.T) {
	good := map[string]int64{
		"4096": 4096, "512MiB": 512 << 20, "512mib": 512 << 20, "1g": 1 << 30, "1GiB": 1 << 30,
		"100k": 100 << 10, "1.5M": 3 << 19, "2TiB": 2 << 40, "1MB": 1e6, "1kb": 1e3, "3 GB": 3e9, " 7B ": 7,
	}
	for in, want := range good {
		if got, err := ParseSize(in); err != nil || got != want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "MiB", "12XB", "-5MiB", "1e3", "lots", "9999999TiB", "1.2.3"} {
		if _, err := ParseSize(in); !errors.Is(err, ErrInvalid) {
			t.Errorf("ParseSize(%q) = %v, want ErrInvalid", in, err)
		}
	}
	for _, in := range []string{"99999999999TiB", strings.Repeat("9", 400), strings.Repeat("9", 400) + "KiB"} {
		if _, err := ParseSize(in); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "too large") {
			t.Errorf("ParseSize(%.20q…) = %v, want ErrInvalid saying too large", in, err)
		}
	}
}

func TestFormatSize(t *testing.T) {
	for in, want := range map[int64]string{100: "100B", 1 << 20: "1MiB", 1536 << 10: "1.5MiB", 5 << 40: "5TiB"} {
		if got := FormatSize(in); got != want {
			t.Errorf("FormatSize(%d) = %q, want %q", in, got, want)
		}
	}
}

func TestDuration(t *testing.T) {
	for in, want := range map[string]time.Duration{"30s": 30 * time.Second, "2m": 2 * time.Minute, "1.5": 1500 * time.Millisecond} {
		if got, err := ParseDuration(in); err != nil || time.Duration(got) != want {
			t.Errorf("ParseDuration(%q) = %v, %v", in, got, err)
		}
	}
	for in, want := range map[string]string{
		"soon": "use a number of seconds", "NaN": "not a number", "1e300": "too large",
		"-1e300": "out of range", "+Inf": "too large", "1e400": "too large", "9223372037": "too large",
	} {
		if _, err := ParseDuration(in); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseDuration(%q) = %v, want ErrInvalid saying %q", in, err, want)
		}
	}
	var big Limits
	if err := json.Unmarshal([]byte(`{"timeout": 1e300}`), &big); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "too large") {
		t.Errorf("timeout 1e300 in JSON: %v (%v), want too large", err, big.Timeout)
	}
	var l Limits
	if err := json.Unmarshal([]byte(`{"timeout": 12}`), &l); err != nil || time.Duration(l.Timeout) != 12*time.Second {
		t.Errorf("timeout from a JSON number: %v %v", l.Timeout, err)
	}
	if err := json.Unmarshal([]byte(`{"timeout": "1m30s"}`), &l); err != nil || time.Duration(l.Timeout) != 90*time.Second {
		t.Errorf("timeout from a JSON string: %v %v", l.Timeout, err)
	}
	b, _ := json.Marshal(Limits{Timeout: Duration(time.Minute)})
	if string(b) != `{"timeout":"1m0s"}` {
		t.Errorf("marshal: %s", b)
	}
}

func TestNormalize(t *testing.T) {
	p, err := Policy{}.Normalize()
	if err != nil {
		t.Fatal(err)
	}
	if p.Limits.MemoryBytes != 512<<20 || p.Limits.Pids != 128 || time.Duration(p.Limits.Timeout) != 30*time.Second ||
		p.Limits.DiskInodes != 16384 || p.Limits.OpenFiles != 1024 {
		t.Errorf("defaults: %+v", p.Limits)
	}
	bad := []Policy{
		{Limits: Limits{MemoryBytes: 1 << 20}},
		{Limits: Limits{MemoryBytes: 2 << 40}},
		{Limits: Limits{CPUs: -1}},
		{Limits: Limits{CPUs: 2000}},
		{Limits: Limits{Pids: -1}},
		{Limits: Limits{Timeout: Duration(48 * time.Hour)}},
		{Limits: Limits{Timeout: -1}},
		{Limits: Limits{DiskBytes: 10}},
		{Limits: Limits{OutputBytes: 2 << 30}},
		{Limits: Limits{OpenFiles: 3}},
		{Env: map[string]string{"A=B": "x"}},
		{Env: map[string]string{"": "x"}},
		{Env: map[string]string{"A": "x\x00y"}},
		{Network: NetworkPolicy{Allow: []EgressRule{{}}}},
		{Network: NetworkPolicy{Allow: []EgressRule{{Host: "a.com", CIDR: "10.0.0.0/8"}}}},
		{Network: NetworkPolicy{Allow: []EgressRule{{Host: "a.com", Ports: []int{70000}}}}},
	}
	for _, b := range bad {
		if _, err := b.Normalize(); !errors.Is(err, ErrInvalid) {
			t.Errorf("Normalize(%+v) = %v, want ErrInvalid", b, err)
		}
	}
}

func TestParseEnv(t *testing.T) {
	if k, v, err := ParseEnv("A=b=c"); err != nil || k != "A" || v != "b=c" {
		t.Errorf("ParseEnv(A=b=c) = %q %q %v", k, v, err)
	}
	for _, bad := range []string{"noequals", "=x", "A=\x00"} {
		if _, _, err := ParseEnv(bad); !errors.Is(err, ErrInvalid) {
			t.Errorf("ParseEnv(%q) = %v", bad, err)
		}
	}
}
