package command

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// OOMScore is the OOM score every sandboxed process gets: the host's
// first victim.
const OOMScore = 1000

// SetOOMScore sets host process pid's oom_score_adj to OOMScore. Written
// by a process that holds CAP_SYS_RESOURCE, the score is also the least
// the process and its children may lower it to; a runtime that starts
// the command without that capability leaves the floor at 0.
func SetOOMScore(pid int) error {
	if err := os.WriteFile("/proc/"+strconv.Itoa(pid)+"/oom_score_adj", []byte(strconv.Itoa(OOMScore)), 0); err != nil {
		return fmt.Errorf("oom score of process %d: %w", pid, err)
	}
	return nil
}

// WaitStopped polls host process pid's state until a signal stops it, as
// the shell of Wrap with StopFirst stops itself.
func WaitStopped(ctx context.Context, pid int) error {
	for wait := 100 * time.Microsecond; ; wait = min(2*wait, 5*time.Millisecond) {
		switch state(pid) {
		case "T":
			return nil
		case "":
			return fmt.Errorf("process %d ended before it stopped", pid)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("process %d did not stop: %w", pid, ctx.Err())
		case <-time.After(wait):
		}
	}
}

// state is a process's state letter, "" when it is gone.
func state(pid int) string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return ""
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) == 0 || f[0] == "Z" || f[0] == "X" {
		return ""
	}
	return f[0]
}
