package main

import (
	"bytes"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// openPTY opens a pseudo-terminal pair whose side for programs passes
// output unchanged (no newline translation), and closes both at the end.
func openPTY(t *testing.T) (ptm, pts *os.File) {
	t.Helper()
	ptm, err := os.OpenFile("/dev/ptmx", os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Skipf("no pseudo-terminals here: %v", err)
	}
	t.Cleanup(func() { ptm.Close() })
	fd := int(ptm.Fd())
	if err := unix.IoctlSetPointerInt(fd, unix.TIOCSPTLCK, 0); err != nil {
		t.Fatal(err)
	}
	n, err := unix.IoctlGetInt(fd, unix.TIOCGPTN)
	if err != nil {
		t.Fatal(err)
	}
	pts, err = os.OpenFile("/dev/pts/"+strconv.Itoa(n), os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pts.Close() })
	tio, err := unix.IoctlGetTermios(int(pts.Fd()), unix.TCGETS)
	if err != nil {
		t.Fatal(err)
	}
	tio.Oflag &^= unix.OPOST
	if err := unix.IoctlSetTermios(int(pts.Fd()), unix.TCSETS, tio); err != nil {
		t.Fatal(err)
	}
	return ptm, pts
}

func TestIsTerminal(t *testing.T) {
	_, pts := openPTY(t)
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	f, err := os.Create(filepath.Join(t.TempDir(), "f"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, tt := range []struct {
		name string
		w    io.Writer
		want bool
	}{
		{"pseudo-terminal", pts, true},
		{"pipe", w, false},
		{"file", f, false},
		{"buffer", &bytes.Buffer{}, false},
	} {
		if got := isTerminal(tt.w); got != tt.want {
			t.Errorf("isTerminal(%s) = %v, want %v", tt.name, got, tt.want)
		}
	}
}

// TestRunOnRealTerminal runs airlock with stdout and stderr on a
// pseudo-terminal and reads what the terminal got: the command's escape
// sequences as text, airlock's own line after a reset on a line of its own.
func TestRunOnRealTerminal(t *testing.T) {
	needRoot(t)
	ptm, pts := openPTY(t)
	cmd := exec.Command(os.Args[0], "run", "--", "sh", "-c", hostileOutput)
	cmd.Env = append(os.Environ(), "AIRLOCK_TEST_AS_CLI=1")
	cmd.Stdout, cmd.Stderr = pts, pts
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pts.Close()
	var screen bytes.Buffer
	done := make(chan error, 1)
	go func() {
		_, err := io.Copy(&screen, ptm) // ends with EIO once the last writer is gone
		done <- err
	}()
	if err := cmd.Wait(); err != nil {
		t.Errorf("airlock run: %v", err)
	}
	<-done
	got := screen.String()
	for _, want := range []string{"^[]0;pwned^G", "\x1b[31mred^[[2J50%", "err^[[8mhidden", "\x1b[0m\nairlock: artifact .secret.txt: rejected (hidden name"} {
		if !strings.Contains(got, want) {
			t.Errorf("the terminal got %q, without %q", got, want)
		}
	}
	for _, bad := range []string{"\x1b]", "\x1b[2J", "\x1b[8m", "\r"} {
		if strings.Contains(got, bad) {
			t.Errorf("the terminal got %q, with %q", got, bad)
		}
	}
}
