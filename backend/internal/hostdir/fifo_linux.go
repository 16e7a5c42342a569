package hostdir

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// FIFOs are the named pipes of one process's stdio in the io tmpfs
// (Options.IO), for a runtime that cannot be handed descriptors: the
// process's shell opens them by their paths inside (Paths), and the host
// holds the other ends. Their names are random and the folder cannot be
// listed; once the shell has opened them (Opened), their names go, so
// that nothing else in the sandbox can open them.
type FIFOs struct {
	// Paths are what the process opens inside: stdin (os.DevNull
	// without a stdin FIFO), stdout, stderr.
	Paths [3]string
	// Stdin is the write end of stdin (nil without one); Stdout and
	// Stderr are the read ends the host copies from.
	Stdin, Stdout, Stderr *os.File

	host  [3]string // the FIFOs' host paths, "" once unlinked or absent
	holds []*os.File
}

// MakeFIFOs makes the FIFOs of one process, owned by the sandbox user
// with mode 0600; withStdin adds one for stdin. The host's ends are open
// before the process starts, and hold the other side open too, so that
// neither the process's opens nor the host's reads see the other side
// missing until Opened.
func (d *Dir) MakeFIFOs(withStdin bool) (f *FIFOs, err error) {
	if !d.opts.IO {
		return nil, errors.New("sandbox folder without an io folder")
	}
	name := NewID() + NewID()
	f = &FIFOs{Paths: [3]string{os.DevNull}}
	defer func() {
		if err != nil {
			f.Close()
		}
	}()
	for k, suffix := range []string{"in", "out", "err"} {
		if k == 0 && !withStdin {
			continue
		}
		p := filepath.Join(d.io(), name+"."+suffix)
		if err := unix.Mkfifo(p, 0o600); err != nil {
			return f, fmt.Errorf("fifo: %w", err)
		}
		f.host[k] = p
		if err := os.Chown(p, d.opts.UID, d.opts.GID); err != nil {
			return f, fmt.Errorf("fifo: %w", err)
		}
		f.Paths[k] = IOTarget + "/" + name + "." + suffix
		if k == 0 {
			// read and write: the process's open for reading does not
			// wait, and the host is not yet the only writer
			hold, err := os.OpenFile(p, os.O_RDWR, 0)
			if err != nil {
				return f, fmt.Errorf("fifo: %w", err)
			}
			f.holds = append(f.holds, hold)
			continue
		}
		r, err := os.OpenFile(p, os.O_RDONLY|unix.O_NONBLOCK, 0)
		if err != nil {
			return f, fmt.Errorf("fifo: %w", err)
		}
		if k == 1 {
			f.Stdout = r
		} else {
			f.Stderr = r
		}
		hold, err := os.OpenFile(p, os.O_WRONLY, 0)
		if err != nil {
			return f, fmt.Errorf("fifo: %w", err)
		}
		f.holds = append(f.holds, hold)
	}
	return f, nil
}

// Opened is called once the process has opened its ends (its shell
// stopped itself after): the names go, stdin's write end becomes the
// host's only, and the host's hold on the output ends goes, so that their
// reads end when the process and what it started close them.
func (f *FIFOs) Opened() error {
	var err error
	if f.host[0] != "" {
		f.Stdin, err = os.OpenFile(f.host[0], os.O_WRONLY|unix.O_NONBLOCK, 0)
	}
	f.unlink()
	f.release()
	if err != nil {
		return fmt.Errorf("stdin fifo: %w", err)
	}
	return nil
}

func (f *FIFOs) unlink() {
	for k, p := range f.host {
		if p != "" {
			_ = os.Remove(p)
			f.host[k] = ""
		}
	}
}

func (f *FIFOs) release() {
	for _, h := range f.holds {
		h.Close()
	}
	f.holds = nil
}

// Close removes the FIFOs and closes every end the host holds but the
// output read ends, which the output copy owns (see Stdout, Stderr).
func (f *FIFOs) Close() {
	f.unlink()
	f.release()
	if f.Stdin != nil {
		f.Stdin.Close()
	}
}
