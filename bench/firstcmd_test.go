package bench_test

import (
	"context"
	"testing"

	"github.com/airlock-sandbox/airlock/backend/native"
	"github.com/airlock-sandbox/airlock/bench"
	"github.com/airlock-sandbox/airlock/client"
	"github.com/airlock-sandbox/airlock/internal/testenv"
	"github.com/airlock-sandbox/airlock/sandbox"
	"github.com/airlock-sandbox/airlock/session"
)

// BenchmarkFirstCommand times, sequentially, the create call until `node
// -v` has returned its output, through a session Manager in process and
// through airlock serve's HTTP API, both without a warm pool; ns/op is
// one such run. go run ./bench/cmd/firstcmd prints the whole table
// (bursts, warm pools).
//
//	go test -run '^$' -bench FirstCommand -benchtime 100x ./bench
func BenchmarkFirstCommand(b *testing.B) {
	testenv.Require(b, "root: the benchmark runs native sandboxes as root here", testenv.Root())
	b.Run("manager", func(b *testing.B) {
		m, err := session.New(context.Background(), session.Options{Backends: map[string]sandbox.Backend{"native": native.New(native.Options{})}})
		if err != nil {
			b.Fatal(err)
		}
		defer m.Close(context.Background())
		run(b, bench.ManagerTarget{M: m})
	})
	b.Run("serve", func(b *testing.B) {
		s := prepared(b)
		srv, err := bench.StartServer(s.Bin)
		if err != nil {
			b.Fatal(err)
		}
		defer srv.Stop()
		c, err := client.New(srv.URL, client.Options{})
		if err != nil {
			b.Fatal(err)
		}
		defer c.Close()
		run(b, bench.HTTPTarget{C: c})
	})
}

func run(b *testing.B, t bench.FirstCommand) {
	if _, err := t.Once(context.Background()); err != nil {
		testenv.Require(b, "node in the host image", err)
	}
	b.ResetTimer()
	ds, err := bench.Sequential(context.Background(), t, b.N)
	if err != nil {
		b.Fatal(err)
	}
	st := bench.Summarize("first command", ds)
	b.ReportMetric(bench.Ms(st.Median), "median-ms")
	b.ReportMetric(bench.Ms(st.P90), "p90-ms")
}
