package command

import (
	"errors"
	"io"
	"os"

	"golang.org/x/sys/unix"
)

// spliceChunk is how much one splice moves past the cap.
const spliceChunk = 1 << 20

// Drain copies r, a pipe or FIFO, into buf until r ends. Once buf keeps
// nothing more, the rest never enters this process's memory: splice
// moves it from the pipe to /dev/null, and buf only counts it. A flood
// past the cap then costs the host a system call per megabyte.
func Drain(r *os.File, buf *CapBuffer) error {
	chunk := make([]byte, 64<<10)
	for !buf.Full() {
		n, err := r.Read(chunk)
		if n > 0 {
			_, _ = buf.Write(chunk[:n])
		}
		if errors.Is(err, io.EOF) || errors.Is(err, os.ErrClosed) {
			return nil
		}
		if err != nil {
			return err
		}
	}
	null, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	defer null.Close()
	rc, err := r.SyscallConn()
	if err != nil {
		return err
	}
	for {
		var n int64
		var serr error
		err := rc.Read(func(fd uintptr) bool {
			n, serr = unix.Splice(int(fd), nil, int(null.Fd()), nil, spliceChunk, unix.SPLICE_F_MOVE|unix.SPLICE_F_NONBLOCK)
			return !errors.Is(serr, unix.EAGAIN)
		})
		if err != nil {
			if errors.Is(err, os.ErrClosed) {
				return nil
			}
			return err
		}
		if serr != nil {
			if errors.Is(serr, unix.EINTR) {
				continue
			}
			// not a pipe after all: count by reading
			_, cerr := io.Copy(buf, r)
			return cerr
		}
		if n == 0 {
			return nil
		}
		buf.Discarded(n)
	}
}
