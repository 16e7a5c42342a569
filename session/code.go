package session

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/airlock-sandbox/airlock/interp"
	"github.com/airlock-sandbox/airlock/sandbox"
)

// codeContext is one interpreter context of a session.
type codeContext struct {
	id, lang, cwd string
	c             *interp.Context
}

func (c *codeContext) close(ctx context.Context) { _ = c.c.Close(ctx) }

// ContextInfo describes an interpreter context.
type ContextInfo struct {
	ID, Language, Cwd string
}

// maxContexts bounds the interpreter contexts of one session.
const maxContexts = 16

// codeLanguage maps what a caller may say to a context's language.
func codeLanguage(lang string) (string, error) {
	switch l := strings.ToLower(lang); l {
	case "":
		return interp.Python, nil
	case "js", "node", "javascript", "typescript":
		if l == "typescript" {
			return "", fmt.Errorf("language typescript: not served; use javascript: %w", sandbox.ErrInvalid)
		}
		return interp.JavaScript, nil
	case "python", "python3", "py":
		return interp.Python, nil
	case "bash", "sh", "shell":
		return interp.Bash, nil
	}
	return "", fmt.Errorf("language %q: want python, javascript or bash: %w", lang, sandbox.ErrInvalid)
}

// CreateContext starts a new interpreter context.
func (s *Session) CreateContext(ctx context.Context, lang, cwd string) (ContextInfo, error) {
	if err := s.alive(); err != nil {
		return ContextInfo{}, err
	}
	defer s.use()()
	l, err := codeLanguage(lang)
	if err != nil {
		return ContextInfo{}, err
	}
	return s.newContext(ctx, newContextID(), l, cwd, "")
}

// newContext starts and records a context under id.
func (s *Session) newContext(ctx context.Context, id, lang, cwd, preload string) (ContextInfo, error) {
	s.mu.Lock()
	n := len(s.contexts)
	s.mu.Unlock()
	if n >= maxContexts {
		return ContextInfo{}, fmt.Errorf("session %s has %d interpreter contexts, the most it may: %w", s.id, n, sandbox.ErrLimit)
	}
	if cwd == "" {
		cwd = "/workspace"
	}
	c, err := interp.Start(ctx, s.inst, interp.Options{Language: lang, Cwd: cwd, Preload: preload})
	if err != nil {
		return ContextInfo{}, err
	}
	cc := &codeContext{id: id, lang: lang, cwd: cwd, c: c}
	s.mu.Lock()
	if s.ended != "" || len(s.contexts) >= maxContexts {
		s.mu.Unlock()
		cc.close(ctx)
		if err := s.alive(); err != nil {
			return ContextInfo{}, err
		}
		return ContextInfo{}, fmt.Errorf("session %s has too many interpreter contexts: %w", s.id, sandbox.ErrLimit)
	}
	s.contexts[id] = cc
	s.mu.Unlock()
	return ContextInfo{ID: id, Language: lang, Cwd: cwd}, nil
}

func newContextID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// Contexts lists the session's interpreter contexts.
func (s *Session) Contexts() []ContextInfo {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]ContextInfo, 0, len(s.contexts))
	for _, c := range s.contexts {
		out = append(out, ContextInfo{ID: c.id, Language: c.lang, Cwd: c.cwd})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// context finds a context by id.
func (s *Session) context(id string) (*codeContext, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, ok := s.contexts[id]
	if !ok {
		return nil, fmt.Errorf("interpreter context %q: %w", id, sandbox.ErrNotFound)
	}
	return c, nil
}

// RemoveContext stops a context.
func (s *Session) RemoveContext(ctx context.Context, id string) error {
	c, err := s.context(id)
	if err != nil {
		return err
	}
	s.mu.Lock()
	delete(s.contexts, id)
	s.mu.Unlock()
	c.close(ctx)
	return nil
}

// RestartContext restarts a context: its state is lost.
func (s *Session) RestartContext(ctx context.Context, id string) error {
	c, err := s.context(id)
	if err != nil {
		return err
	}
	defer s.use()()
	return c.c.Restart(ctx)
}

// CodeRequest is one code call.
type CodeRequest struct {
	Code string
	// Language picks the default context of a language when Context is
	// empty; "" is python.
	Language string
	// Context is a context's id; "" is the language's default context,
	// started on first use.
	Context string
	// Timeout bounds the call; 0 is the policy's timeout.
	Timeout time.Duration
}

// CodeResult is what a code call gave back, and the context that ran it.
type CodeResult struct {
	interp.Execution
	Context string
}

// Code runs a cell in an interpreter context: variables, imports and
// functions persist between calls in a context. onEvent, when set,
// receives each event as it comes.
func (s *Session) Code(ctx context.Context, req CodeRequest, onEvent func(interp.Event)) (CodeResult, error) {
	if err := s.alive(); err != nil {
		return CodeResult{}, err
	}
	defer s.use()()
	c, err := s.codeContext(ctx, req)
	if err != nil {
		return CodeResult{}, err
	}
	timeout := req.Timeout
	if timeout <= 0 {
		timeout = time.Duration(s.policy.Limits.Timeout)
	}
	x, err := c.c.Run(ctx, req.Code, timeout, onEvent)
	s.m.observeCode(s, c.lang, req.Code, x, err)
	return CodeResult{Execution: x, Context: c.id}, err
}

// codeContext finds the context a call names, starting the default
// context of its language on first use.
func (s *Session) codeContext(ctx context.Context, req CodeRequest) (*codeContext, error) {
	if req.Context != "" {
		return s.context(req.Context)
	}
	lang, err := codeLanguage(req.Language)
	if err != nil {
		return nil, err
	}
	if c, err := s.context(lang); err == nil {
		return c, nil
	}
	if _, err := s.newContext(ctx, lang, lang, "", ""); err != nil {
		return nil, err
	}
	return s.context(lang)
}

// DataPreload is what the python image's pooled sessions import before
// they are handed out: the data libraries an agent's first cell reaches for.
const DataPreload = "import pandas as pd, numpy as np, matplotlib.pyplot as plt, openpyxl"

// WarmPython is a PoolSpec.Warm that starts a session's default python
// context and runs preload in it (for example the imports of the data
// libraries), so that a pooled session's first call finds them loaded.
func WarmPython(preload string) func(context.Context, *Session) error {
	return func(ctx context.Context, s *Session) error {
		_, err := s.newContext(ctx, interp.Python, interp.Python, "", preload)
		return err
	}
}

// observeCode reports a code call.
func (m *Manager) observeCode(s *Session, lang, code string, x interp.Execution, err error) {
	first, _, _ := strings.Cut(strings.TrimSpace(code), "\n")
	e := Event{Kind: EventCode, Time: m.now(), Session: s.id, Owner: s.owner, Backend: s.backend,
		What: cut(lang + ": " + first), DurationMS: float64(x.Duration) / float64(time.Millisecond), TimedOut: x.Interrupted}
	if x.Error != nil {
		e.ExitCode = 1
		e.Detail = cut(x.Error.Name + ": " + x.Error.Value)
	}
	if err != nil {
		e.Error = err.Error()
	}
	m.opts.Observer.Event(e)
}
