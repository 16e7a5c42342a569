package session

import (
	"context"
	"fmt"
	"io"
	"path"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/airlock-sandbox/airlock/artifact"
	"github.com/airlock-sandbox/airlock/egress"
	"github.com/airlock-sandbox/airlock/sandbox"
)

// Session is one sandbox that lives across the steps of an agent: its
// files and processes persist between calls until it is destroyed or its
// TTL or idle timeout passes.
type Session struct {
	m       *Manager
	id      string
	backend string
	image   sandbox.Image
	policy  sandbox.Policy
	inst    sandbox.Instance
	proxy   *egress.Proxy // nil without egress rules
	pooled  bool

	// Set once by Create before the session is shared.
	owner    string
	metadata map[string]string
	created  time.Time
	expires  time.Time
	idle     time.Duration

	lastUsed atomic.Int64 // unix nanoseconds
	busy     atomic.Int32 // calls in progress; the idle timeout waits for them

	mu       sync.Mutex
	procs    map[string]*Process
	order    []string // process ids, oldest first
	contexts map[string]*codeContext
	expiry   time.Time // an extended TTL; zero: expires
	ended    string    // why it ended; "" while it runs
	finish   sync.Once
}

// Info describes a session for listings.
type Info struct {
	ID          string            `json:"id"`
	Owner       string            `json:"-"`
	Backend     string            `json:"backend"`
	Image       string            `json:"image"`
	Created     time.Time         `json:"created"`
	ExpiresAt   time.Time         `json:"expires_at"`
	IdleTimeout time.Duration     `json:"-"`
	LastUsed    time.Time         `json:"last_used"`
	Metadata    map[string]string `json:"metadata,omitempty"`
	Limits      sandbox.Limits    `json:"limits"`
	Pooled      bool              `json:"pooled"`
}

// start creates the sandbox of a session and wires its egress.
func (m *Manager) start(ctx context.Context, name string, be sandbox.Backend, img sandbox.Image, pol sandbox.Policy) (*Session, error) {
	inst, err := be.Create(ctx, sandbox.Spec{ID: newID(), Image: img, Policy: pol})
	if err != nil {
		return nil, err
	}
	s := &Session{m: m, id: inst.ID(), backend: name, image: img, policy: pol, inst: inst,
		procs: map[string]*Process{}, contexts: map[string]*codeContext{}}
	s.proxy, err = egress.Attach(ctx, inst, egress.Options{Policy: pol.Network, Logger: m.log.With("session", s.id), Hooks: m.opts.EgressHooks})
	if err != nil {
		_ = inst.Destroy(context.Background())
		return nil, err
	}
	return s, nil
}

// ID is the session's id.
func (s *Session) ID() string { return s.id }

// Owner is the tenant the session belongs to.
func (s *Session) Owner() string { return s.owner }

// Policy is the session's normalized policy.
func (s *Session) Policy() sandbox.Policy { return s.policy }

// Instance is the session's sandbox, for what the session does not wrap.
func (s *Session) Instance() sandbox.Instance { return s.inst }

// Info describes the session.
func (s *Session) Info() Info {
	return Info{ID: s.id, Owner: s.owner, Backend: s.backend, Image: s.image.Name, Created: s.created,
		ExpiresAt: s.expiresAt(), IdleTimeout: s.idle, LastUsed: time.Unix(0, s.lastUsed.Load()),
		Metadata: cloneMap(s.metadata), Limits: s.policy.Limits, Pooled: s.pooled}
}

func (s *Session) expiresAt() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.expiry.IsZero() {
		return s.expiry
	}
	return s.expires
}

// SetTTL makes the session end ttl from now.
func (s *Session) SetTTL(ttl time.Duration) error {
	if ttl <= 0 || ttl > s.m.opts.MaxTTL {
		return fmt.Errorf("ttl %v out of range (up to %v): %w", ttl, s.m.opts.MaxTTL, sandbox.ErrInvalid)
	}
	s.mu.Lock()
	s.expiry = s.m.now().Add(ttl)
	s.mu.Unlock()
	// a shared session's other holders reap it by the record
	ctx, cancel := context.WithTimeout(context.Background(), recoverWait)
	defer cancel()
	return s.publish(ctx)
}

// use marks the session used now and busy until the returned func runs.
func (s *Session) use() func() {
	s.busy.Add(1)
	s.lastUsed.Store(s.m.now().UnixNano())
	s.touch()
	return func() {
		s.lastUsed.Store(s.m.now().UnixNano())
		s.busy.Add(-1)
	}
}

// alive fails once the session has ended.
func (s *Session) alive() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ended != "" {
		return fmt.Errorf("session %s: %s: %w", s.id, s.ended, ErrEnded)
	}
	return nil
}

// Exec runs a process to its end and returns its Result, with the egress
// decisions made meanwhile.
func (s *Session) Exec(ctx context.Context, spec sandbox.ProcessSpec) (sandbox.Result, error) {
	if err := s.alive(); err != nil {
		return sandbox.Result{}, err
	}
	defer s.use()()
	mark := s.proxy.Cursor()
	res, err := sandbox.Exec(ctx, s.inst, spec)
	res.Egress = append(res.Egress, s.proxy.Since(mark)...)
	s.m.observeResult(s, EventExec, spec.Cmd, res, err)
	return res, err
}

// maxKeptProcesses bounds the background processes a session remembers;
// the oldest that ended are forgotten first.
const maxKeptProcesses = 256

// Process is a background process of a session.
type Process struct {
	ID      string
	Cmd     []string
	Started time.Time
	proc    sandbox.Process
	done    chan struct{}
	res     sandbox.Result
	err     error
}

// Start starts a background process and returns at once.
func (s *Session) Start(ctx context.Context, spec sandbox.ProcessSpec) (*Process, error) {
	if err := s.alive(); err != nil {
		return nil, err
	}
	defer s.use()()
	mark := s.proxy.Cursor()
	p, err := s.inst.Start(ctx, spec)
	if err != nil {
		return nil, err
	}
	bp := &Process{ID: p.ID(), Cmd: spec.Cmd, Started: s.m.now(), proc: p, done: make(chan struct{})}
	s.mu.Lock()
	s.procs[bp.ID] = bp
	s.order = append(s.order, bp.ID)
	s.forgetOld()
	s.mu.Unlock()
	go func() {
		bp.res, bp.err = p.Wait(context.Background())
		bp.res.Egress = append(bp.res.Egress, s.proxy.Since(mark)...)
		close(bp.done)
		s.m.observeResult(s, EventExec, spec.Cmd, bp.res, bp.err)
	}()
	return bp, nil
}

// forgetOld drops the oldest ended processes beyond the cap.
func (s *Session) forgetOld() {
	for len(s.order) > maxKeptProcesses {
		dropped := false
		for k, id := range s.order {
			if p := s.procs[id]; p != nil && p.ended() {
				delete(s.procs, id)
				s.order = append(s.order[:k], s.order[k+1:]...)
				dropped = true
				break
			}
		}
		if !dropped {
			return
		}
	}
}

// Process finds a background process by id.
func (s *Session) Process(id string) (*Process, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	p, ok := s.procs[id]
	if !ok {
		return nil, fmt.Errorf("process %q: %w", id, sandbox.ErrNotFound)
	}
	return p, nil
}

// Processes lists the background processes, oldest first.
func (s *Session) Processes() []*Process {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]*Process, 0, len(s.order))
	for _, id := range s.order {
		out = append(out, s.procs[id])
	}
	return out
}

// Stdin is the process's stdin pipe, when it was started with OpenStdin.
func (p *Process) Stdin() io.WriteCloser { return p.proc.Stdin() }

// Signal sends sig to the process.
func (p *Process) Signal(ctx context.Context, sig syscall.Signal) error {
	return p.proc.Signal(ctx, sig)
}

// Wait waits for the process's Result.
func (p *Process) Wait(ctx context.Context) (sandbox.Result, error) {
	select {
	case <-p.done:
		return p.res, p.err
	case <-ctx.Done():
		return sandbox.Result{}, ctx.Err()
	}
}

func (p *Process) ended() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Running tells whether the process still runs.
func (p *Process) Running() bool { return !p.ended() }

// Files reaches the session's files as the sandbox gives them, with no
// filter: for uploads, listings and the sandbox's own tools.
func (s *Session) Files() sandbox.Files { return s.inst.Files() }

// Put writes r to path in the sandbox.
func (s *Session) Put(ctx context.Context, p string, r io.Reader, max int64) (sandbox.FileInfo, error) {
	if err := s.alive(); err != nil {
		return sandbox.FileInfo{}, err
	}
	defer s.use()()
	return s.inst.Files().Put(ctx, p, r, max)
}

// Download runs one file of the sandbox through the artifact filter and
// writes what may leave to out: the verdict says whether anything may. The
// name the filter judges is the path below /workspace/output, or the base
// name for files elsewhere.
func (s *Session) Download(ctx context.Context, p string, out artifact.Output) (sandbox.Artifact, error) {
	if err := s.alive(); err != nil {
		return sandbox.Artifact{}, err
	}
	defer s.use()()
	rc, info, err := s.inst.Files().Get(ctx, p)
	if err != nil {
		return sandbox.Artifact{}, err
	}
	defer rc.Close()
	name := path.Base(p)
	if rel, ok := strings.CutPrefix(p, "/workspace/output/"); ok {
		name = rel
	}
	a, err := artifact.Check(ctx, name, rc, info.Size, out, s.policy.Artifacts)
	if err == nil {
		s.m.observeArtifact(s, a)
	}
	return a, err
}

// Artifacts judges every file of /workspace/output and copies nothing.
func (s *Session) Artifacts(ctx context.Context) ([]sandbox.Artifact, error) {
	return s.Collect(ctx, artifact.Destination{})
}

// Collect runs /workspace/output through the artifact filter; accepted and
// sanitized files land in dst.Dir ("" judges only).
func (s *Session) Collect(ctx context.Context, dst artifact.Destination) ([]sandbox.Artifact, error) {
	if err := s.alive(); err != nil {
		return nil, err
	}
	defer s.use()()
	var arts []sandbox.Artifact
	var err error
	switch src := s.inst.(type) {
	case sandbox.OutputDirOpener:
		dir, oerr := src.OpenOutputDir(ctx)
		if oerr != nil {
			return nil, oerr
		}
		arts, err = artifact.CollectTo(ctx, dir, dst, s.policy.Artifacts)
		dir.Close()
	case sandbox.OutputArchiver:
		tr, oerr := src.ArchiveOutput(ctx)
		if oerr != nil {
			return nil, oerr
		}
		arts, err = artifact.CollectTar(ctx, tr, dst, s.policy.Artifacts)
		tr.Close()
	default:
		return nil, fmt.Errorf("backend %s cannot hand out its output folder: %w", s.backend, sandbox.ErrUnsupported)
	}
	if arts == nil {
		arts = []sandbox.Artifact{}
	}
	for _, a := range arts {
		s.m.observeArtifact(s, a)
	}
	return arts, err
}

// Destroy ends the session and destroys its sandbox.
func (s *Session) Destroy(ctx context.Context) error {
	return s.m.end(ctx, s, "destroyed")
}

// destroy releases everything of the session, once.
func (s *Session) destroy(ctx context.Context, reason string) error {
	var err error
	s.finish.Do(func() {
		s.mu.Lock()
		s.ended = reason
		contexts := s.contexts
		s.contexts = map[string]*codeContext{}
		s.mu.Unlock()
		for _, c := range contexts {
			c.close(ctx)
		}
		if s.proxy != nil {
			_ = s.proxy.Close()
		}
		err = s.inst.Destroy(ctx)
	})
	return err
}
