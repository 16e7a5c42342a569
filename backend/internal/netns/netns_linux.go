package netns

import (
	"fmt"
	"net"
	"runtime"

	"golang.org/x/sys/unix"
)

// Listen opens a TCP listener on addr (such as "127.0.0.1:3128") inside the
// network namespace at nsPath (such as "/proc/PID/ns/net"). The socket
// stays in that namespace; the listener is used from this process as any
// other. The work happens on a locked OS thread that enters the namespace
// and comes back; a thread that cannot come back is never unlocked, so
// that the Go runtime retires it.
func Listen(nsPath, addr string) (net.Listener, error) {
	type result struct {
		l   net.Listener
		err error
	}
	ch := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		l, back, err := listenIn(nsPath, addr)
		if back {
			runtime.UnlockOSThread()
		}
		ch <- result{l, err}
	}()
	r := <-ch
	return r.l, r.err
}

// listenIn runs on a locked thread; back tells whether the thread is in
// its own namespace again.
func listenIn(nsPath, addr string) (l net.Listener, back bool, err error) {
	home, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, true, fmt.Errorf("own network namespace: %w", err)
	}
	defer unix.Close(home)
	target, err := unix.Open(nsPath, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, true, fmt.Errorf("network namespace %s: %w", nsPath, err)
	}
	defer unix.Close(target)
	if err := unix.Setns(target, unix.CLONE_NEWNET); err != nil {
		return nil, true, fmt.Errorf("enter network namespace %s: %w", nsPath, err)
	}
	l, err = net.Listen("tcp", addr)
	if err != nil {
		err = fmt.Errorf("listen on %s in %s: %w", addr, nsPath, err)
	}
	back = unix.Setns(home, unix.CLONE_NEWNET) == nil
	return l, back, err
}
