// Command firstcmd times the independent sandbox benchmarks' measure on
// airlock: from the create call until `node -v` has returned its output,
// 100 times one after the other and in a burst of 100 at once; through
// airlock serve's HTTP API (the Go SDK) on the native backend, with and
// without a warm pool, and beside it, in the same run, through a session
// Manager in this process, so that the cost of HTTP shows. It prints a
// table of medians and p90s, with the hosted sandboxes' published medians
// and this project's targets.
//
//	go run ./bench/cmd/firstcmd -n 100 -pool 100     (as root)
//
// The server is ./cmd/airlock, built for the run, or AIRLOCK_BIN.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/airlock-sandbox/airlock/backend/native"
	"github.com/airlock-sandbox/airlock/bench"
	"github.com/airlock-sandbox/airlock/client"
	"github.com/airlock-sandbox/airlock/sandbox"
	"github.com/airlock-sandbox/airlock/session"
)

func main() {
	n := flag.Int("n", 100, "measures per mode (sequential, and the size of the burst)")
	pool := flag.Int("pool", 100, "size of the warm pool of the pooled runs")
	warm := flag.Int("warmup", 3, "untimed runs of each target first")
	flag.Parse()
	if err := run(*n, *pool, *warm); err != nil {
		fmt.Fprintln(os.Stderr, "firstcmd:", err)
		os.Exit(1)
	}
}

// row is one line of the table.
type row struct {
	path, pool string
	seq, burst bench.Stats
}

func run(n, poolSize, warm int) error {
	ctx := context.Background()
	bin := os.Getenv("AIRLOCK_BIN")
	if bin == "" {
		root, err := bench.ModuleRoot(".")
		if err != nil {
			return err
		}
		dir, err := os.MkdirTemp("", "airlock-firstcmd-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		if bin, err = bench.Build(root, dir, "airlock"); err != nil {
			return err
		}
	}
	var rows []row
	measure := func(path, pool string, t bench.FirstCommand, refill func() error) error {
		for range warm {
			if _, err := t.Once(ctx); err != nil {
				return fmt.Errorf("%s: warm-up: %w", path, err)
			}
		}
		if err := refill(); err != nil {
			return err
		}
		seq, err := bench.Sequential(ctx, t, n)
		if err != nil {
			return fmt.Errorf("%s, sequential: %w", path, err)
		}
		if err := refill(); err != nil {
			return err
		}
		burst, err := bench.Burst(ctx, t, n)
		if err != nil {
			return fmt.Errorf("%s, burst: %w", path, err)
		}
		rows = append(rows, row{path: path, pool: pool, seq: bench.Summarize("seq", seq), burst: bench.Summarize("burst", burst)})
		fmt.Fprintf(os.Stderr, "%-28s %-9s sequential %7.1f ms, burst %7.1f ms\n", path, pool, bench.Ms(rows[len(rows)-1].seq.Median), bench.Ms(rows[len(rows)-1].burst.Median))
		return nil
	}
	none := func() error { return nil }
	for _, size := range []int{0, poolSize} {
		args, pool := []string{}, "none"
		if size > 0 {
			args, pool = []string{"--pool", "native:host=" + strconv.Itoa(size)}, "native:host="+strconv.Itoa(size)
		}
		srv, err := bench.StartServer(bin, args...)
		if err != nil {
			return err
		}
		c, err := client.New(srv.URL, client.Options{})
		if err != nil {
			return err
		}
		refill := none
		if size > 0 {
			refill = func() error {
				return bench.WaitFor(5*time.Minute, func() bool { return bench.Sandboxes(srv.Pid()) >= size })
			}
		}
		err = measure("airlock serve (HTTP, SDK)", pool, bench.HTTPTarget{C: c}, refill)
		c.Close()
		if serr := srv.Stop(); err == nil && serr != nil {
			err = fmt.Errorf("stopping the server: %w", serr)
		}
		if err != nil {
			return err
		}
		opts := session.Options{Backends: map[string]sandbox.Backend{"native": native.New(native.Options{})}, MaxSessions: 4 * n}
		if size > 0 {
			opts.Pools = []session.PoolSpec{{Backend: "native", Image: "host", Size: size}}
		}
		m, err := session.New(ctx, opts)
		if err != nil {
			return err
		}
		refill = none
		if size > 0 {
			refill = func() error {
				return bench.WaitFor(5*time.Minute, func() bool { return m.PoolReady() >= size })
			}
		}
		err = measure("session Manager (in process)", pool, bench.ManagerTarget{M: m}, refill)
		if cerr := m.Close(ctx); err == nil && cerr != nil {
			err = cerr
		}
		if err != nil {
			return err
		}
	}
	fmt.Printf("time from the create call until `node -v` has returned its output; n=%d sequential, and a burst of %d at once\n\n", n, n)
	fmt.Printf("| path | warm pool | sequential median (p90) | burst of %d median (p90) |\n", n)
	fmt.Println("| --- | --- | --- | --- |")
	for _, r := range rows {
		fmt.Printf("| %s | %s | %.1f ms (%.1f) | %.1f ms (%.1f) |\n", r.path, r.pool, bench.Ms(r.seq.Median), bench.Ms(r.seq.P90), bench.Ms(r.burst.Median), bench.Ms(r.burst.P90))
	}
	fmt.Printf("| hosted sandboxes, published | | %s ms | %s ms |\n", join(bench.HostedSequential), join(bench.HostedBurst))
	fmt.Printf("| target here | | under %d ms | under %d ms |\n", bench.TargetSequentialMs, bench.TargetBurstMs)
	return nil
}

func join(v []float64) string {
	s := make([]string, len(v))
	for i, x := range v {
		s[i] = strconv.FormatFloat(x, 'f', -1, 64)
	}
	return strings.Join(s, ", ")
}
