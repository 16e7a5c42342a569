package bench_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/backend/microvm"
	"github.com/airlock-sandbox/airlock/backend/native"
	"github.com/airlock-sandbox/airlock/image"
	"github.com/airlock-sandbox/airlock/internal/testenv"
	"github.com/airlock-sandbox/airlock/sandbox"
	"github.com/airlock-sandbox/airlock/session"
)

// The microvm benchmarks put a microvm sandbox beside a native one, both
// of the python image: boot to first exec, an exec's round trip, and the
// memory one idle sandbox holds on the host. Under TCG here; set
// AIRLOCK_MICROVM_ACCEL=kvm on a host where KVM runs guests:
//
//	go test -run '^$' -bench MicroVM -benchtime 5x ./bench

// backends returns the two backends and the image they run.
func backends(b *testing.B) (map[string]sandbox.Backend, sandbox.Image) {
	bes, img, _ := backendsAndStore(b)
	return bes, img
}

func backendsAndStore(b *testing.B) (map[string]sandbox.Backend, sandbox.Image, *image.Store) {
	b.Helper()
	testenv.Require(b, "root", testenv.Root())
	dir, err := image.DefaultDir(os.Getenv)
	testenv.Require(b, "an image store (AIRLOCK_HOME, as .ci/lib/image.sh prints it)", err)
	store, err := image.OpenStore(dir)
	if err != nil {
		b.Fatal(err)
	}
	img, err := image.Resolve(store, "python")
	testenv.Require(b, "the python image (bash .ci/lib/image.sh builds it)", err)
	kernels := os.Getenv("AIRLOCK_MICROVM_KERNELS")
	if kernels == "" {
		kernels = store.KernelDir()
	}
	accel := os.Getenv("AIRLOCK_MICROVM_ACCEL")
	if accel == "" {
		accel = microvm.AccelTCG
	}
	mv := microvm.New(microvm.Options{KernelDir: kernels, CacheDir: filepath.Join(store.Dir(), ".microvm"), Accel: accel})
	testenv.Require(b, "the microvm backend", mv.Probe(context.Background()))
	return map[string]sandbox.Backend{"native": native.New(native.Options{}), "microvm": mv}, img, store
}

// medianMS reports the median of ds in ms as "ms/median".
func medianMS(b *testing.B, ds []time.Duration) {
	sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
	if len(ds) > 0 {
		b.ReportMetric(float64(ds[len(ds)/2].Microseconds())/1000, "ms/median")
	}
}

func policy(b *testing.B) sandbox.Policy {
	p, err := sandbox.Policy{}.Normalize()
	if err != nil {
		b.Fatal(err)
	}
	return p
}

// BenchmarkMicroVMBootToFirstExec: Create and the first exec of /bin/true,
// timed until the exec's Result; Destroy is not timed.
func BenchmarkMicroVMBootToFirstExec(b *testing.B) {
	bes, img := backends(b)
	for _, name := range []string{"native", "microvm"} {
		be := bes[name]
		b.Run(name, func(b *testing.B) {
			var ds []time.Duration
			for range b.N {
				t0 := time.Now()
				inst, err := be.Create(context.Background(), sandbox.Spec{Image: img, Policy: policy(b)})
				if err != nil {
					b.Fatal(err)
				}
				res, err := sandbox.Exec(context.Background(), inst, sandbox.ProcessSpec{Cmd: []string{"/bin/true"}})
				ds = append(ds, time.Since(t0))
				if err != nil || res.ExitCode != 0 {
					b.Fatalf("exec: %+v %v", res, err)
				}
				b.StopTimer()
				_ = inst.Destroy(context.Background())
				b.StartTimer()
			}
			medianMS(b, ds)
		})
	}
}

// BenchmarkMicroVMPooledCreate: a session taken from the session
// Manager's warm pool (a booted machine) to the end of its first exec.
func BenchmarkMicroVMPooledCreate(b *testing.B) {
	bes, _, store := backendsAndStore(b)
	ctx := context.Background()
	hits := &poolEvents{}
	m, err := session.New(ctx, session.Options{Backends: map[string]sandbox.Backend{"microvm": bes["microvm"]}, Images: store,
		Pools: []session.PoolSpec{{Backend: "microvm", Image: "python", Size: 1}}, Observer: hits})
	if err != nil {
		b.Fatal(err)
	}
	defer m.Close(context.Background())
	var ds []time.Duration
	for len(ds) < b.N {
		b.StopTimer()
		time.Sleep(time.Second) // the refill boots a machine meanwhile
		b.StartTimer()
		t0 := time.Now()
		s, err := m.Create(ctx, session.CreateOptions{Backend: "microvm", Image: "python"})
		if err != nil {
			b.Fatal(err)
		}
		res, err := s.Exec(ctx, sandbox.ProcessSpec{Cmd: []string{"/bin/true"}})
		d := time.Since(t0)
		if err != nil || res.ExitCode != 0 {
			b.Fatalf("exec: %+v %v", res, err)
		}
		if hits.lastHit() {
			ds = append(ds, d) // a miss booted a machine: not what is measured
		}
		b.StopTimer()
		_ = s.Destroy(ctx)
		b.StartTimer()
	}
	medianMS(b, ds)
}

// poolEvents remembers whether the last Create was a pool hit.
type poolEvents struct {
	mu  sync.Mutex
	hit bool
}

func (p *poolEvents) Event(e session.Event) {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch e.Kind {
	case session.EventPoolHit:
		p.hit = true
	case session.EventPoolMiss:
		p.hit = false
	}
}

func (p *poolEvents) lastHit() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.hit
}

// BenchmarkMicroVMExecRoundTrip: one exec of /bin/true in a running
// sandbox, start to Result.
func BenchmarkMicroVMExecRoundTrip(b *testing.B) {
	bes, img := backends(b)
	for _, name := range []string{"native", "microvm"} {
		be := bes[name]
		b.Run(name, func(b *testing.B) {
			inst, err := be.Create(context.Background(), sandbox.Spec{Image: img, Policy: policy(b)})
			if err != nil {
				b.Fatal(err)
			}
			defer inst.Destroy(context.Background())
			var ds []time.Duration
			b.ResetTimer()
			for range b.N {
				t0 := time.Now()
				res, err := sandbox.Exec(context.Background(), inst, sandbox.ProcessSpec{Cmd: []string{"/bin/true"}})
				ds = append(ds, time.Since(t0))
				if err != nil || res.ExitCode != 0 {
					b.Fatalf("exec: %+v %v", res, err)
				}
			}
			medianMS(b, ds)
		})
	}
}

// BenchmarkMicroVMIdleMemory: what one idle sandbox holds on the host,
// two seconds after its first exec: the resident and proportional set
// sizes of the QEMU process (microvm) or of the sandbox's processes
// (native: its init), in MiB.
func BenchmarkMicroVMIdleMemory(b *testing.B) {
	bes, img := backends(b)
	for _, name := range []string{"native", "microvm"} {
		be := bes[name]
		b.Run(name, func(b *testing.B) {
			var rss, pss float64
			for range b.N {
				before := pidSet()
				inst, err := be.Create(context.Background(), sandbox.Spec{Image: img, Policy: policy(b)})
				if err != nil {
					b.Fatal(err)
				}
				if _, err := sandbox.Exec(context.Background(), inst, sandbox.ProcessSpec{Cmd: []string{"/bin/true"}}); err != nil {
					b.Fatal(err)
				}
				time.Sleep(2 * time.Second)
				r, p := 0.0, 0.0
				for pid := range pidSet() {
					if !before[pid] && isOurs(pid) {
						pr, pp := rollup(pid)
						r, p = r+pr, p+pp
					}
				}
				rss, pss = rss+r, pss+p
				_ = inst.Destroy(context.Background())
			}
			b.ReportMetric(rss/float64(b.N), "MiB-rss")
			b.ReportMetric(pss/float64(b.N), "MiB-pss")
		})
	}
}

// pidSet lists the host's processes.
func pidSet() map[int]bool {
	out := map[int]bool{}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		if pid, err := strconv.Atoi(e.Name()); err == nil {
			out[pid] = true
		}
	}
	return out
}

// isOurs tells a sandbox's host process: a QEMU machine or a native init.
func isOurs(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	s := string(b)
	return err == nil && (strings.Contains(s, "airlock-microvm-") || strings.HasPrefix(s, "airlock-sandbox-init"))
}

// rollup reads a process's Rss and Pss in MiB.
func rollup(pid int) (float64, float64) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/smaps_rollup", pid))
	if err != nil {
		return 0, 0
	}
	var rss, pss float64
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Fields(l)
		if len(f) >= 2 {
			v, _ := strconv.ParseFloat(f[1], 64)
			switch f[0] {
			case "Rss:":
				rss = v / 1024
			case "Pss:":
				pss = v / 1024
			}
		}
	}
	return rss, pss
}
