package procs

import (
	"os"
	"sync"

	"github.com/airlock-sandbox/airlock/backend/internal/command"
)

// Pipes copies a process's stdout and stderr, read from pipes or FIFOs,
// into its buffers (command.Drain: past the cap, nothing is read into
// memory).
type Pipes struct {
	files [2]*os.File
	done  chan struct{}
	cut   sync.Once
}

var _ Output = (*Pipes)(nil)

// CopyPipes starts the copies of stdout and stderr into out and errb; it
// takes over the two files and closes them when the copies end.
func CopyPipes(s *Sandbox, stdout, stderr *os.File, out, errb *command.CapBuffer) *Pipes {
	p := &Pipes{files: [2]*os.File{stdout, stderr}, done: make(chan struct{})}
	var wg sync.WaitGroup
	wg.Add(2)
	for k, buf := range []*command.CapBuffer{out, errb} {
		s.Go(func() {
			defer wg.Done()
			_ = command.Drain(p.files[k], buf)
		})
	}
	s.Go(func() {
		wg.Wait()
		p.Cut()
		close(p.done)
	})
	return p
}

// Done is closed once both copies have ended.
func (p *Pipes) Done() <-chan struct{} { return p.done }

// Cut closes the read ends, which ends the copies.
func (p *Pipes) Cut() {
	p.cut.Do(func() {
		for _, f := range p.files {
			f.Close()
		}
	})
}
