package kubernetes_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/backend/docker"
	"github.com/airlock-sandbox/airlock/backend/native"
	"github.com/airlock-sandbox/airlock/internal/testenv"
	"github.com/airlock-sandbox/airlock/internal/testimage"
	"github.com/airlock-sandbox/airlock/sandbox"
	"github.com/airlock-sandbox/airlock/session"
)

// The benchmarks time, on the test cluster and beside the native and
// docker (runc) backends in the same run, with the python image on each:
//
//   - create: a session created on demand (a new Pod, cold), and one
//     taken from a warm pool of one (the pool refills between runs,
//     untimed, as it would between a server's requests); the session is
//     destroyed, untimed, after each run;
//   - exec: the round trip of `true` in a running session.
//
// Each reports the median in ms next to Go's mean.
//
//	go test -run '^$' -bench . -benchtime 20x ./backend/kubernetes

// benchBackends are the backends timed side by side.
var benchBackends = []string{"kubernetes", "native", "docker"}

// benchManager is a Manager over backend name alone
// (with a warm pool of one when pooled), closed when b ends.
func benchManager(b *testing.B, name string, pooled bool) *session.Manager {
	b.Helper()
	var be sandbox.Backend
	switch name {
	case "kubernetes":
		be = newBackend(b, options())
	case "native":
		testenv.Require(b, "root, for the native backend's full form", testenv.Root())
		nb := native.New(native.Options{})
		b.Cleanup(func() { nb.Close() })
		be = nb
	case "docker":
		// runc: the daemon's default may be runsc, the other row of the
		// README's table
		db := docker.New(docker.Options{Runtime: "runc"})
		b.Cleanup(func() { db.Close() })
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		testenv.Require(b, "a Docker daemon (bash .ci/lib/docker.sh start)", db.Probe(ctx))
		be = db
	}
	opts := session.Options{Backends: map[string]sandbox.Backend{name: be}, Images: testimage.Store(b)}
	if pooled {
		opts.Pools = []session.PoolSpec{{Backend: name, Image: testimage.Name, Size: 1}}
	}
	m, err := session.New(context.Background(), opts)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := m.Close(ctx); err != nil {
			b.Error(err)
		}
	})
	return m
}

// poolFilled waits, untimed, until m's pool holds a ready session.
func poolFilled(b *testing.B, m *session.Manager) func() {
	return func() {
		deadline := time.Now().Add(2 * time.Minute)
		for m.PoolReady() == 0 {
			if time.Now().After(deadline) {
				b.Fatal("the warm pool did not refill within 2 minutes")
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
}

func BenchmarkCreate(b *testing.B) {
	for _, name := range benchBackends {
		for _, pooled := range []bool{false, true} {
			label := name + "/cold"
			if pooled {
				label = name + "/pool"
			}
			b.Run(label, func(b *testing.B) {
				m := benchManager(b, name, pooled)
				var settle func()
				if pooled {
					settle = poolFilled(b, m)
				}
				ctx := context.Background()
				var last *session.Session
				testenv.Median(b, func() error {
					s, err := m.Create(ctx, session.CreateOptions{Backend: name, Image: testimage.Name})
					if err != nil {
						return err
					}
					last = s
					if pooled != s.Info().Pooled {
						return fmt.Errorf("session pooled=%v, want %v", s.Info().Pooled, pooled)
					}
					return nil
				}, func() {
					if last != nil {
						if err := m.Destroy(ctx, last.Owner(), last.ID()); err != nil {
							b.Fatal(err)
						}
						last = nil
					}
					if settle != nil {
						settle()
					}
				})
				if last != nil {
					_ = m.Destroy(ctx, last.Owner(), last.ID())
				}
			})
		}
	}
}

func BenchmarkExec(b *testing.B) {
	for _, name := range benchBackends {
		b.Run(name, func(b *testing.B) {
			m := benchManager(b, name, false)
			ctx := context.Background()
			s, err := m.Create(ctx, session.CreateOptions{Backend: name, Image: testimage.Name})
			if err != nil {
				b.Fatal(err)
			}
			defer m.Destroy(ctx, s.Owner(), s.ID())
			testenv.Median(b, func() error {
				res, err := s.Exec(ctx, sandbox.ProcessSpec{Cmd: []string{"true"}})
				if err != nil || res.ExitCode != 0 {
					return fmt.Errorf("true: %+v %v", res, err)
				}
				return nil
			}, nil)
		})
	}
}
