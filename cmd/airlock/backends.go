package main

import (
	"fmt"
	"sort"
	"strings"

	"github.com/airlock-sandbox/airlock/backend/native"
	"github.com/airlock-sandbox/airlock/image"
	"github.com/airlock-sandbox/airlock/sandbox"
)

// backendNames lists the backends this binary can run, in doctor's order.
var backendNames = []string{"native"}

// newBackend returns the named backend, resolving image names through the
// image store when there is one.
func newBackend(env *cliEnv, name string) (sandbox.Backend, error) {
	switch name {
	case "native":
		opts := native.Options{}
		if store := imageStore(env); store != nil {
			opts.Images = store
		}
		return native.New(opts), nil
	}
	names := append([]string(nil), backendNames...)
	sort.Strings(names)
	return nil, fmt.Errorf("unknown backend %q (have: %s): %w", name, strings.Join(names, ", "), sandbox.ErrInvalid)
}

// imageStore opens the default image store, or returns nil when there is
// none to open (then only "host" and folder paths name images).
func imageStore(env *cliEnv) *image.Store {
	dir, err := image.DefaultDir(env.getenv)
	if err != nil {
		return nil
	}
	s, err := image.OpenStore(dir)
	if err != nil {
		return nil
	}
	return s
}
