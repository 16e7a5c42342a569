package sandbox

import "errors"

// Sentinel errors. Backends wrap them with %w so that callers can test with
// errors.Is; the HTTP server maps them to status codes.
var (
	// ErrInvalid means the caller's input is malformed: a bad limit, name or path.
	ErrInvalid = errors.New("invalid argument")
	// ErrNotFound means a named object (sandbox, image, file) does not exist.
	ErrNotFound = errors.New("not found")
	// ErrUnsupported means this host or backend cannot provide what was asked,
	// for example a layer that a strict policy demands.
	ErrUnsupported = errors.New("unsupported on this host")
	// ErrLimit means a configured cap was reached.
	ErrLimit = errors.New("limit reached")
	// ErrDestroyed means the instance was already destroyed.
	ErrDestroyed = errors.New("sandbox destroyed")
	// ErrDied means the sandbox ended by itself: its init or its kernel
	// is gone. The error that wraps it says why.
	ErrDied = errors.New("sandbox died")
	// ErrExist means a file or object that must not exist already does.
	ErrExist = errors.New("already exists")
)
