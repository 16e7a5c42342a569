package e2b

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"strconv"
	"strings"
	"sync"
	"time"
)

// grant is what the control plane handed out for one sandbox: its access
// token, and whose it is.
type grant struct {
	id       string
	tenant   string
	limitKey string // the rate limit the sandbox's requests are charged to
	token    string
	template string
}

// grants holds the grants of the sandboxes the control plane created or
// connected to. A grant outlives its session for a while (until the
// Manager forgets it), so that a late request with its token learns that
// the sandbox ended instead of being refused.
type grants struct {
	mu   sync.Mutex
	byID map[string]*grant
}

func newGrants() *grants { return &grants{byID: map[string]*grant{}} }

// newToken makes an access token: 256 random bits.
func newToken() string {
	var b [32]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// issue returns the grant of tenant's sandbox id, making it on first
// use. Every client of one sandbox gets the same token, as with E2B.
func (g *grants) issue(id, template string, c caller) *grant {
	g.mu.Lock()
	defer g.mu.Unlock()
	if gr, ok := g.byID[id]; ok && gr.tenant == c.tenant {
		return gr
	}
	gr := &grant{id: id, tenant: c.tenant, limitKey: c.limitKey, token: newToken(), template: template}
	g.byID[id] = gr
	return gr
}

// get finds the grant of a sandbox, if any.
func (g *grants) get(id string) *grant {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.byID[id]
}

// check finds the grant of sandbox id whose token is token; the token is
// compared in constant time.
func (g *grants) check(id, token string) (*grant, bool) {
	gr := g.get(id)
	if gr == nil || token == "" {
		return nil, false
	}
	if subtle.ConstantTimeCompare([]byte(gr.token), []byte(token)) != 1 {
		return nil, false
	}
	return gr, true
}

// prune forgets the grants whose sandboxes the Manager no longer knows.
func (g *grants) prune(gone func(*grant) bool) {
	g.mu.Lock()
	all := make([]*grant, 0, len(g.byID))
	for _, gr := range g.byID {
		all = append(all, gr)
	}
	g.mu.Unlock()
	for _, gr := range all {
		if gone(gr) {
			g.mu.Lock()
			if g.byID[gr.id] == gr {
				delete(g.byID, gr.id)
			}
			g.mu.Unlock()
		}
	}
}

// signature is the SDKs' signature of a file URL: "v1_" and the unpadded
// base64 of SHA-256 over "path:operation:user:token[:expiration]".
func signature(path, op, user, token, expiration string) string {
	raw := path + ":" + op + ":" + user + ":" + token
	if expiration != "" {
		raw += ":" + expiration
	}
	sum := sha256.Sum256([]byte(raw))
	return "v1_" + strings.TrimRight(base64.StdEncoding.EncodeToString(sum[:]), "=")
}

// signed finds the grant whose token made sig over the other fields, and
// checks that the signature has not expired. With id "" every grant is
// tried, with constant-time compares, since a signed URL under
// E2B_SANDBOX_URL names no sandbox; else only id's.
func (g *grants) signed(id, path, op, user, sig, expiration string, now time.Time) (*grant, bool) {
	if !strings.HasPrefix(sig, "v1_") {
		return nil, false
	}
	if expiration != "" {
		exp, err := strconv.ParseInt(expiration, 10, 64)
		if err != nil || now.Unix() > exp {
			return nil, false
		}
	}
	g.mu.Lock()
	all := make([]*grant, 0, len(g.byID))
	for _, gr := range g.byID {
		if id == "" || gr.id == id {
			all = append(all, gr)
		}
	}
	g.mu.Unlock()
	var found *grant
	for _, gr := range all {
		want := signature(path, op, user, gr.token, expiration)
		if subtle.ConstantTimeCompare([]byte(want), []byte(sig)) == 1 {
			found = gr
		}
	}
	return found, found != nil
}
