package guest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"github.com/airlock-sandbox/airlock/backend/microvm/internal/wire"
	"github.com/airlock-sandbox/airlock/backend/native"
	"github.com/airlock-sandbox/airlock/sandbox"
	"golang.org/x/sys/unix"
)

// server answers the host's requests with a native sandbox inside the
// guest.
type server struct {
	conn *wire.Conn

	mu        sync.Mutex
	inst      sandbox.Instance // nil until OpCreate succeeded
	creating  bool
	setupDone chan struct{}
	setupErr  error
	procs     map[uint64]sandbox.Process
}

// serve runs the protocol on rw until the host goes away; it says hello
// first, then runs setup, whose failure fails every create.
func serve(rw io.ReadWriteCloser, setup func() error) error {
	s := &server{procs: map[uint64]sandbox.Process{}, setupDone: make(chan struct{})}
	s.conn = wire.NewConn(rw, wire.Guest, s.control)
	var u unix.Utsname
	_ = unix.Uname(&u)
	if err := s.conn.SendMsg(wire.Msg{Op: wire.OpHello, Hello: &wire.Hello{Kernel: unix.ByteSliceToString(u.Release[:])}}); err != nil {
		return err
	}
	s.setupErr = setup()
	close(s.setupDone)
	<-s.conn.Done()
	s.mu.Lock()
	inst := s.inst
	s.mu.Unlock()
	if inst != nil {
		_ = inst.Destroy(context.Background())
	}
	if err := s.conn.Err(); !errors.Is(err, wire.ErrClosed) {
		return err
	}
	return nil
}

// control takes one message from the host. It registers the streams the
// message names at once, before their first frames are read, and hands
// the work to a goroutine.
func (s *server) control(b []byte) error {
	m, err := wire.Decode(b)
	if err != nil {
		return err
	}
	var streams []*wire.Stream
	accept := func(id uint32) (*wire.Stream, error) {
		if id == 0 {
			return nil, nil
		}
		st, err := s.conn.Accept(id)
		if err == nil {
			streams = append(streams, st)
		}
		return st, err
	}
	switch m.Op {
	case wire.OpCreate:
		go func() {
			ready, err := s.create(m.Create)
			r := replyTo(m, err)
			r.Ready = ready
			s.send(r)
		}()
	case wire.OpStart:
		if m.Start == nil {
			return fmt.Errorf("start without a spec: %w", wire.ErrProtocol)
		}
		var st [3]*wire.Stream
		for k, id := range []uint32{m.Start.Stdin, m.Start.Stdout, m.Start.Stderr} {
			if st[k], err = accept(id); err != nil {
				return err
			}
		}
		go s.start(m, st[0], st[1], st[2])
	case wire.OpSignal:
		go s.reply(m, s.signal(m.Signal))
	case wire.OpFile:
		if m.File == nil {
			return fmt.Errorf("file op without a body: %w", wire.ErrProtocol)
		}
		st, err := accept(m.File.Stream)
		if err != nil {
			return err
		}
		go s.file(m, st)
	default:
		return fmt.Errorf("unknown op %q: %w", m.Op, wire.ErrProtocol)
	}
	return nil
}

// reply answers request m; a nil err is a success.
func (s *server) reply(m wire.Msg, err error) {
	s.send(replyTo(m, err))
}

func replyTo(m wire.Msg, err error) wire.Msg {
	r := wire.Msg{Op: wire.OpReply, ID: m.ID}
	if err != nil {
		r.Error, r.Kind = err.Error(), wire.KindOf(err)
	}
	return r
}

func (s *server) send(m wire.Msg) { _ = s.conn.SendMsg(m) }

// instance returns the sandbox, or an error before it exists.
func (s *server) instance() (sandbox.Instance, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.inst == nil {
		return nil, fmt.Errorf("no sandbox in the guest yet: %w", sandbox.ErrInvalid)
	}
	return s.inst, nil
}

// create sets the clock and the random pool from the host's, and makes
// the native sandbox of the image's disk.
func (s *server) create(c *wire.Create) (*wire.Ready, error) {
	if c == nil {
		return nil, fmt.Errorf("create without a spec: %w", sandbox.ErrInvalid)
	}
	<-s.setupDone
	if s.setupErr != nil {
		return nil, fmt.Errorf("guest setup: %w", s.setupErr)
	}
	s.mu.Lock()
	if s.inst != nil || s.creating {
		s.mu.Unlock()
		return nil, fmt.Errorf("the guest has a sandbox already: %w", sandbox.ErrInvalid)
	}
	s.creating = true
	s.mu.Unlock()
	ts := unix.NsecToTimespec(c.UnixNano)
	if err := unix.ClockSettime(unix.CLOCK_REALTIME, &ts); err != nil {
		return nil, fmt.Errorf("set the clock: %w", err)
	}
	if err := addEntropy(c.Seed); err != nil {
		return nil, err
	}
	be := native.New(native.Options{Logger: slog.New(slog.DiscardHandler)})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	inst, err := be.Create(ctx, sandbox.Spec{ID: c.ID, Policy: c.Policy,
		Image: sandbox.Image{Name: "microvm", RootFS: ImageDir, Env: c.ImageEnv}})
	if err != nil {
		return nil, err
	}
	if c.Policy.Network.Enabled() {
		l, err := inst.(sandbox.NetworkAttacher).ListenEgress(ctx)
		if err != nil {
			_ = inst.Destroy(ctx)
			return nil, err
		}
		go s.egress(l)
	}
	s.mu.Lock()
	s.inst = inst
	s.mu.Unlock()
	go func() {
		<-inst.Done()
		if err := inst.Err(); !errors.Is(err, sandbox.ErrDestroyed) {
			s.send(wire.Msg{Op: wire.OpGone, Error: fmt.Sprint(err), Kind: wire.KindOf(err)})
		}
	}()
	return &wire.Ready{Weakened: be.Capabilities(ctx).Weakened()}, nil
}

// addEntropy credits the host's seed to the kernel's random pool: the
// machine has no entropy source of its own that the kernel trusts early.
func addEntropy(seed []byte) error {
	if len(seed) == 0 {
		return nil
	}
	f, err := os.OpenFile("/dev/urandom", os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	buf := make([]byte, 8+len(seed))
	*(*int32)(unsafe.Pointer(&buf[0])) = int32(8 * len(seed)) // entropy_count, in bits
	*(*int32)(unsafe.Pointer(&buf[4])) = int32(len(seed))     // buf_size
	copy(buf[8:], seed)
	if _, _, e := unix.Syscall(unix.SYS_IOCTL, f.Fd(), unix.RNDADDENTROPY, uintptr(unsafe.Pointer(&buf[0]))); e != 0 {
		return fmt.Errorf("seed the random pool: %w", e)
	}
	return nil
}

// start starts one process, replies, and reports its end.
func (s *server) start(m wire.Msg, stdin, stdout, stderr *wire.Stream) {
	closeAll := func() {
		for _, st := range []*wire.Stream{stdin, stdout, stderr} {
			if st != nil {
				st.Close()
			}
		}
	}
	inst, err := s.instance()
	if err != nil || stdout == nil || stderr == nil {
		if err == nil {
			err = fmt.Errorf("start without output streams: %w", sandbox.ErrInvalid)
		}
		closeAll()
		s.reply(m, err)
		return
	}
	sp := m.Start
	out, errs := &counter{w: stdout}, &counter{w: stderr}
	ps := sandbox.ProcessSpec{Cmd: sp.Cmd, Env: sp.Env, Dir: sp.Dir, Timeout: sp.Timeout, KeepAlive: sp.KeepAlive,
		OutputLimit: sp.OutputLimit, Stdout: out, Stderr: errs}
	if stdin != nil {
		ps.Stdin = stdin
	}
	s.mu.Lock()
	_, dup := s.procs[sp.Proc]
	s.mu.Unlock()
	if dup {
		closeAll()
		s.reply(m, fmt.Errorf("process %d exists: %w", sp.Proc, sandbox.ErrInvalid))
		return
	}
	p, err := inst.Start(context.Background(), ps)
	if err != nil {
		closeAll()
		s.reply(m, err)
		return
	}
	s.mu.Lock()
	s.procs[sp.Proc] = p
	s.mu.Unlock()
	s.reply(m, nil)
	res, err := p.Wait(context.Background())
	s.mu.Lock()
	delete(s.procs, sp.Proc)
	s.mu.Unlock()
	_ = stdout.CloseWrite()
	_ = stderr.CloseWrite()
	closeAll()
	// the output came on its streams; what the Result holds beyond it
	// (the sandbox's own words, such as "command not found") goes along
	res.Stdout, res.Stderr = unstreamed(res.Stdout, out.n), unstreamed(res.Stderr, errs.n)
	ex := &wire.Exit{Proc: sp.Proc, Result: res}
	if err != nil {
		ex.Error, ex.Kind = err.Error(), wire.KindOf(err)
	}
	s.send(wire.Msg{Op: wire.OpExit, Exit: ex})
}

// counter counts what passes to w.
type counter struct {
	w io.Writer
	n int
}

func (c *counter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += n
	return n, err
}

// unstreamed is what kept holds past the first n bytes, which were
// streamed, at most wire.MaxExtraOutput bytes.
func unstreamed(kept string, n int) string {
	if n >= len(kept) {
		return ""
	}
	rest := kept[n:]
	return rest[:min(len(rest), wire.MaxExtraOutput)]
}

func (s *server) signal(sig *wire.Signal) error {
	if sig == nil || sig.Signal < 1 || sig.Signal > 64 {
		return fmt.Errorf("bad signal: %w", sandbox.ErrInvalid)
	}
	s.mu.Lock()
	p := s.procs[sig.Proc]
	s.mu.Unlock()
	if p == nil {
		return nil // ended meanwhile
	}
	return p.Signal(context.Background(), syscall.Signal(sig.Signal))
}

// file carries out one file operation.
func (s *server) file(m wire.Msg, st *wire.Stream) {
	if st != nil {
		defer st.Close()
	}
	inst, err := s.instance()
	if err != nil {
		s.reply(m, err)
		return
	}
	ctx := context.Background()
	f, fs := m.File, inst.Files()
	needs := f.Op == wire.FilePut || f.Op == wire.FileGet || f.Op == wire.FileList || f.Op == wire.FileWalk || f.Op == wire.FileOpenOutput
	if needs && st == nil {
		s.reply(m, fmt.Errorf("file %s without a stream: %w", f.Op, sandbox.ErrInvalid))
		return
	}
	switch f.Op {
	case wire.FilePut:
		info, err := fs.Put(ctx, f.Path, st, f.Max)
		s.replyInfo(m, info, err)
	case wire.FileGet:
		r, info, err := fs.Get(ctx, f.Path)
		s.replyInfo(m, info, err)
		if err == nil {
			_, _ = io.Copy(st, r)
			r.Close()
			_ = st.CloseWrite()
		}
	case wire.FileStat:
		info, err := fs.Stat(ctx, f.Path)
		s.replyInfo(m, info, err)
	case wire.FileList:
		infos, err := fs.List(ctx, f.Path)
		if err == nil {
			err = json.NewEncoder(st).Encode(infos)
			_ = st.CloseWrite()
		}
		s.reply(m, err)
	case wire.FileMkdir:
		s.reply(m, fs.Mkdir(ctx, f.Path))
	case wire.FileRemove:
		s.reply(m, fs.Remove(ctx, f.Path))
	case wire.FileRename:
		s.reply(m, fs.Rename(ctx, f.Path, f.To))
	case wire.FileWalk, wire.FileOpenOutput:
		s.output(m, inst, st)
	default:
		s.reply(m, fmt.Errorf("file op %q: %w", f.Op, sandbox.ErrInvalid))
	}
}

func (s *server) replyInfo(m wire.Msg, info sandbox.FileInfo, err error) {
	r := replyTo(m, err)
	if err == nil {
		r.Info = &info
	}
	s.send(r)
}

// egress hands every connection code makes to the proxy's address inside
// the sandbox to the host, one stream each.
func (s *server) egress(l net.Listener) {
	defer l.Close()
	go func() { <-s.conn.Done(); l.Close() }()
	for {
		c, err := l.Accept()
		if err != nil {
			return
		}
		st, err := s.conn.Open()
		if err != nil {
			c.Close()
			continue
		}
		if err := s.conn.SendMsg(wire.Msg{Op: wire.OpEgress, Egress: st.ID()}); err != nil {
			c.Close()
			st.Close()
			return
		}
		go relay(c, st)
	}
}

// relay copies both ways between a connection inside and its stream to
// the host, passing on each side's end of writing.
func relay(c net.Conn, st *wire.Stream) {
	done := make(chan struct{})
	go func() {
		_, _ = io.Copy(st, c)
		_ = st.CloseWrite()
		close(done)
	}()
	if _, err := io.Copy(c, st); err != nil {
		c.Close() // the host reset the stream: end both ways
	} else if cw, ok := c.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
	}
	<-done
	c.Close()
	st.Close()
}
