package session

import "context"

// codeContext is one interpreter context of a session (pending interp).
type codeContext struct{}

func (c *codeContext) close(ctx context.Context) {}
