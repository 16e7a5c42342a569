package bench_test

import (
	"context"
	"os"
	"path/filepath"
	"sort"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/backend/kubernetes"
	"github.com/airlock-sandbox/airlock/backend/native"
	"github.com/airlock-sandbox/airlock/image"
	"github.com/airlock-sandbox/airlock/sandbox"
	"github.com/airlock-sandbox/airlock/session"
)

// sessionBackend is one backend of BenchmarkSessions and the image its
// sessions run.
type sessionBackend struct {
	name  string
	image string
	open  func() sandbox.Backend
}

// sessionBackends are the backends this machine can run: native always;
// kubernetes with a cluster (KUBECONFIG, see test/k8s/up.sh) and the
// python image in $AIRLOCK_HOME's store (.ci/lib/image.sh), imported into
// the cluster. The docker backend is not in the table yet: it has not
// been ported to the v2 interfaces.
func sessionBackends(b *testing.B) ([]sessionBackend, image.Lookup) {
	out := []sessionBackend{{name: "native", image: "host", open: func() sandbox.Backend { return native.New(native.Options{}) }}}
	store, err := image.OpenStore(filepath.Join(os.Getenv("AIRLOCK_HOME"), "images"))
	if err == nil {
		_, err = store.Get("python")
	}
	if os.Getenv("KUBECONFIG") == "" || os.Getenv("AIRLOCK_HOME") == "" || err != nil {
		b.Logf("kubernetes left out: KUBECONFIG=%q, python image: %v", os.Getenv("KUBECONFIG"), err)
		return out, nil
	}
	k := kubernetes.New(kubernetes.Options{PullPolicy: "Never", Replica: "bench"})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := k.Probe(ctx); err != nil {
		b.Logf("kubernetes left out: %v", err)
		return out, store
	}
	k.Close()
	out = append(out, sessionBackend{name: "kubernetes", image: "python",
		open: func() sandbox.Backend {
			return kubernetes.New(kubernetes.Options{PullPolicy: "Never", Replica: "bench"})
		}})
	return out, store
}

// BenchmarkSessions times, for each backend, what an agent waits for:
// creating a session cold (a new sandbox), creating one from a warm pool
// (the pool refills between iterations, off the clock), and one exec
// round trip of /bin/true in a live session. It reports the median and
// p90 in ms. Use a fixed count:
//
//	go test -run '^$' -bench Sessions -benchtime 20x ./bench
func BenchmarkSessions(b *testing.B) {
	backends, store := sessionBackends(b)
	for _, sb := range backends {
		b.Run(sb.name+"/create-cold", func(b *testing.B) {
			m := newBenchManager(b, sb, store, nil)
			var ms []float64
			for b.Loop() {
				t0 := time.Now()
				s, err := m.Create(context.Background(), session.CreateOptions{Owner: "bench", Backend: sb.name, Image: sb.image})
				if err != nil {
					b.Fatal(err)
				}
				ms = append(ms, float64(time.Since(t0).Microseconds())/1000)
				b.StopTimer()
				_ = s.Destroy(context.Background())
				b.StartTimer()
			}
			report(b, ms)
		})
		b.Run(sb.name+"/create-pool", func(b *testing.B) {
			m := newBenchManager(b, sb, store, []session.PoolSpec{{Backend: sb.name, Image: sb.image, Size: 2}})
			var ms []float64
			for b.Loop() {
				b.StopTimer()
				waitPool(b, m, 2)
				b.StartTimer()
				t0 := time.Now()
				s, err := m.Create(context.Background(), session.CreateOptions{Owner: "bench", Backend: sb.name, Image: sb.image})
				if err != nil {
					b.Fatal(err)
				}
				ms = append(ms, float64(time.Since(t0).Microseconds())/1000)
				b.StopTimer()
				if !s.Info().Pooled {
					b.Fatal("the session did not come from the pool")
				}
				_ = s.Destroy(context.Background())
				b.StartTimer()
			}
			report(b, ms)
		})
		b.Run(sb.name+"/exec", func(b *testing.B) {
			m := newBenchManager(b, sb, store, nil)
			s, err := m.Create(context.Background(), session.CreateOptions{Owner: "bench", Backend: sb.name, Image: sb.image})
			if err != nil {
				b.Fatal(err)
			}
			var ms []float64
			for b.Loop() {
				t0 := time.Now()
				res, err := s.Exec(context.Background(), sandbox.ProcessSpec{Cmd: []string{"/bin/true"}})
				if err != nil || res.ExitCode != 0 {
					b.Fatalf("exec: %+v %v", res, err)
				}
				ms = append(ms, float64(time.Since(t0).Microseconds())/1000)
			}
			report(b, ms)
		})
	}
}

func newBenchManager(b *testing.B, sb sessionBackend, store image.Lookup, pools []session.PoolSpec) *session.Manager {
	b.Helper()
	opts := session.Options{Backends: map[string]sandbox.Backend{sb.name: sb.open()}, Pools: pools}
	if store != nil {
		opts.Images = store
	}
	m, err := session.New(context.Background(), opts)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = m.Close(context.Background()) })
	return m
}

// waitPool waits until n sessions wait in the pools.
func waitPool(b *testing.B, m *session.Manager, n int) {
	deadline := time.Now().Add(5 * time.Minute)
	for m.PoolReady() < n {
		if time.Now().After(deadline) {
			b.Fatalf("the pool did not fill: %d ready", m.PoolReady())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// report adds the median and p90 of ms to b's results.
func report(b *testing.B, ms []float64) {
	if len(ms) == 0 {
		return
	}
	sort.Float64s(ms)
	b.ReportMetric(ms[len(ms)/2], "median-ms")
	b.ReportMetric(ms[len(ms)*9/10], "p90-ms")
	b.ReportMetric(0, "ns/op")
}
