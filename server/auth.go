package server

import (
	"bufio"
	"crypto/sha256"
	"crypto/subtle"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/airlock-sandbox/airlock/sandbox"
	"github.com/airlock-sandbox/airlock/session"
)

// Tenant is who an API key belongs to, and what it may hold.
type Tenant struct {
	Name  string
	Quota session.Quota
}

// keyEntry is one API key, kept as its SHA-256 only.
type keyEntry struct {
	hash   [sha256.Size]byte
	tenant *Tenant
}

// Keys maps API keys to tenants. Keys are kept hashed and compared in
// constant time.
type Keys struct {
	entries []keyEntry
	tenants map[string]*Tenant
}

// Keys files have one key per line: "TENANT KEY [sessions=N] [memory=SIZE]
// [cpus=N]"; blank lines and lines starting with # are skipped. The quota
// words set the tenant's quota (the same for every key of the tenant; the
// last line that sets one wins).

// minKeyLen bounds how short a key may be: guessing must be hopeless.
const minKeyLen = 16

// ParseKeys reads a keys file's content. Errors wrap sandbox.ErrInvalid
// and name the line, never the key.
func ParseKeys(r io.Reader, def session.Quota) (*Keys, error) {
	k := &Keys{tenants: map[string]*Tenant{}}
	sc := bufio.NewScanner(r)
	line := 0
	seen := map[[sha256.Size]byte]bool{}
	for sc.Scan() {
		line++
		f := strings.Fields(sc.Text())
		if len(f) == 0 || strings.HasPrefix(f[0], "#") {
			continue
		}
		if len(f) < 2 {
			return nil, fmt.Errorf("keys, line %d: want TENANT KEY: %w", line, sandbox.ErrInvalid)
		}
		name, key := f[0], f[1]
		if err := checkTenant(name); err != nil {
			return nil, fmt.Errorf("keys, line %d: %w", line, err)
		}
		if len(key) < minKeyLen {
			return nil, fmt.Errorf("keys, line %d: the key is shorter than %d characters: %w", line, minKeyLen, sandbox.ErrInvalid)
		}
		t := k.tenants[name]
		if t == nil {
			t = &Tenant{Name: name, Quota: def}
			k.tenants[name] = t
		}
		for _, w := range f[2:] {
			if err := setQuota(&t.Quota, w); err != nil {
				return nil, fmt.Errorf("keys, line %d: %w", line, err)
			}
		}
		h := sha256.Sum256([]byte(key))
		if seen[h] {
			return nil, fmt.Errorf("keys, line %d: a key given twice: %w", line, sandbox.ErrInvalid)
		}
		seen[h] = true
		k.entries = append(k.entries, keyEntry{hash: h, tenant: t})
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("keys: %w", err)
	}
	return k, nil
}

// LoadKeys reads the keys file at path, or, with path "", the variable
// AIRLOCK_API_KEYS (same lines, separated by newlines or semicolons); nil
// when neither gives a key.
func LoadKeys(path string, getenv func(string) string, def session.Quota) (*Keys, error) {
	if path != "" {
		f, err := os.Open(path)
		if err != nil {
			return nil, fmt.Errorf("keys file: %w", err)
		}
		defer f.Close()
		return ParseKeys(f, def)
	}
	env := getenv("AIRLOCK_API_KEYS")
	if strings.TrimSpace(env) == "" {
		return nil, nil
	}
	return ParseKeys(strings.NewReader(strings.ReplaceAll(env, ";", "\n")), def)
}

// checkTenant accepts names of letters, digits, '-', '_' and '.'.
func checkTenant(name string) error {
	if name == "" || len(name) > 64 {
		return fmt.Errorf("tenant %q: 1 to 64 characters: %w", name, sandbox.ErrInvalid)
	}
	for _, r := range name {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.') {
			return fmt.Errorf("tenant %q: only letters, digits, '-', '_' and '.': %w", name, sandbox.ErrInvalid)
		}
	}
	return nil
}

// setQuota reads one quota word: sessions=N, memory=SIZE, cpus=N.
func setQuota(q *session.Quota, w string) error {
	k, v, ok := strings.Cut(w, "=")
	if !ok {
		return fmt.Errorf("quota %q: want sessions=N, memory=SIZE or cpus=N: %w", w, sandbox.ErrInvalid)
	}
	var err error
	switch k {
	case "sessions":
		q.Sessions, err = strconv.Atoi(v)
		if err == nil && q.Sessions < 0 {
			err = fmt.Errorf("negative")
		}
	case "memory":
		q.MemoryBytes, err = sandbox.ParseSize(v)
	case "cpus":
		q.CPUs, err = strconv.ParseFloat(v, 64)
		if err == nil && (q.CPUs < 0 || q.CPUs != q.CPUs) {
			err = fmt.Errorf("not a count of CPUs")
		}
	default:
		return fmt.Errorf("quota %q: unknown (sessions, memory, cpus): %w", w, sandbox.ErrInvalid)
	}
	if err != nil {
		return fmt.Errorf("quota %q: %v: %w", w, err, sandbox.ErrInvalid)
	}
	return nil
}

// Lookup finds the tenant of key. Every entry is compared, in constant
// time, so the answer's timing says nothing about which key matched.
func (k *Keys) Lookup(key string) (*Tenant, bool) {
	if k == nil {
		return nil, false
	}
	h := sha256.Sum256([]byte(key))
	var found *Tenant
	for i := range k.entries {
		if subtle.ConstantTimeCompare(h[:], k.entries[i].hash[:]) == 1 {
			found = k.entries[i].tenant
		}
	}
	return found, found != nil
}

// Tenant finds a tenant by name.
func (k *Keys) Tenant(name string) (*Tenant, bool) {
	if k == nil {
		return nil, false
	}
	t, ok := k.tenants[name]
	return t, ok
}

// Len is the number of keys.
func (k *Keys) Len() int {
	if k == nil {
		return 0
	}
	return len(k.entries)
}
