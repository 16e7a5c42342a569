package artifact

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/airlock-sandbox/airlock/sandbox"
)

// benchTrees writes the two folders of the benchmark: 1,000 small files of
// the kinds data work leaves (CSV, JSON, Markdown, SVG) in 10 folders, and
// one CSV of 100 MB with numbers, text and one formula cell in 50.
func benchTrees(b *testing.B) (small, big string) {
	base := b.TempDir()
	small, big = filepath.Join(base, "small"), filepath.Join(base, "big")
	kinds := []struct{ ext, body string }{
		{"csv", "id,name,value\n1,alpha,-3.5\n2,beta,42\n3,gamma,1e5\n"},
		{"json", `{"id": 1, "name": "alpha", "values": [1, 2, 3]}` + "\n"},
		{"md", "# Result\n\nThe mean is **4.2**.\n"},
		{"svg", `<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 10 10"><rect width="5" height="5" fill="#36c"/></svg>`},
	}
	for i := range 1000 {
		k := kinds[i%len(kinds)]
		dir := filepath.Join(small, fmt.Sprintf("part%d", i%10))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			b.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("f%04d.%s", i, k.ext)), []byte(k.body), 0o644); err != nil {
			b.Fatal(err)
		}
	}
	if err := os.MkdirAll(big, 0o755); err != nil {
		b.Fatal(err)
	}
	f, err := os.Create(filepath.Join(big, "table.csv"))
	if err != nil {
		b.Fatal(err)
	}
	w := bufio.NewWriter(f)
	for i := 0; w.Buffered()+int(mustSize(b, f)) < 100<<20; i++ {
		cell := fmt.Sprint(i % 977)
		if i%50 == 0 {
			cell = "=SUM(A1:A3)"
		}
		fmt.Fprintf(w, "%d,\"name %d, with comma\",%d.25,-%d,%s\n", i, i, i%1000, i%313, cell)
	}
	if err := w.Flush(); err != nil {
		b.Fatal(err)
	}
	f.Close()
	return small, big
}

// mustSize returns the size of an open file.
func mustSize(b *testing.B, f *os.File) int64 {
	fi, err := f.Stat()
	if err != nil {
		b.Fatal(err)
	}
	return fi.Size()
}

// treeBytes sums the sizes of the regular files under dir.
func treeBytes(b *testing.B, dir string) int64 {
	var n int64
	filepath.Walk(dir, func(_ string, fi os.FileInfo, err error) error {
		if err == nil && fi.Mode().IsRegular() {
			n += fi.Size()
		}
		return err
	})
	return n
}

// BenchmarkCollect compares Collect with a plain cp -r of the same folder,
// in the same run, as the baseline; both write to a fresh folder on the
// same file system.
func BenchmarkCollect(b *testing.B) {
	small, big := benchTrees(b)
	p := Normalize(sandbox.ArtifactPolicy{})
	out := b.TempDir()
	for _, tree := range []struct{ name, dir string }{{"1000-small-files", small}, {"csv-100MB", big}} {
		size := treeBytes(b, tree.dir)
		run := func(b *testing.B, copyTree func(dst string) error) {
			b.SetBytes(size)
			for i := 0; i < b.N; i++ {
				dst := filepath.Join(out, fmt.Sprint(i))
				if err := copyTree(dst); err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				if err := os.RemoveAll(dst); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
		}
		b.Run(tree.name+"/cp-r", func(b *testing.B) {
			run(b, func(dst string) error { return exec.Command("cp", "-r", tree.dir, dst).Run() })
		})
		b.Run(tree.name+"/collect", func(b *testing.B) {
			run(b, func(dst string) error {
				src, err := os.Open(tree.dir)
				if err != nil {
					return err
				}
				defer src.Close()
				arts, err := Collect(b.Context(), src, dst, p)
				if err == nil && len(arts) == 0 {
					err = fmt.Errorf("no artifacts")
				}
				for _, a := range arts {
					if a.Verdict == sandbox.VerdictRejected {
						return fmt.Errorf("%s rejected: %s", a.Path, a.Reason)
					}
				}
				return err
			})
		})
	}
}
