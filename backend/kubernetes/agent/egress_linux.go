package agent

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// EgressListen is where the egress listener takes connections inside the
// sandbox: sandbox.EgressAddr (this package does not import sandbox).
const EgressListen = "127.0.0.1:3128"

// claimWait is how long an announced connection waits for its
// egress-conn before it is closed.
const claimWait = 30 * time.Second

// handoff is the abstract unix socket through which egress-conn takes a
// connection ("ID\n"), and a newer listener asks this one to end
// ("quit\n").
const handoff = "@airlock-egress"

// takeover bounds how long a new listener waits for the old one to end.
const takeover = 5 * time.Second

// runEgress is "egress": it listens on EgressListen, says "listening",
// and for each connection prints "conn ID" on stdout, for the backend to start
// "egress-conn ID". A listener already there (another airlock process
// attached this sandbox before) is asked to end first. It ends when its
// stdin ends (the backend is gone) or a newer listener takes over.
func runEgress([]string) int {
	_ = unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0)
	var hand, ln net.Listener
	var err error
	for deadline := time.Now().Add(takeover); ; time.Sleep(20 * time.Millisecond) {
		if hand, err = net.Listen("unix", handoff); err == nil {
			if ln, err = net.Listen("tcp", EgressListen); err == nil {
				break
			}
			hand.Close()
		} else if c, derr := net.Dial("unix", handoff); derr == nil {
			_, _ = io.WriteString(c, "quit\n")
			c.Close()
		}
		if time.Now().After(deadline) {
			fmt.Fprintf(os.Stderr, "airlock-k8s-agent: egress: %v\n", err)
			return 1
		}
	}
	var mu sync.Mutex
	pending := map[uint64]*net.TCPConn{}
	go func() {
		for {
			c, err := hand.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				line, err := bufio.NewReader(io.LimitReader(c, 32)).ReadString('\n')
				if strings.TrimSpace(line) == "quit" {
					os.Exit(0)
				}
				id, perr := strconv.ParseUint(strings.TrimSpace(line), 10, 64)
				if err != nil || perr != nil {
					return
				}
				mu.Lock()
				tc := pending[id]
				delete(pending, id)
				mu.Unlock()
				if tc == nil {
					return
				}
				defer tc.Close()
				f, err := tc.File()
				if err != nil {
					return
				}
				defer f.Close()
				_, _, _ = c.(*net.UnixConn).WriteMsgUnix([]byte{1}, unix.UnixRights(int(f.Fd())), nil)
			}()
		}
	}()
	// the end of stdin is the end of the backend
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		os.Exit(0)
	}()
	out := bufio.NewWriter(os.Stdout)
	fmt.Fprintln(out, "listening")
	if out.Flush() != nil {
		return 0
	}
	for id := uint64(1); ; id++ {
		c, err := ln.Accept()
		if err != nil {
			return 1
		}
		mu.Lock()
		pending[id] = c.(*net.TCPConn)
		mu.Unlock()
		go func() {
			time.Sleep(claimWait)
			mu.Lock()
			tc := pending[id]
			delete(pending, id)
			mu.Unlock()
			if tc != nil {
				tc.Close()
			}
		}()
		fmt.Fprintf(out, "conn %d\n", id)
		if out.Flush() != nil {
			return 0
		}
	}
}

// runEgressConn is "egress-conn ID": it takes connection ID from the
// egress listener and copies between it and stdin and stdout.
func runEgressConn(args []string) int {
	if len(args) != 1 {
		fmt.Fprintln(os.Stderr, "usage: airlock-k8s-agent egress-conn ID")
		return 2
	}
	c, err := net.Dial("unix", handoff)
	if err != nil {
		fmt.Fprintf(os.Stderr, "airlock-k8s-agent: egress-conn: %v\n", err)
		return 1
	}
	defer c.Close()
	if _, err := fmt.Fprintf(c, "%s\n", args[0]); err != nil {
		return 1
	}
	oob := make([]byte, unix.CmsgSpace(4))
	_, oobn, _, _, err := c.(*net.UnixConn).ReadMsgUnix(make([]byte, 1), oob)
	if err != nil {
		return 1
	}
	msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
	if err != nil || len(msgs) != 1 {
		fmt.Fprintln(os.Stderr, "airlock-k8s-agent: egress-conn: no connection handed over")
		return 1
	}
	fds, err := unix.ParseUnixRights(&msgs[0])
	if err != nil || len(fds) != 1 {
		return 1
	}
	f := os.NewFile(uintptr(fds[0]), "egress")
	conn, err := net.FileConn(f)
	f.Close()
	if err != nil {
		return 1
	}
	defer conn.Close()
	done := make(chan struct{})
	go func() {
		_, _ = io.Copy(conn, os.Stdin)
		if tc, ok := conn.(*net.TCPConn); ok {
			_ = tc.CloseWrite()
		}
		close(done)
	}()
	_, _ = io.Copy(os.Stdout, conn)
	os.Stdout.Close()
	<-done
	return 0
}
