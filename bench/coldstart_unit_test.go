package bench

import (
	"slices"
	"testing"
	"time"
)

func TestSummarize(t *testing.T) {
	ms := func(v ...int) []time.Duration {
		out := make([]time.Duration, len(v))
		for i, x := range v {
			out[i] = time.Duration(x) * time.Millisecond
		}
		return out
	}
	for _, c := range []struct {
		in               []time.Duration
		median, p90, max time.Duration
	}{
		{ms(5), 5 * time.Millisecond, 5 * time.Millisecond, 5 * time.Millisecond},
		{ms(4, 1, 3, 2), 2500 * time.Microsecond, 4 * time.Millisecond, 4 * time.Millisecond},
		{ms(10, 9, 8, 7, 6, 5, 4, 3, 2, 1), 5500 * time.Microsecond, 9 * time.Millisecond, 10 * time.Millisecond},
		{ms(1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11), 6 * time.Millisecond, 10 * time.Millisecond, 11 * time.Millisecond},
	} {
		s := Summarize("x", c.in)
		if s.Median != c.median || s.P90 != c.p90 || s.Max != c.max || !slices.IsSorted(s.Samples) {
			t.Errorf("Summarize(%v) = median %v p90 %v max %v, want %v %v %v", c.in, s.Median, s.P90, s.Max, c.median, c.p90, c.max)
		}
	}
}

func TestBwrapArgsBindUsr(t *testing.T) {
	a := BwrapArgs()
	if len(a) < 3 || a[0] != "--ro-bind" || a[1] != "/usr" || a[2] != "/usr" {
		t.Errorf("BwrapArgs() = %v, want /usr bound read-only first", a)
	}
	if !slices.Contains(a, "--unshare-all") || !slices.Contains(a, "--die-with-parent") {
		t.Errorf("BwrapArgs() = %v", a)
	}
}
