package interp

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"sync"
	"syscall"
	"time"

	"github.com/airlock-sandbox/airlock/sandbox"
)

// Why the events do not travel on the runner's own stdout: the sandbox
// interface promises that ProcessSpec.Stdout receives all output while
// OutputLimit caps only what the Result keeps, but the native backend
// passes on only what it keeps (its CapBuffer tees the kept bytes), so a
// long-lived runner's stream would stop at its OutputLimit, and a high
// limit would make the backend hold every byte of the stream in memory.
//
// So events go through relays: a relay is a process that makes a FIFO
// and copies it to its stdout (cat), and it carries at most its
// OutputLimit, transportLimit bytes. The runner counts what it writes;
// before a frame that would not fit, it sends a rotate frame naming the
// next FIFO, the host starts the next relay, the runner opens it, sends
// detach on the old relay and attached on the new one, and carries on.
// The old relay ends and the backend drops what it kept of it. What the
// backend holds for a context stays under one relay's budget, one frame
// and 4 MiB, whatever the context's traffic; a frame that does not fit in
// what its relay has left cannot come from the runner and breaks the
// protocol.

// relayScript makes the FIFO (mode 0600, under a fresh random name) and
// copies what the runner writes into it to the relay's stdout.
const relayScript = `umask 077 && mkfifo -- "$1" && exec cat -- "$1"`

// transportLimit is how many bytes one relay carries.
func transportLimit(o Options) int64 { return int64(o.FrameLimit) + 4<<20 }

// killWait bounds the wait for a killed process's end. A backend's Wait
// returns once what the process left is gone too, which after a fork bomb
// of a large process can take a minute on a loaded host (native's sweep
// gives up at two): a restart before then would find the pids cap full.
const killWait = 3 * time.Minute

// transport is one relay process and the frames read from its stdout.
type transport struct {
	seq    uint64
	path   string
	proc   sandbox.Process
	frames chan frameResult
	quit   chan struct{}
	ended  chan struct{} // the relay process has ended; res is set
	res    sandbox.Result
	stop   sync.Once
}

type frameResult struct {
	f    *frame
	size int
	err  error
}

// transportPath names the FIFO of a context's relay; the runner derives
// the names of the next ones from the prefix.
func (c *Context) transportPath(gen int, seq uint64) string {
	return fmt.Sprintf("%s%d", c.transportPrefix(gen), seq)
}

func (c *Context) transportPrefix(gen int) string {
	return fmt.Sprintf("/tmp/.airlock-interp-%s-%d-", c.token, gen)
}

func (c *Context) startTransport(ctx context.Context, gen int, seq uint64) (*transport, error) {
	t := &transport{seq: seq, path: c.transportPath(gen, seq),
		frames: make(chan frameResult), quit: make(chan struct{}), ended: make(chan struct{})}
	pr, pw := io.Pipe()
	p, err := c.inst.Start(ctx, sandbox.ProcessSpec{
		Cmd: []string{"sh", "-c", relayScript, "airlock-interp-relay", t.path}, Dir: "/tmp",
		KeepAlive: true, Stdout: pw, OutputLimit: transportLimit(c.opts)})
	if err != nil {
		return nil, fmt.Errorf("start a relay: %w", err)
	}
	t.proc = p
	go t.read(pr, c.opts.FrameLimit, transportLimit(c.opts))
	go func() {
		t.res, _ = p.Wait(context.Background())
		pw.Close()
		close(t.ended)
	}()
	return t, nil
}

// read parses frames as they come and hands them over one at a time;
// the first error (the end of the stream included) is the last thing it
// hands over. A frame must fit in what is left of the relay's budget.
func (t *transport) read(pr *io.PipeReader, frameLimit int, budget int64) {
	defer pr.Close()
	r := bufio.NewReaderSize(pr, 64<<10)
	var used int64
	for {
		limit := min(int64(frameLimit), budget-used-4)
		b, err := readFrame(r, int(max(limit, 0)))
		fr := frameResult{err: err}
		if err == nil {
			fr.size = len(b) + 4
			used += int64(fr.size)
			fr.f, fr.err = parseFrame(b)
		}
		select {
		case t.frames <- fr:
		case <-t.quit:
			return
		}
		if fr.err != nil {
			return
		}
	}
}

// kill ends the relay and waits for it, within killWait.
func (t *transport) kill() {
	ctx, cancel := context.WithTimeout(context.Background(), killWait)
	defer cancel()
	_ = t.proc.Signal(ctx, syscall.SIGKILL)
	select {
	case <-t.ended:
	case <-ctx.Done():
	}
	t.stop.Do(func() { close(t.quit) })
}

// follow reads g's frames across its relays and hands them to g.frames:
// it checks the first attached frame, starts the next relay when the
// runner asks for it, and moves to it at the runner's detach. The moves
// themselves are not passed on. It ends at the first error, which it
// passes on, or when g is killed.
func (c *Context) follow(g *generation, t *transport) {
	pass := func(fr frameResult) bool {
		select {
		case g.frames <- fr:
			return true
		case <-g.quit:
			return false
		}
	}
	fail := func(format string, a ...any) {
		pass(frameResult{err: fmt.Errorf(format+": %w", append(a, ErrProtocol)...)})
	}
	recv := func(t *transport) (frameResult, bool) {
		select {
		case fr := <-t.frames:
			return fr, true
		case <-g.quit:
			return frameResult{}, false
		}
	}
	attached := func(t *transport) bool {
		fr, ok := recv(t)
		switch {
		case !ok:
			return false
		case fr.err != nil:
			pass(fr)
			return false
		case fr.f.Type != "attached" || fr.f.Seq != t.seq:
			fail("the first frame on relay %d is a %s frame (seq %d), want attached", t.seq, fr.f.Type, fr.f.Seq)
			return false
		}
		return true
	}
	if !attached(t) {
		return
	}
	var next *transport
	for {
		fr, ok := recv(t)
		if !ok {
			return
		}
		if fr.err != nil {
			pass(fr)
			return
		}
		switch f := fr.f; f.Type {
		case "rotate":
			if next != nil || f.Seq != t.seq+1 || f.Path != c.transportPath(g.num, f.Seq) {
				fail("a rotate frame to %.100q (seq %d) on relay %d", f.Path, f.Seq, t.seq)
				return
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			nt, err := c.startTransport(ctx, g.num, f.Seq)
			cancel()
			if err != nil {
				pass(frameResult{err: fmt.Errorf("%w: %w", errRelay, err)})
				return
			}
			if !g.addTransport(nt) {
				nt.kill()
				return
			}
			next = nt
		case "detach":
			if next == nil || f.Seq != next.seq {
				fail("a detach frame (seq %d) with no relay to move to", f.Seq)
				return
			}
			old := t
			t, next = next, nil
			go func() {
				old.kill()
				g.dropTransport(old)
			}()
			if !attached(t) {
				return
			}
		case "attached":
			fail("an attached frame (seq %d) with no move under way", f.Seq)
			return
		default:
			if !pass(fr) {
				return
			}
		}
	}
}
