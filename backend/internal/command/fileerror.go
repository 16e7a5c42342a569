package command

import (
	"errors"
	"fmt"

	"github.com/airlock-sandbox/airlock/backend/internal/dirfs"
	"github.com/airlock-sandbox/airlock/sandbox"
)

// FileError maps a file operation's error, as package dirfs reports it
// from wherever it ran, to the sandbox's sentinels.
func FileError(e *dirfs.Error) error {
	var s error
	switch e.Kind {
	case dirfs.Invalid:
		s = sandbox.ErrInvalid
	case dirfs.NotFound:
		s = sandbox.ErrNotFound
	case dirfs.Exist:
		s = sandbox.ErrExist
	case dirfs.Limit:
		s = sandbox.ErrLimit
	default:
		return errors.New(e.Msg)
	}
	return fmt.Errorf("%s: %w", e.Msg, s)
}
