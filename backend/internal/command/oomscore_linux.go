package command

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// OOMScore is the OOM score every sandboxed process gets: the host's
// first victim.
const OOMScore = 1000

// RaiseOOMScore waits until host process pid, a shell that Wrap started
// with StopFirst, has stopped, sets its oom_score_adj to OOMScore and
// continues it. Written by a process that holds CAP_SYS_RESOURCE, the
// score is also the least the process and its children may lower it to;
// a runtime that starts the command without that capability leaves the
// floor at 0.
func RaiseOOMScore(ctx context.Context, pid int) error {
	if err := waitStopped(ctx, pid); err != nil {
		return err
	}
	if err := os.WriteFile("/proc/"+strconv.Itoa(pid)+"/oom_score_adj", []byte(strconv.Itoa(OOMScore)), 0); err != nil {
		return fmt.Errorf("oom score of process %d: %w", pid, err)
	}
	return syscall.Kill(pid, syscall.SIGCONT)
}

// waitStopped polls a process's state until a signal stops it.
func waitStopped(ctx context.Context, pid int) error {
	for {
		switch state(pid) {
		case "T":
			return nil
		case "":
			return fmt.Errorf("process %d ended before it could be given its OOM score", pid)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("process %d did not stop: %w", pid, ctx.Err())
		case <-time.After(200 * time.Microsecond):
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
