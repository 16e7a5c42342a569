package watchdog

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/airlock-sandbox/airlock/backend/internal/hostdir"
	"golang.org/x/sys/unix"
)

// Arg0 is the watchdog's argv[0]; its config is argv[1].
const Arg0 = "airlock-watchdog"

// Cleanup is what a watchdog undoes when its owner dies.
type Cleanup struct {
	// DockerSocket and Container name a container to remove, with its
	// anonymous volumes, through the Engine API on that unix socket.
	DockerSocket string `json:"docker_socket,omitempty"`
	Container    string `json:"container,omitempty"`
	// Runsc, RunscFlags and RunscID name a runsc sandbox to delete; its
	// processes, whose arguments hold RunscKillArg, are killed too.
	Runsc        string   `json:"runsc,omitempty"`
	RunscFlags   []string `json:"runsc_flags,omitempty"`
	RunscID      string   `json:"runsc_id,omitempty"`
	RunscKillArg string   `json:"runsc_kill_arg,omitempty"`
	// Folder is a sandbox's host folder to remove (hostdir).
	Folder string `json:"folder,omitempty"`
}

// Watchdog is the owner's side of one watchdog.
type Watchdog struct {
	cmd  *exec.Cmd
	pipe *os.File
}

// doneByte is what the owner writes when it destroyed the sandbox itself.
const doneByte = 'd'

// startTimeout bounds the watchdog's start.
const startTimeout = 10 * time.Second

// Start starts the watchdog of one sandbox and returns once it watches.
func Start(c Cleanup) (*Watchdog, error) {
	cfg, err := json.Marshal(c)
	if err != nil {
		return nil, err
	}
	r, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	defer r.Close()
	cmd := &exec.Cmd{
		Path:       "/proc/self/exe",
		Args:       []string{Arg0, string(cfg)},
		Env:        []string{"GOMAXPROCS=1"},
		ExtraFiles: []*os.File{r},
		// a session of its own: the owner's terminal signals and process
		// group kills do not reach it
		SysProcAttr: &syscall.SysProcAttr{Setsid: true},
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		w.Close()
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		w.Close()
		return nil, fmt.Errorf("watchdog: %w", err)
	}
	ready := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(out).ReadString('\n')
		ready <- line
	}()
	wd := &Watchdog{cmd: cmd, pipe: w}
	select {
	case line := <-ready:
		if line == "ready\n" {
			return wd, nil
		}
		err = fmt.Errorf("watchdog did not start: %q", line)
	case <-time.After(startTimeout):
		err = fmt.Errorf("watchdog did not start within %v", startTimeout)
	}
	_ = cmd.Process.Kill()
	w.Close()
	_ = cmd.Wait()
	return nil, err
}

// Stop tells the watchdog that its sandbox is gone, and waits for it to
// exit. It is safe on a nil Watchdog.
func (wd *Watchdog) Stop() error {
	if wd == nil {
		return nil
	}
	_, werr := wd.pipe.Write([]byte{doneByte})
	wd.pipe.Close()
	err := wd.cmd.Wait()
	if werr != nil {
		return fmt.Errorf("watchdog: %w", werr)
	}
	return err
}

func init() {
	if len(os.Args) == 2 && os.Args[0] == Arg0 {
		os.Exit(watch(os.Args[1]))
	}
}

// watch is the watchdog's own program: exit 0 when told the sandbox is
// gone; clean up and exit 1 when the owner is.
func watch(cfg string) int {
	var c Cleanup
	if err := json.Unmarshal([]byte(cfg), &c); err != nil {
		fmt.Fprintln(os.Stderr, "airlock-watchdog:", err)
		return 2
	}
	owner := os.Getppid()
	pidfd, err := unix.PidfdOpen(owner, 0)
	if err != nil || owner == 1 {
		fmt.Fprintln(os.Stderr, "airlock-watchdog: owner:", err)
		c.run()
		return 1
	}
	fmt.Println("ready")
	os.Stdout.Close()
	const pipeFD = 3
	fds := []unix.PollFd{{Fd: pipeFD, Events: unix.POLLIN}, {Fd: int32(pidfd), Events: unix.POLLIN}}
	for {
		_, err := unix.Poll(fds, -1)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err == nil && fds[0].Revents&unix.POLLIN != 0 {
			var b [1]byte
			if n, _ := unix.Read(pipeFD, b[:]); n == 1 && b[0] == doneByte {
				return 0
			}
		}
		// the pipe ended without the byte, or the owner exited
		c.run()
		return 1
	}
}

// run removes what the cleanup names, each step on its own.
func (c Cleanup) run() {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if c.Container != "" {
		if err := removeContainer(ctx, c.DockerSocket, c.Container); err != nil {
			fmt.Fprintln(os.Stderr, "airlock-watchdog:", err)
		}
	}
	if c.RunscID != "" {
		args := append(append([]string{}, c.RunscFlags...), "delete", "--force", c.RunscID)
		_ = exec.CommandContext(ctx, c.Runsc, args...).Run()
	}
	if c.RunscKillArg != "" {
		KillByArg(c.RunscKillArg)
	}
	if c.Folder != "" {
		if err := hostdir.RemovePath(c.Folder); err != nil {
			fmt.Fprintln(os.Stderr, "airlock-watchdog:", err)
		}
	}
}

// removeContainer removes a container with the Engine API's
// DELETE /containers/ID?force=1&v=1.
func removeContainer(ctx context.Context, socket, id string) error {
	cli := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", socket)
	}}}
	req, err := http.NewRequestWithContext(ctx, http.MethodDelete, "http://docker/containers/"+url.PathEscape(id)+"?force=1&v=1", nil)
	if err != nil {
		return err
	}
	resp, err := cli.Do(req)
	if err != nil {
		return fmt.Errorf("remove container %s: %w", id, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent && resp.StatusCode != http.StatusNotFound {
		return fmt.Errorf("remove container %s: %s", id, resp.Status)
	}
	return nil
}

// KillByArg kills with SIGKILL the processes that have arg among their
// arguments (runsc's processes name their state folder so).
func KillByArg(arg string) {
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err != nil {
			continue
		}
		for _, a := range bytes.Split(b, []byte{0}) {
			if string(a) == arg {
				_ = syscall.Kill(pid, syscall.SIGKILL)
				break
			}
		}
	}
}

// SocketPath is the path of a unix:// daemon address, or "" for another
// kind of address.
func SocketPath(host string) string {
	p, ok := strings.CutPrefix(host, "unix://")
	if !ok {
		return ""
	}
	return p
}
