package dirfs

import (
	"errors"
	"fmt"

	"golang.org/x/sys/unix"
)

// Kind sorts errors the way callers map them (to sandbox's sentinels).
type Kind string

// Error kinds.
const (
	Invalid  Kind = "invalid"   // a bad path, a link on the way, the wrong kind of file
	NotFound Kind = "not_found" // nothing there
	Exist    Kind = "exist"     // something there already
	Limit    Kind = "limit"     // over a cap: size, space, depth
	Other    Kind = "other"
)

// Error is a failed file operation.
type Error struct {
	Kind Kind   `json:"kind"`
	Msg  string `json:"msg"`
}

func (e *Error) Error() string { return e.Msg }

func errorf(k Kind, format string, a ...any) *Error {
	return &Error{Kind: k, Msg: fmt.Sprintf(format, a...)}
}

// wrap turns a system call's failure on p into an Error of the right kind;
// nil stays nil and an Error passes through.
func wrap(err error, p string) error {
	if err == nil {
		return nil
	}
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	var errno unix.Errno
	if !errors.As(err, &errno) {
		return &Error{Kind: Other, Msg: p + ": " + err.Error()}
	}
	switch errno {
	case unix.ENOENT:
		return errorf(NotFound, "%s: no such file or folder", p)
	case unix.EEXIST, unix.ENOTEMPTY:
		return errorf(Exist, "%s: already exists", p)
	case unix.ELOOP:
		return errorf(Invalid, "%s: a symbolic link is on the way (never followed)", p)
	case unix.EXDEV:
		return errorf(Invalid, "%s: crosses a mount", p)
	case unix.ENOTDIR:
		return errorf(Invalid, "%s: a part of the path is not a folder", p)
	case unix.EISDIR:
		return errorf(Invalid, "%s: is a folder", p)
	case unix.ENOSPC, unix.EDQUOT, unix.EFBIG:
		return errorf(Limit, "%s: %v (the folder's size cap)", p, errno)
	case unix.EACCES, unix.EPERM, unix.EROFS:
		return errorf(Invalid, "%s: %v", p, errno)
	}
	return errorf(Other, "%s: %v", p, errno)
}
