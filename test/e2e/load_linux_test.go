package e2e_test

import (
	"fmt"
	"os"
	"runtime"
	"sort"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/client"
	"github.com/airlock-sandbox/airlock/internal/leakcheck"
	"github.com/airlock-sandbox/airlock/internal/testenv"
	"github.com/airlock-sandbox/airlock/sandbox"
)

// Bounds of the load test.
const (
	loadSessions = 100
	loadCalls    = 20
	loadWall     = 4 * time.Minute
)

// TestLoad drives one server on loopback with 100 sessions at once, each
// making 20 exec calls of a trivial command through HTTP (the SDK), and
// wants no error at all, and nothing left after: no sandbox, no goroutine
// of the test, no descriptor of the test or the server. It reports p50
// and p99 per call. It is bounded in wall time (4 min); -short skips it,
// except under CI.
func TestLoad(t *testing.T) {
	if testing.Short() && !testenv.CI() {
		t.Skip("skipped with -short: 100 sessions × 20 calls take a minute on two cores (run without -short, as CI does)")
	}
	s := startServer(t, serverConfig{args: []string{"--rate", "100000", "--rate-burst", "100000", "--tenant-sessions", "200", "--tenant-cpus", "200"}})
	cx := ctx(t, loadWall)
	goroutines, fds, serverFDs := runtime.NumGoroutine(), countFDs("self"), countFDs(strconv.Itoa(s.pid))
	c := s.client(t, keyA, client.Options{})
	pol := &sandbox.Policy{Limits: sandbox.Limits{MemoryBytes: 64 << 20}}
	var mu sync.Mutex
	var creates, calls, deletes []time.Duration
	var errs []error
	record := func(list *[]time.Duration, d time.Duration, err error) {
		mu.Lock()
		defer mu.Unlock()
		if err != nil {
			errs = append(errs, err)
			return
		}
		*list = append(*list, d)
	}
	start := time.Now()
	var wg sync.WaitGroup
	for i := 0; i < loadSessions; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			t0 := time.Now()
			sess, err := c.CreateSession(cx, api.CreateSession{Policy: pol})
			record(&creates, time.Since(t0), err)
			if err != nil {
				return
			}
			for j := 0; j < loadCalls; j++ {
				t0 := time.Now()
				res, err := c.Exec(cx, sess.ID, api.Exec{Cmd: []string{"true"}})
				if err == nil && res.ExitCode != 0 {
					err = fmt.Errorf("exec in %s: %+v", sess.ID, res)
				}
				record(&calls, time.Since(t0), err)
			}
			t0 = time.Now()
			err = c.DeleteSession(cx, sess.ID)
			record(&deletes, time.Since(t0), err)
		}()
	}
	wg.Wait()
	wall := time.Since(start)
	for i, err := range errs {
		if i == 5 {
			t.Errorf("… %d errors in all", len(errs))
			break
		}
		t.Errorf("error: %v", err)
	}
	if cx.Err() != nil {
		t.Fatalf("the load did not finish within %v", loadWall)
	}
	t.Logf("%d sessions × %d exec calls at once, in %.1f s (%.0f calls/s):", loadSessions, loadCalls, wall.Seconds(), float64(len(calls))/wall.Seconds())
	for _, l := range []struct {
		name string
		ds   []time.Duration
	}{{"create", creates}, {"exec true", calls}, {"delete", deletes}} {
		t.Logf("  %-9s n=%4d  p50 %7.1f ms  p99 %7.1f ms  max %7.1f ms", l.name, len(l.ds), ms(pct(l.ds, 50)), ms(pct(l.ds, 99)), ms(pct(l.ds, 100)))
	}
	if len(calls) != loadSessions*loadCalls {
		t.Errorf("%d calls answered, want %d", len(calls), loadSessions*loadCalls)
	}
	c.Close()
	var left []string
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		left = left[:0]
		if n := runtime.NumGoroutine(); n > goroutines+2 {
			left = append(left, fmt.Sprintf("%d goroutines in the test, %d before", n, goroutines))
		}
		if n := countFDs("self"); n > fds {
			left = append(left, fmt.Sprintf("%d descriptors in the test, %d before", n, fds))
		}
		if n := countFDs(strconv.Itoa(s.pid)); n > serverFDs+2 {
			left = append(left, fmt.Sprintf("%d descriptors in the server, %d before", n, serverFDs))
		}
		if inits := leakcheck.Inits(s.pid); len(inits) > 0 {
			left = append(left, fmt.Sprintf("%d sandboxes", len(inits)))
		}
		if l := leftovers(s.pid, ""); len(l) > 0 {
			left = append(left, l...)
		}
		if len(left) == 0 || time.Now().After(deadline) {
			break
		}
	}
	for _, l := range left {
		t.Errorf("left after the load: %s", l)
	}
}

func countFDs(pid string) int {
	ents, _ := os.ReadDir("/proc/" + pid + "/fd")
	return len(ents)
}

// pct is the nearest-rank p-th percentile of ds.
func pct(ds []time.Duration, p int) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	rank := (len(s)*p + 99) / 100
	return s[max(rank, 1)-1]
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
