package e2b

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"sync"
	"syscall"
	"time"

	"connectrpc.com/connect"
	ppb "github.com/airlock-sandbox/airlock/e2b/internal/envdpb/process"
	"github.com/airlock-sandbox/airlock/e2b/internal/envdpb/process/processconnect"
	"github.com/airlock-sandbox/airlock/sandbox"
	"github.com/airlock-sandbox/airlock/session"
)

// processService is envd's process service over a session's processes.
// Every command runs as a background process of the session, so that it
// can be listed, connected to, signalled and fed while it runs whether or
// not the client waits for it; its output fans out to every stream that
// follows it. Terminals (PTY) are not offered.
type processService struct {
	processconnect.UnimplementedProcessHandler
	h *Handler
}

var _ processconnect.ProcessHandler = (*processService)(nil)

// processes holds, per sandbox, the numeric pids the SDKs use for the
// session's processes.
type processes struct {
	mu        sync.Mutex
	bySandbox map[string]*procTable
}

func newProcesses() *processes { return &processes{bySandbox: map[string]*procTable{}} }

// table is the pid table of session s, made on first use.
func (ps *processes) table(s *session.Session) *procTable {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	t := ps.bySandbox[s.ID()]
	if t == nil {
		t = &procTable{owner: s.Owner(), next: 1, byPID: map[uint32]*proc{}, byID: map[string]*proc{}, hidden: map[string]bool{}}
		ps.bySandbox[s.ID()] = t
	}
	return t
}

// prune drops the tables of the sandboxes that are gone.
func (ps *processes) prune(gone func(id, owner string) bool) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	for id, t := range ps.bySandbox {
		if gone(id, t.owner) {
			delete(ps.bySandbox, id)
		}
	}
}

// procTable maps pids to one session's processes.
type procTable struct {
	owner  string // the session's tenant
	mu     sync.Mutex
	next   uint32
	byPID  map[uint32]*proc
	byID   map[string]*proc // by the session's process id
	hidden map[string]bool  // airlock's own helpers (folder watchers): no pid
}

// hide keeps one of the surface's own processes out of the table.
func (t *procTable) hide(id string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.hidden[id] = true
	if p, ok := t.byID[id]; ok {
		delete(t.byID, id)
		delete(t.byPID, p.pid)
	}
}

// proc is one process as envd describes it.
type proc struct {
	pid uint32
	tag string
	cfg *ppb.ProcessConfig
	sp  *session.Process
	out *fanout // nil for a process started through airlock's own API
}

// add gives sp a pid.
func (t *procTable) add(sp *session.Process, cfg *ppb.ProcessConfig, tag string, out *fanout) *proc {
	t.mu.Lock()
	defer t.mu.Unlock()
	if p, ok := t.byID[sp.ID]; ok {
		return p
	}
	p := &proc{pid: t.next, tag: tag, cfg: cfg, sp: sp, out: out}
	t.next++
	t.byPID[p.pid] = p
	t.byID[sp.ID] = p
	return p
}

// sync gives a pid to each of the session's processes that has none (those
// started through airlock's own API) and forgets the ones the session
// forgot.
func (t *procTable) sync(s *session.Session) {
	live := map[string]bool{}
	for _, sp := range s.Processes() {
		live[sp.ID] = true
		t.mu.Lock()
		_, ok := t.byID[sp.ID]
		ok = ok || t.hidden[sp.ID]
		t.mu.Unlock()
		if !ok {
			t.add(sp, &ppb.ProcessConfig{Cmd: first(sp.Cmd), Args: rest(sp.Cmd), Envs: map[string]string{}}, "", nil)
		}
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	for id, p := range t.byID {
		if !live[id] {
			delete(t.byID, id)
			delete(t.byPID, p.pid)
		}
	}
	for id := range t.hidden {
		if !live[id] {
			delete(t.hidden, id)
		}
	}
}

func first(cmd []string) string {
	if len(cmd) == 0 {
		return ""
	}
	return cmd[0]
}

func rest(cmd []string) []string {
	if len(cmd) < 2 {
		return []string{}
	}
	return cmd[1:]
}

// find resolves a selector to a running process; an ended one, as with
// envd, is not found.
func (ps *processService) find(ctx context.Context, sel *ppb.ProcessSelector) (*proc, error) {
	s, err := current(ctx)
	if err != nil {
		return nil, err
	}
	t := ps.h.procs.table(s)
	t.sync(s)
	t.mu.Lock()
	var p *proc
	switch v := sel.GetSelector().(type) {
	case *ppb.ProcessSelector_Pid:
		p = t.byPID[v.Pid]
	case *ppb.ProcessSelector_Tag:
		for _, c := range t.byPID {
			if c.tag == v.Tag && c.sp.Running() {
				p = c
			}
		}
	}
	t.mu.Unlock()
	if p == nil || !p.sp.Running() {
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("process %s not found", describeSelector(sel)))
	}
	return p, nil
}

func describeSelector(sel *ppb.ProcessSelector) string {
	if t, ok := sel.GetSelector().(*ppb.ProcessSelector_Tag); ok {
		return "tagged " + strconv.Quote(t.Tag)
	}
	return "with pid " + strconv.FormatUint(uint64(sel.GetPid()), 10)
}

// fanout copies a process's output to the streams that follow it. A
// stream that joins late gets what comes after it joined, as with envd.
// What it queues is bounded by the process's output cap: the backend
// streams no more than it keeps.
type fanout struct {
	mu   sync.Mutex
	subs map[*follower]struct{}
}

func newFanout() *fanout { return &fanout{subs: map[*follower]struct{}{}} }

// follower is one stream's queue of output.
type follower struct {
	mu       sync.Mutex
	queue    []*ppb.ProcessEvent_DataEvent
	queued   int  // bytes in queue
	overflow bool // the stream fell more than maxQueued behind
	notify   chan struct{}
}

// maxQueued bounds what one stream may fall behind a process's output;
// a stream further behind is ended, the process goes on.
const maxQueued = 32 << 20

func (f *fanout) follow() *follower {
	fl := &follower{notify: make(chan struct{}, 1)}
	f.mu.Lock()
	f.subs[fl] = struct{}{}
	f.mu.Unlock()
	return fl
}

func (f *fanout) leave(fl *follower) {
	f.mu.Lock()
	delete(f.subs, fl)
	f.mu.Unlock()
}

// writer is the process's stdout or stderr.
func (f *fanout) writer(stderr bool) io.Writer {
	return writerFunc(func(b []byte) (int, error) {
		data := append([]byte(nil), b...)
		var ev *ppb.ProcessEvent_DataEvent
		if stderr {
			ev = &ppb.ProcessEvent_DataEvent{Output: &ppb.ProcessEvent_DataEvent_Stderr{Stderr: data}}
		} else {
			ev = &ppb.ProcessEvent_DataEvent{Output: &ppb.ProcessEvent_DataEvent_Stdout{Stdout: data}}
		}
		f.mu.Lock()
		for fl := range f.subs {
			fl.mu.Lock()
			if fl.queued+len(data) > maxQueued {
				fl.overflow = true
			} else if !fl.overflow {
				fl.queue = append(fl.queue, ev)
				fl.queued += len(data)
			}
			fl.mu.Unlock()
			select {
			case fl.notify <- struct{}{}:
			default:
			}
		}
		f.mu.Unlock()
		return len(b), nil
	})
}

type writerFunc func([]byte) (int, error)

func (w writerFunc) Write(b []byte) (int, error) { return w(b) }

// take empties the queue; it fails once the stream fell too far behind.
func (fl *follower) take() ([]*ppb.ProcessEvent_DataEvent, error) {
	fl.mu.Lock()
	defer fl.mu.Unlock()
	q := fl.queue
	fl.queue, fl.queued = nil, 0
	if fl.overflow {
		return q, connect.NewError(connect.CodeResourceExhausted, fmt.Errorf("the stream fell more than %d MiB behind the process's output; the process goes on", maxQueued>>20))
	}
	return q, nil
}

// keepaliveOf reads the Keepalive-Ping-Interval header, in seconds.
func keepaliveOf(hdr interface{ Get(string) string }) time.Duration {
	n, err := strconv.Atoi(hdr.Get("Keepalive-Ping-Interval"))
	if err != nil || n <= 0 {
		return 0
	}
	return time.Duration(min(n, 3600)) * time.Second
}

// endOf is the end event of a Result, worded as envd words it.
func endOf(res sandbox.Result, err error) *ppb.ProcessEvent_EndEvent {
	switch {
	case err != nil:
		msg := err.Error()
		return &ppb.ProcessEvent_EndEvent{ExitCode: -1, Status: "error", Error: &msg}
	case res.Signal != "":
		status := "signal: " + signalWord(res.Signal)
		return &ppb.ProcessEvent_EndEvent{ExitCode: -1, Status: status, Error: &status}
	case res.ExitCode != 0:
		status := "exit status " + strconv.Itoa(res.ExitCode)
		return &ppb.ProcessEvent_EndEvent{ExitCode: int32(res.ExitCode), Exited: true, Status: status, Error: &status}
	}
	return &ppb.ProcessEvent_EndEvent{Exited: true, Status: "exit status 0"}
}

// signalWord names a signal as Go's os.ProcessState does ("killed").
func signalWord(name string) string {
	switch name {
	case "SIGKILL":
		return "killed"
	case "SIGTERM":
		return "terminated"
	case "SIGINT":
		return "interrupt"
	}
	return name
}

// follow streams a process's output and its end to send, with keepalives,
// until it ends or ctx does. A client that goes away leaves the process
// running.
func follow(ctx context.Context, p *proc, fl *follower, keepalive time.Duration, send func(*ppb.ProcessEvent) error) error {
	type ended struct {
		res sandbox.Result
		err error
	}
	waitCtx, stopWait := context.WithCancel(context.WithoutCancel(ctx))
	defer stopWait()
	done := make(chan ended, 1)
	go func() {
		res, err := p.sp.Wait(waitCtx)
		done <- ended{res, err}
	}()
	var tick <-chan time.Time
	if keepalive > 0 {
		t := time.NewTicker(keepalive)
		defer t.Stop()
		tick = t.C
	}
	flush := func() error {
		if fl == nil {
			return nil
		}
		q, overflow := fl.take()
		for _, d := range q {
			if err := send(&ppb.ProcessEvent{Event: &ppb.ProcessEvent_Data{Data: d}}); err != nil {
				return err
			}
		}
		return overflow
	}
	var notify chan struct{}
	if fl != nil {
		notify = fl.notify
	}
	for {
		select {
		case <-notify:
			if err := flush(); err != nil {
				return err
			}
		case <-tick:
			if err := send(&ppb.ProcessEvent{Event: &ppb.ProcessEvent_Keepalive{Keepalive: &ppb.ProcessEvent_KeepAlive{}}}); err != nil {
				return err
			}
		case <-ctx.Done():
			if atDeadline(ctx) {
				// The request's timeout is the command's: it dies with it.
				// The SDK gives up at the same moment on its side, so a
				// client that leaves within a moment of the deadline is
				// taken as the deadline. A client that leaves earlier
				// leaves the command running.
				kctx, cancel := context.WithTimeout(waitCtx, killWait)
				_ = p.sp.Signal(kctx, syscall.SIGKILL)
				_, _ = p.sp.Wait(kctx)
				cancel()
			}
			return rpcError(ctx.Err())
		case e := <-done:
			if err := flush(); err != nil {
				return err
			}
			if e.res.TimedOut {
				return connect.NewError(connect.CodeDeadlineExceeded, errors.New("the command ran past its timeout and was killed"))
			}
			return send(&ppb.ProcessEvent{Event: &ppb.ProcessEvent_End{End: endOf(e.res, e.err)}})
		}
	}
}

// atDeadline tells whether ctx ended at (or just before) its deadline.
func atDeadline(ctx context.Context) bool {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return true
	}
	dl, ok := ctx.Deadline()
	return ok && time.Until(dl) < deadlineSlack
}

// deadlineSlack is how close to its deadline a client that leaves is
// taken as having reached it.
const deadlineSlack = time.Second

// killWait bounds how long a command killed at its timeout may take to end.
const killWait = 10 * time.Second

// maxCommandTime bounds a command that asked for no timeout (the SDKs'
// timeoutMs: 0): it lives as long as its sandbox, at most a day.
const maxCommandTime = 24 * time.Hour

// commandTimeout is what a command may run: until the request's deadline
// (the SDKs' timeoutMs, 60 s by default), else until its sandbox ends.
func commandTimeout(ctx context.Context, s *session.Session) time.Duration {
	if dl, ok := ctx.Deadline(); ok {
		return max(time.Millisecond, time.Until(dl))
	}
	return min(maxCommandTime, max(time.Second, time.Until(s.Info().ExpiresAt)))
}

func (ps *processService) Start(ctx context.Context, req *connect.Request[ppb.StartRequest], stream *connect.ServerStream[ppb.StartResponse]) error {
	s, err := current(ctx)
	if err != nil {
		return rpcError(err)
	}
	if err := userOf(req.Header(), ""); err != nil {
		return err
	}
	if req.Msg.Pty != nil {
		return connect.NewError(connect.CodeUnimplemented, errors.New("airlock offers no terminals (PTY); run the command without one"))
	}
	cfg := req.Msg.GetProcess()
	if cfg.GetCmd() == "" {
		return connect.NewError(connect.CodeInvalidArgument, errors.New("process.cmd is required"))
	}
	dir := Home
	if cfg.Cwd != nil {
		dir = resolve(cfg.GetCwd())
	}
	stdin := req.Msg.Stdin == nil || req.Msg.GetStdin()
	out := newFanout()
	fl := out.follow()
	defer out.leave(fl)
	spec := sandbox.ProcessSpec{Cmd: append([]string{cfg.GetCmd()}, cfg.GetArgs()...), Env: cfg.GetEnvs(), Dir: dir,
		OpenStdin: stdin, Stdout: out.writer(false), Stderr: out.writer(true),
		Timeout: sandbox.Duration(commandTimeout(ctx, s)), KeepAlive: true}
	sp, err := s.Start(ctx, spec)
	if err != nil {
		return rpcError(err)
	}
	p := ps.h.procs.table(s).add(sp, cfg, req.Msg.GetTag(), out)
	send := func(ev *ppb.ProcessEvent) error { return stream.Send(&ppb.StartResponse{Event: ev}) }
	if err := send(&ppb.ProcessEvent{Event: &ppb.ProcessEvent_Start{Start: &ppb.ProcessEvent_StartEvent{Pid: p.pid}}}); err != nil {
		return err
	}
	return follow(ctx, p, fl, keepaliveOf(req.Header()), send)
}

func (ps *processService) Connect(ctx context.Context, req *connect.Request[ppb.ConnectRequest], stream *connect.ServerStream[ppb.ConnectResponse]) error {
	p, err := ps.find(ctx, req.Msg.GetProcess())
	if err != nil {
		return rpcError(err)
	}
	var fl *follower
	if p.out != nil {
		fl = p.out.follow()
		defer p.out.leave(fl)
	}
	send := func(ev *ppb.ProcessEvent) error { return stream.Send(&ppb.ConnectResponse{Event: ev}) }
	if err := send(&ppb.ProcessEvent{Event: &ppb.ProcessEvent_Start{Start: &ppb.ProcessEvent_StartEvent{Pid: p.pid}}}); err != nil {
		return err
	}
	return follow(ctx, p, fl, keepaliveOf(req.Header()), send)
}

func (ps *processService) List(ctx context.Context, req *connect.Request[ppb.ListRequest]) (*connect.Response[ppb.ListResponse], error) {
	s, err := current(ctx)
	if err != nil {
		return nil, rpcError(err)
	}
	t := ps.h.procs.table(s)
	t.sync(s)
	out := &ppb.ListResponse{Processes: []*ppb.ProcessInfo{}}
	t.mu.Lock()
	for _, sp := range s.Processes() {
		p := t.byID[sp.ID]
		if p == nil || !sp.Running() {
			continue
		}
		info := &ppb.ProcessInfo{Config: p.cfg, Pid: p.pid}
		if p.tag != "" {
			tag := p.tag
			info.Tag = &tag
		}
		out.Processes = append(out.Processes, info)
	}
	t.mu.Unlock()
	return connect.NewResponse(out), nil
}

func (ps *processService) SendSignal(ctx context.Context, req *connect.Request[ppb.SendSignalRequest]) (*connect.Response[ppb.SendSignalResponse], error) {
	p, err := ps.find(ctx, req.Msg.GetProcess())
	if err != nil {
		return nil, rpcError(err)
	}
	var sig syscall.Signal
	switch req.Msg.GetSignal() {
	case ppb.Signal_SIGNAL_SIGKILL:
		sig = syscall.SIGKILL
	case ppb.Signal_SIGNAL_SIGTERM:
		sig = syscall.SIGTERM
	default:
		return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("signal %v: want SIGKILL or SIGTERM", req.Msg.GetSignal()))
	}
	if err := p.sp.Signal(ctx, sig); err != nil {
		return nil, rpcError(err)
	}
	return connect.NewResponse(&ppb.SendSignalResponse{}), nil
}

// stdinOf is a process's stdin, or why there is none.
func stdinOf(p *proc) (io.WriteCloser, error) {
	in := p.sp.Stdin()
	if in == nil {
		return nil, connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("process %d was started without stdin (start it with stdin: true)", p.pid))
	}
	return in, nil
}

// writeInput writes one ProcessInput to p.
func writeInput(p *proc, in *ppb.ProcessInput) error {
	if _, ok := in.GetInput().(*ppb.ProcessInput_Pty); ok {
		return connect.NewError(connect.CodeUnimplemented, errors.New("airlock offers no terminals (PTY)"))
	}
	w, err := stdinOf(p)
	if err != nil {
		return err
	}
	if _, err := w.Write(in.GetStdin()); err != nil {
		return connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("process %d: stdin: %v", p.pid, err))
	}
	return nil
}

func (ps *processService) SendInput(ctx context.Context, req *connect.Request[ppb.SendInputRequest]) (*connect.Response[ppb.SendInputResponse], error) {
	p, err := ps.find(ctx, req.Msg.GetProcess())
	if err != nil {
		return nil, rpcError(err)
	}
	if err := writeInput(p, req.Msg.GetInput()); err != nil {
		return nil, err
	}
	return connect.NewResponse(&ppb.SendInputResponse{}), nil
}

func (ps *processService) StreamInput(ctx context.Context, stream *connect.ClientStream[ppb.StreamInputRequest]) (*connect.Response[ppb.StreamInputResponse], error) {
	var p *proc
	for stream.Receive() {
		switch ev := stream.Msg().GetEvent().(type) {
		case *ppb.StreamInputRequest_Start:
			found, err := ps.find(ctx, ev.Start.GetProcess())
			if err != nil {
				return nil, rpcError(err)
			}
			p = found
		case *ppb.StreamInputRequest_Data:
			if p == nil {
				return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("the stream's first message must name the process"))
			}
			if err := writeInput(p, ev.Data.GetInput()); err != nil {
				return nil, err
			}
		}
	}
	if err := stream.Err(); err != nil {
		return nil, err
	}
	return connect.NewResponse(&ppb.StreamInputResponse{}), nil
}

func (ps *processService) CloseStdin(ctx context.Context, req *connect.Request[ppb.CloseStdinRequest]) (*connect.Response[ppb.CloseStdinResponse], error) {
	p, err := ps.find(ctx, req.Msg.GetProcess())
	if err != nil {
		return nil, rpcError(err)
	}
	w, err := stdinOf(p)
	if err != nil {
		return nil, err
	}
	_ = w.Close()
	return connect.NewResponse(&ppb.CloseStdinResponse{}), nil
}
