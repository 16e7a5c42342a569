package audit_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/audit"
)

// BenchmarkAppend measures what an exec's record costs: one Append of one
// record, returning once it is written to the operating system (the
// default) or synced to the disk (Fsync), from one caller at a time
// (serial) or from many (parallel, where group commits share the cost).
// The database lives in the test's temporary folder, so put TMPDIR on the
// disk to measure.
func BenchmarkAppend(b *testing.B) {
	rec := api.AuditRecord{Tenant: "alice", Kind: "exec", Session: "0123456789abcdef0123456789abcdef", Backend: "native",
		What: "python3 -c 'import pandas as pd; print(pd.read_csv(\"/workspace/input/sales.csv\").describe())'", DurationMS: 812.5, Bytes: 2048}
	for _, mode := range []struct {
		name  string
		fsync bool
	}{{"written", false}, {"fsync", true}} {
		open := func(b *testing.B) *audit.SQLite {
			s, err := audit.OpenSQLite(context.Background(), filepath.Join(b.TempDir(), "audit.db"), audit.Options{Fsync: mode.fsync})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { s.Close() })
			return s
		}
		b.Run(mode.name+"/serial", func(b *testing.B) {
			s := open(b)
			for b.Loop() {
				if err := s.Append(context.Background(), rec); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(mode.name+"/parallel", func(b *testing.B) {
			s := open(b)
			b.SetParallelism(8)
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if err := s.Append(context.Background(), rec); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}
