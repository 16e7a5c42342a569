//go:build !linux

package testpg

import "errors"

// errOS is why Start skips here.
var errOS = errors.New("testpg starts PostgreSQL on Linux only")

func start(string) (*Server, error) { return nil, errOS }
