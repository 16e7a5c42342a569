package main

import (
	"fmt"
	"sort"
	"strings"

	"github.com/airlock-sandbox/airlock/backend/native"
	"github.com/airlock-sandbox/airlock/sandbox"
)

// backendNames lists the backends this binary can run, in doctor's order.
var backendNames = []string{"native"}

// newBackend returns the named backend.
func newBackend(env *cliEnv, name string) (sandbox.Backend, error) {
	switch name {
	case "native":
		return native.New(native.Options{}), nil
	}
	names := append([]string(nil), backendNames...)
	sort.Strings(names)
	return nil, fmt.Errorf("unknown backend %q (have: %s): %w", name, strings.Join(names, ", "), sandbox.ErrInvalid)
}
