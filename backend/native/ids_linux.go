package native

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/airlock-sandbox/airlock/sandbox"
	"golang.org/x/sys/unix"
)

// Host ids for sandboxes, as root: each sandbox gets a range of 65536 ids
// no host account uses; inside, its root is the range's first id and the
// sandbox user 1000 is base+1000. The ranges are leased host-wide, across
// airlock processes, with one byte-range lock per range on a lock file:
// an open-file-description lock, released when the sandbox ends or its
// airlock dies, whatever the cause.
const (
	idBase     = 0x40000000
	idRange    = 0x10000
	idSlots    = 0x3fff
	idLockFile = "/run/airlock/ids.lock"
)

// idLease holds one range.
type idLease struct {
	f    *os.File
	base int
}

// leaseIDs takes a free range, starting the search at a random one.
func leaseIDs() (*idLease, error) {
	if err := os.MkdirAll(filepath.Dir(idLockFile), 0o700); err != nil {
		return nil, fmt.Errorf("host id lock: %w", err)
	}
	f, err := os.OpenFile(idLockFile, os.O_RDWR|os.O_CREATE|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("host id lock: %w", err)
	}
	var b [4]byte
	_, _ = rand.Read(b[:])
	start := int(binary.LittleEndian.Uint32(b[:]) % idSlots)
	for i := range idSlots {
		slot := (start + i) % idSlots
		lk := unix.Flock_t{Type: unix.F_WRLCK, Whence: 0, Start: int64(slot), Len: 1}
		err := unix.FcntlFlock(f.Fd(), unix.F_OFD_SETLK, &lk)
		if err == nil {
			return &idLease{f: f, base: idBase + slot*idRange}, nil
		}
		if !errors.Is(err, unix.EAGAIN) && !errors.Is(err, unix.EACCES) {
			f.Close()
			return nil, fmt.Errorf("host id lock: %w", err)
		}
	}
	f.Close()
	return nil, fmt.Errorf("all %d host id ranges are in use: %w", idSlots, sandbox.ErrLimit)
}

// release gives the range back.
func (l *idLease) release() {
	if l != nil && l.f != nil {
		l.f.Close()
		l.f = nil
	}
}
