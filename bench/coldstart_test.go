package bench_test

import (
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/bench"
	"github.com/airlock-sandbox/airlock/internal/testenv"
)

// The binary is built once per test process, whatever number of times the
// benchmark function runs, and removed when the process ends.
var (
	setupOnce sync.Once
	setup     *bench.Setup
	setupErr  error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if setup != nil {
		if err := setup.Close(); err != nil {
			fmt.Fprintln(os.Stderr, "bench: removing the built binary:", err)
			code = 1
		}
	}
	os.Exit(code)
}

func prepared(b *testing.B) *bench.Setup {
	setupOnce.Do(func() {
		root, err := bench.ModuleRoot(".")
		if err != nil {
			setupErr = err
			return
		}
		setup, setupErr = bench.Prepare(root)
	})
	if setupErr != nil {
		b.Fatal(setupErr)
	}
	return setup
}

// BenchmarkColdStart times `airlock run -- /bin/true` as a whole process
// against bwrap, unshare and a bare /bin/true, interleaved, b.N runs each.
// It reports each command's median and p90 in ms and the ratio of
// airlock's median to bwrap's ("airlock/bwrap"); ns/op is one round of the
// four and means little. Use a fixed count:
//
//	go test -run '^$' -bench ColdStart -benchtime 200x ./bench
func BenchmarkColdStart(b *testing.B) {
	s := prepared(b)
	cmds, err := bench.Standard(s.Tmp, s.Bin, s.Static)
	testenv.Require(b, "bubblewrap and unshare", err)
	r := &bench.Runner{}
	b.Cleanup(func() {
		// a sandbox's init dies with its airlock, but the kernel may take
		// a moment to finish it
		var left []string
		for deadline := time.Now().Add(2 * time.Second); ; time.Sleep(10 * time.Millisecond) {
			if left = r.Leftovers(s.Tmp, s.Bin, s.Static); len(left) == 0 || time.Now().After(deadline) {
				break
			}
		}
		for _, l := range left {
			b.Errorf("left behind: %s", l)
		}
	})
	if _, err := r.Once(cmds[0]); err != nil {
		testenv.Require(b, "a host where `airlock run` works (root, or user namespaces and a delegated cgroup)", err)
	}
	b.ResetTimer()
	stats, err := r.Interleave(cmds, b.N, bench.Bwrap)
	if err != nil {
		b.Fatal(err)
	}
	b.StopTimer()
	for _, st := range stats {
		b.ReportMetric(bench.Ms(st.Median), st.Name+"-ms")
		b.ReportMetric(bench.Ms(st.P90), st.Name+"-p90-ms")
	}
	b.ReportMetric(stats[0].RatioToMedian, "airlock/bwrap")
	b.ReportMetric(stats[1].RatioToMedian, "airlock-static/bwrap")
	if b.N > 1 {
		b.Logf("n=%d each, interleaved\n%s", b.N, bench.Table(stats, bench.Bwrap))
	}
}
