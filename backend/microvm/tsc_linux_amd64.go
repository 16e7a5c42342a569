package microvm

import (
	"sort"
	"time"
)

// rdtsc reads the time stamp counter.
func rdtsc() uint64

// tscKHz measures the host's time stamp counter against the monotonic
// clock, or returns 0 when it cannot. Under TCG the guest's rdtsc reads
// the host's counter, so the guest kernel is told this rate
// (tsc_early_khz) rather than calibrating its clock against the PIT,
// which fails on a loaded host and leaves it waiting for timer
// interrupts. Each sample brackets one rdtsc between two clock reads and
// keeps the tightest; the median of three runs of 20 ms is returned.
func tscKHz() uint64 {
	sample := func() (uint64, time.Time) {
		best := time.Duration(1 << 62)
		var tsc uint64
		var at time.Time
		for range 50 {
			a := time.Now()
			c := rdtsc()
			b := time.Now()
			if d := b.Sub(a); d < best {
				best, tsc, at = d, c, a.Add(d/2)
			}
		}
		return tsc, at
	}
	var rates []uint64
	for range 3 {
		c0, t0 := sample()
		time.Sleep(20 * time.Millisecond)
		c1, t1 := sample()
		ns := t1.Sub(t0).Nanoseconds()
		if ns <= 0 || c1 <= c0 {
			return 0
		}
		rates = append(rates, (c1-c0)*1e6/uint64(ns))
	}
	sort.Slice(rates, func(i, j int) bool { return rates[i] < rates[j] })
	return rates[1]
}
