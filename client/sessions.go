package client

import (
	"context"
	"net/http"
	"time"

	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/sandbox"
)

// CreateSession starts a session: POST /v1/sessions. It is not retried
// (a second try could start a second sandbox), except after a 429 with
// Options.RetryRateLimited.
func (c *Client) CreateSession(ctx context.Context, req api.CreateSession) (api.Session, error) {
	var out api.Session
	err := c.call(ctx, &request{method: http.MethodPost, path: "/v1/sessions", quotaRetry: true}, req, &out)
	return out, err
}

// ListSessions lists the key's tenant's sessions, oldest first.
func (c *Client) ListSessions(ctx context.Context) ([]api.Session, error) {
	var out api.SessionList
	err := c.get(ctx, "/v1/sessions", nil, &out)
	return out.Sessions, err
}

// GetSession describes one session. A session that ended is ErrEnded,
// one the tenant never had (or another tenant's) ErrNotFound.
func (c *Client) GetSession(ctx context.Context, id string) (api.Session, error) {
	var out api.Session
	p, err := sessionPath(id)
	if err != nil {
		return out, err
	}
	err = c.get(ctx, p, nil, &out)
	return out, err
}

// DeleteSession ends a session and destroys its sandbox. When a retry
// finds it gone, the first try did it and the call succeeds.
func (c *Client) DeleteSession(ctx context.Context, id string) error {
	p, err := sessionPath(id)
	if err != nil {
		return err
	}
	return c.del(ctx, p)
}

// SetTTL makes a session end ttl from now (whole milliseconds).
func (c *Client) SetTTL(ctx context.Context, id string, ttl time.Duration) (api.Session, error) {
	var out api.Session
	p, err := sessionPath(id, "/ttl")
	if err != nil {
		return out, err
	}
	err = c.post(ctx, p, api.SetTTL{TTLSeconds: ttl.Round(time.Millisecond).Seconds()}, &out)
	return out, err
}

// Artifacts judges every file of the session's /workspace/output with
// the artifact filter and lists the verdicts; nothing is downloaded (see
// GetFile, and RunOnce for a whole run).
func (c *Client) Artifacts(ctx context.Context, id string) ([]sandbox.Artifact, error) {
	var out api.ArtifactList
	p, err := sessionPath(id, "/artifacts")
	if err != nil {
		return nil, err
	}
	err = c.get(ctx, p, nil, &out)
	return out.Artifacts, err
}
