package testenv

import (
	"sort"
	"testing"
	"time"
)

// Median runs fn b.N times, failing b on its first error, and reports the
// median of its durations as median-ms beside Go's mean; settle, when not
// nil, runs before each call, off the clock (a pool's refill, say).
func Median(b *testing.B, fn func() error, settle func()) {
	b.Helper()
	d := make([]time.Duration, 0, b.N)
	b.StopTimer()
	for range b.N {
		if settle != nil {
			settle()
		}
		t0 := time.Now()
		b.StartTimer()
		err := fn()
		b.StopTimer()
		d = append(d, time.Since(t0))
		if err != nil {
			b.Fatal(err)
		}
	}
	sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
	b.ReportMetric(float64(d[len(d)/2].Microseconds())/1000, "median-ms")
}
