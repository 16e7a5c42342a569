//go:build !linux

package main

import "io"

// isTerminal reports false: airlock runs sandboxes on Linux only, and
// elsewhere it never streams a command's output.
func isTerminal(io.Writer) bool { return false }
