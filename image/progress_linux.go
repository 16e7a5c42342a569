package image

import (
	"bytes"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"
)

// progress prints a build's steps and package counts for people.
type progress struct {
	w     io.Writer
	start time.Time

	mu        sync.Mutex
	unpacked  int // packages unpacked by the running command
	total     int // packages the running apt-get said it would unpack
	lastShown int
}

func newProgress(w io.Writer, start time.Time) *progress {
	if w == nil {
		w = io.Discard
	}
	return &progress{w: w, start: start}
}

// begin announces step k of n.
func (p *progress) begin(k, n int, title string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.unpacked, p.total, p.lastShown = 0, 0, 0
	fmt.Fprintf(p.w, "[%d/%d] %s (%s)\n", k, n, title, p.elapsed())
}

// note prints a detail of the current step.
func (p *progress) note(format string, args ...any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	fmt.Fprintf(p.w, "      "+format+"\n", args...)
}

// elapsed is the time since the build started, rounded to seconds.
func (p *progress) elapsed() time.Duration { return time.Since(p.start).Round(time.Second) }

var (
	unpackLine = regexp.MustCompile(`^(I: )?Unpacking \S`)
	totalLine  = regexp.MustCompile(`^(\d+) upgraded, (\d+) newly installed`)
)

// line takes one line of a command's output and counts packages.
func (p *progress) line(s string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if unpackLine.MatchString(s) {
		p.unpacked++
	}
	// apt-get announces what it will unpack before it starts.
	if m := totalLine.FindStringSubmatch(s); m != nil {
		upgraded, _ := strconv.Atoi(m[1])
		added, _ := strconv.Atoi(m[2])
		p.total, p.unpacked = upgraded+added, 0
	}
}

// tick prints the package count every interval until the returned
// function is called.
func (p *progress) tick(interval time.Duration) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				p.status()
			}
		}
	}()
	return func() { close(done); wg.Wait() }
}

func (p *progress) status() {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case p.unpacked == 0 || p.unpacked == p.lastShown:
		fmt.Fprintf(p.w, "      … working (%s)\n", p.elapsed())
	case p.total > 0:
		fmt.Fprintf(p.w, "      … packages unpacked: %d/%d (%s)\n", p.unpacked, p.total, p.elapsed())
	default:
		fmt.Fprintf(p.w, "      … packages unpacked: %d (%s)\n", p.unpacked, p.elapsed())
	}
	p.lastShown = p.unpacked
}

// cmdOutput receives a command's stdout and stderr: it copies them to the
// build log, feeds whole lines to the progress counter and keeps the last
// lines for error messages.
type cmdOutput struct {
	log     io.Writer
	prog    *progress
	partial []byte
	last    []string
}

const tailLines = 25

func (o *cmdOutput) Write(b []byte) (int, error) {
	if o.log != nil {
		o.log.Write(b)
	}
	o.partial = append(o.partial, b...)
	for {
		i := bytes.IndexByte(o.partial, '\n')
		if i < 0 {
			break
		}
		o.addLine(string(o.partial[:i]))
		o.partial = o.partial[i+1:]
	}
	return len(b), nil
}

func (o *cmdOutput) addLine(s string) {
	o.prog.line(s)
	o.last = append(o.last, s)
	if len(o.last) > tailLines {
		o.last = o.last[len(o.last)-tailLines:]
	}
}

// tail is the last lines of output, the unfinished one included.
func (o *cmdOutput) tail() string {
	lines := o.last
	if len(o.partial) > 0 {
		lines = append(lines[:len(lines):len(lines)], string(o.partial))
	}
	return strings.Join(lines, "\n")
}
