package e2b_test

import (
	"bufio"
	"encoding/json"
	"strings"
	"testing"
)

// BenchmarkSDK runs bench.mjs once: Sandbox.create() + commands.run('node
// -v') through the official E2B SDK beside the same through the v1 API,
// sequential and in a burst, BENCH_N of each (100 by default), on one
// server. It reports each series' median as a metric and logs the table.
//
//	go test -run '^$' -bench BenchmarkSDK -benchtime 1x ./e2b/
func BenchmarkSDK(b *testing.B) {
	ts := startServer(b, backends()[0], serverOptions{rateLimit: 10000, rateBurst: 10000, maxSessions: 512})
	for range b.N {
		out, stderr, err := node(b, ts, "bench.mjs")
		if err != nil {
			b.Fatalf("bench.mjs: %v\n%s\n%s", err, out, stderr)
		}
		sc := bufio.NewScanner(strings.NewReader(out))
		for sc.Scan() {
			line := sc.Text()
			var r struct {
				Series string  `json:"series"`
				P50    float64 `json:"p50"`
				Wall   float64 `json:"wall"`
			}
			if strings.HasPrefix(line, "{") && json.Unmarshal([]byte(line), &r) == nil {
				unit := strings.ReplaceAll(r.Series, " ", "-")
				b.ReportMetric(r.P50, unit+"-p50-ms")
				b.ReportMetric(r.Wall/1000, unit+"-wall-s")
			}
			if strings.HasPrefix(line, "|") {
				b.Log(line)
			}
		}
	}
}
