package bench_test

import (
	"context"
	"sort"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/backend/native"
	"github.com/airlock-sandbox/airlock/bench"
	"github.com/airlock-sandbox/airlock/internal/testenv"
	"github.com/airlock-sandbox/airlock/internal/testimage"
	"github.com/airlock-sandbox/airlock/sandbox"
	"github.com/airlock-sandbox/airlock/session"
)

// BenchmarkSessionFirstResult times what an agent waits for at the start
// of a task: a session of the python image created and its first code
// call's result back (print(1)), then the session destroyed (not timed).
// "warm" takes the session from a warm pool whose interpreter waits with
// the data libraries imported (the pool refills between runs, untimed);
// "cold" creates the sandbox and starts the interpreter for the call. It
// reports the median and p90 in ms:
//
//	go test -run '^$' -bench SessionFirstResult -benchtime 50x ./bench
func BenchmarkSessionFirstResult(b *testing.B) {
	testenv.Require(b, "root, for native sessions", testenv.Root())
	store := testimage.Store(b)
	for _, warm := range []bool{true, false} {
		name := map[bool]string{true: "warm", false: "cold"}[warm]
		b.Run(name, func(b *testing.B) {
			o := session.Options{Backends: map[string]sandbox.Backend{"native": native.New(native.Options{})}, Images: store}
			if warm {
				o.Pools = []session.PoolSpec{{Backend: "native", Image: testimage.Name, Size: 1, Warm: session.WarmPython(session.DataPreload)}}
			}
			ctx := context.Background()
			m, err := session.New(ctx, o)
			if err != nil {
				b.Fatal(err)
			}
			defer m.Close(ctx)
			var times []time.Duration
			for range b.N {
				b.StopTimer()
				for deadline := time.Now().Add(2 * time.Minute); warm && m.PoolReady() < 1; time.Sleep(time.Millisecond) {
					if time.Now().After(deadline) {
						b.Fatal("the pool did not refill in 2 minutes")
					}
				}
				b.StartTimer()
				t0 := time.Now()
				s, err := m.Create(ctx, session.CreateOptions{Owner: "bench", Image: testimage.Name})
				if err != nil {
					b.Fatal(err)
				}
				x, err := s.Code(ctx, session.CodeRequest{Code: "print(1)"}, nil)
				d := time.Since(t0)
				b.StopTimer()
				if err != nil || x.Stdout != "1\n" {
					b.Fatalf("print(1): %q %v", x.Stdout, err)
				}
				if warm != s.Info().Pooled {
					b.Fatalf("pooled %v, want %v", s.Info().Pooled, warm)
				}
				times = append(times, d)
				if err := s.Destroy(ctx); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
			sort.Slice(times, func(i, j int) bool { return times[i] < times[j] })
			b.ReportMetric(bench.Ms(times[len(times)/2]), "median-ms")
			b.ReportMetric(bench.Ms(times[(len(times)*9)/10]), "p90-ms")
		})
	}
}
