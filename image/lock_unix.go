//go:build unix

package image

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// lockFileAt opens (creating it if needed) and exclusively locks the file
// at path, waiting for other holders. Closing the file releases the lock,
// and so does the death of the process.
func lockFileAt(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, err
	}
	if err := flock(f, false); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// lockDir opens and exclusively locks a folder. With nonBlocking it fails
// at once with errLocked when another process holds it.
func lockDir(dir string, nonBlocking bool) (*os.File, error) {
	f, err := os.Open(dir)
	if err != nil {
		return nil, err
	}
	if err := flock(f, nonBlocking); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

func flock(f *os.File, nonBlocking bool) error {
	how := unix.LOCK_EX
	if nonBlocking {
		how |= unix.LOCK_NB
	}
	for {
		err := unix.Flock(int(f.Fd()), how)
		switch {
		case err == nil:
			return nil
		case errors.Is(err, unix.EINTR):
			continue
		case errors.Is(err, unix.EWOULDBLOCK):
			return fmt.Errorf("%s: %w", f.Name(), errLocked)
		default:
			return fmt.Errorf("lock %s: %w", f.Name(), err)
		}
	}
}
