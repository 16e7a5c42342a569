package interp_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/interp"
	"github.com/airlock-sandbox/airlock/sandbox"
)

// The benchmarks report medians next to Go's mean:
//
//	go test -run '^$' -bench . -benchtime 200x ./interp          (round trips)
//	go test -run '^$' -bench 'Describe|Memory' -benchtime 10x ./interp
//
// with AIRLOCK_HOME set to the store of the python image.

func median(d []time.Duration) float64 {
	sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
	return float64(d[len(d)/2].Microseconds()) / 1000
}

// BenchmarkRoundTrip: one trivial call (`1`, `echo 1`) in a started
// context, from Run to its end event.
func BenchmarkRoundTrip(b *testing.B) {
	for _, tc := range []struct {
		name, code string
		image      func(testing.TB) sandbox.Image
		opts       interp.Options
	}{
		{"python-stdlib", "1", func(testing.TB) sandbox.Image { return sandbox.HostImage() }, interp.Options{}},
		{"python-ipython", "1", pythonImage, interp.Options{}},
		{"bash", "echo 1", func(testing.TB) sandbox.Image { return sandbox.HostImage() }, interp.Options{Language: interp.Bash}},
		{"javascript", "1", func(testing.TB) sandbox.Image { return sandbox.HostImage() }, interp.Options{Language: interp.JavaScript}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			c := start(b, newSandbox(b, tc.image(b), nil), tc.opts)
			ctx := context.Background()
			for i := 0; i < 20; i++ { // warm up
				if _, err := c.Run(ctx, tc.code, time.Minute, nil); err != nil {
					b.Fatal(err)
				}
			}
			var d []time.Duration
			for b.Loop() {
				t0 := time.Now()
				x, err := c.Run(ctx, tc.code, time.Minute, nil)
				d = append(d, time.Since(t0))
				if err != nil || x.Error != nil {
					b.Fatalf("%v %+v", err, x.Error)
				}
			}
			b.ReportMetric(median(d), "median-ms")
		})
	}
}

const (
	dataPreload  = "import pandas as pd, numpy as np, matplotlib.pyplot as plt, openpyxl"
	describeCell = "df = pd.DataFrame(np.random.default_rng(1).random((1000, 5)), columns=list('abcde'))\ndf.describe()"
)

// BenchmarkDescribe: the first df.describe() of a context started ahead
// with pandas, numpy and matplotlib preloaded (timed: the call), against
// the same work done cold, python3 -c in a fresh sandbox (timed: create
// the sandbox, run, until the command ended).
func BenchmarkDescribe(b *testing.B) {
	img := pythonImage(b)
	ctx := context.Background()
	b.Run("warm-context", func(b *testing.B) {
		var d []time.Duration
		for b.Loop() {
			b.StopTimer()
			inst := newSandbox(b, img, nil)
			c := start(b, inst, interp.Options{Preload: dataPreload})
			b.StartTimer()
			t0 := time.Now()
			x, err := c.Run(ctx, describeCell, time.Minute, nil)
			d = append(d, time.Since(t0))
			if err != nil || x.Error != nil || !strings.Contains(text(x), "count") {
				b.Fatalf("%v %+v %q", err, x.Error, text(x))
			}
		}
		b.ReportMetric(median(d), "median-ms")
	})
	b.Run("cold-sandbox", func(b *testing.B) {
		p, err := sandbox.Policy{}.Normalize()
		if err != nil {
			b.Fatal(err)
		}
		code := dataPreload + "\n" + strings.Replace(describeCell, "df.describe()", "print(df.describe())", 1)
		var d []time.Duration
		for b.Loop() {
			t0 := time.Now()
			inst, err := nativeBackend(b).Create(ctx, sandbox.Spec{Image: img, Policy: p})
			if err != nil {
				b.Fatal(err)
			}
			res, err := sandbox.Exec(ctx, inst, sandbox.ProcessSpec{Cmd: []string{"python3", "-c", code}})
			d = append(d, time.Since(t0))
			b.StopTimer()
			if derr := inst.Destroy(ctx); err == nil {
				err = derr
			}
			b.StartTimer()
			if err != nil || res.ExitCode != 0 || !strings.Contains(res.Stdout, "count") {
				b.Fatalf("%v exit %d: %s", err, res.ExitCode, res.Stderr)
			}
		}
		b.ReportMetric(median(d), "median-ms")
	})
}

// BenchmarkIdleMemory reports the memory of an idle context's runner, as
// the host sees it: RSS and PSS from /proc/PID/smaps_rollup, the runner
// found by the context's token on its command line (the runner is
// `python3 -c <source> airlock-interp <config>`, the config naming the
// token in its FIFO paths). For bash and node it adds the kernel, the
// runner's child. The relay (cat) is listed apart.
func BenchmarkIdleMemory(b *testing.B) {
	for _, tc := range []struct {
		name  string
		image func(testing.TB) sandbox.Image
		opts  interp.Options
	}{
		{"python-ipython-preloaded", pythonImage, interp.Options{Preload: dataPreload}},
		{"python-stdlib-preloaded", pythonImage, interp.Options{Runner: "stdlib", Preload: dataPreload}},
		{"python-ipython", pythonImage, interp.Options{}},
		{"python-stdlib-host", func(testing.TB) sandbox.Image { return sandbox.HostImage() }, interp.Options{}},
		{"bash", func(testing.TB) sandbox.Image { return sandbox.HostImage() }, interp.Options{Language: interp.Bash}},
		{"javascript", func(testing.TB) sandbox.Image { return sandbox.HostImage() }, interp.Options{Language: interp.JavaScript}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			var rss, pss, relay float64
			for b.Loop() {
				b.StopTimer()
				c := start(b, newSandbox(b, tc.image(b), nil), tc.opts)
				if _, err := c.Run(context.Background(), "1", time.Minute, nil); err != nil {
					b.Fatal(err)
				}
				time.Sleep(200 * time.Millisecond)
				runner := findRunner(b, c.Token())
				r, p := 0.0, 0.0
				for _, pid := range append([]int{runner}, children(runner)...) {
					rr, pp := smapsRollup(b, pid)
					r, p = r+rr, p+pp
				}
				rss, pss = rss+r, pss+p
				for _, pid := range findRelays(c.Token()) {
					_, pp := smapsRollup(b, pid)
					relay += pp
				}
				if err := c.Close(context.Background()); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
			n := float64(b.N)
			b.ReportMetric(rss/n, "rss-MiB")
			b.ReportMetric(pss/n, "pss-MiB")
			b.ReportMetric(relay/n, "relay-pss-MiB")
		})
	}
}

// findRunner scans the host's /proc for the runner whose command line
// holds token.
func findRunner(t testing.TB, token string) int {
	t.Helper()
	for _, pid := range pids() {
		cmd := cmdline(pid)
		if strings.Contains(cmd, "airlock-interp\x00") && strings.Contains(cmd, token) && strings.HasPrefix(cmd, "python3\x00-c\x00") {
			return pid
		}
	}
	t.Fatalf("no runner with token %s in /proc", token)
	return 0
}

func findRelays(token string) []int {
	var out []int
	for _, pid := range pids() {
		cmd := cmdline(pid)
		if strings.HasPrefix(cmd, "cat\x00") && strings.Contains(cmd, token) {
			out = append(out, pid)
		}
	}
	return out
}

func pids() []int {
	ents, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range ents {
		if pid, err := strconv.Atoi(e.Name()); err == nil {
			out = append(out, pid)
		}
	}
	return out
}

func cmdline(pid int) string {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	return string(b)
}

func children(pid int) []int {
	var out []int
	tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", pid))
	for _, f := range tasks {
		b, _ := os.ReadFile(f)
		for _, s := range strings.Fields(string(b)) {
			if c, err := strconv.Atoi(s); err == nil {
				out = append(out, c)
			}
		}
	}
	return out
}

// smapsRollup reads a process's Rss and Pss in MiB.
func smapsRollup(t testing.TB, pid int) (rss, pss float64) {
	t.Helper()
	f, err := os.Open(fmt.Sprintf("/proc/%d/smaps_rollup", pid))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		fs := strings.Fields(s.Text())
		if len(fs) < 2 {
			continue
		}
		kb, _ := strconv.ParseFloat(fs[1], 64)
		switch fs[0] {
		case "Rss:":
			rss = kb / 1024
		case "Pss:":
			pss = kb / 1024
		}
	}
	return rss, pss
}
