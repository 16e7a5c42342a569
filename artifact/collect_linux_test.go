package artifact

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/artifact/artifacttest"
	"github.com/airlock-sandbox/airlock/internal/testenv"
	"github.com/airlock-sandbox/airlock/sandbox"
	"golang.org/x/sys/unix"
)

// needPython skips, saying why, when python3 is missing.
func needPython(t *testing.T) {
	t.Helper()
	_, err := artifacttest.Python()
	testenv.Require(t, "python3, which plants the hazards", err)
}

// openDir opens a folder for Collect.
func openDir(t *testing.T, dir string) *os.File {
	t.Helper()
	f, err := os.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

// atime returns the access time of a file in nanoseconds.
func atime(t *testing.T, p string) int64 {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Stat(p, &st); err != nil {
		t.Fatal(err)
	}
	return st.Atim.Nano()
}

func TestCollectHazardsWhileRacing(t *testing.T) {
	needPython(t)
	base := t.TempDir()
	src, canaryDir := filepath.Join(base, "out"), filepath.Join(base, "canary")
	if err := os.MkdirAll(canaryDir, 0o755); err != nil {
		t.Fatal(err)
	}
	token := []byte("CANARY-" + fmt.Sprint(time.Now().UnixNano()))
	canary := filepath.Join(canaryDir, "inner.csv")
	if err := os.WriteFile(canary, append(token, '\n'), 0o644); err != nil {
		t.Fatal(err)
	}
	// An access time older than the change time makes any read update it,
	// relatime or not.
	old := time.Date(2001, 1, 1, 0, 0, 0, 0, time.UTC)
	if err := os.Chtimes(canary, old, time.Now()); err != nil {
		t.Fatal(err)
	}
	canaryAtime := atime(t, canary)
	passwd, _ := os.ReadFile("/etc/passwd")

	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	planted, err := artifacttest.Plant(ctx, src, canary)
	if err != nil {
		t.Fatal(err)
	}
	for h, why := range planted.Skipped {
		t.Logf("hazard %q not planted here: %s", h, why)
	}
	stop, err := artifacttest.Race(ctx, src, canaryDir)
	if err != nil {
		t.Fatal(err)
	}
	defer stop() // a no-op once stopped below

	p := Normalize(sandbox.ArtifactPolicy{})
	raced := map[string]int{} // verdicts of the racing entries
	for round := range 12 {
		dst := filepath.Join(base, fmt.Sprintf("dst%d", round))
		arts, err := Collect(ctx, openDir(t, src), dst, p)
		if err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		for _, problem := range artifacttest.RoundProblems(dst, arts, planted, token, passwd) {
			t.Errorf("round %d: %s", round, problem)
		}
		for _, a := range arts {
			if strings.Contains(a.Path, "swap") {
				raced[a.Verdict+": "+a.Reason]++
			}
		}
	}
	if err := stop(); err != nil {
		t.Error(err)
	}
	t.Logf("verdicts of the racing entries in 12 rounds: %v", raced)
	if len(raced) < 2 {
		t.Errorf("the race never showed: %v", raced)
	}
	if got := atime(t, canary); got != canaryAtime {
		t.Errorf("canary was read: atime %d, was %d", got, canaryAtime)
	}
	if got, _ := os.ReadFile(canary); !bytes.Equal(got, append(token, '\n')) {
		t.Errorf("canary changed: %q", got)
	}
}

func TestCollectDecideOnlyWritesNothing(t *testing.T) {
	needPython(t)
	base := t.TempDir()
	src := filepath.Join(base, "out")
	planted, err := artifacttest.Plant(t.Context(), src, "")
	if err != nil {
		t.Fatal(err)
	}
	arts, err := Collect(t.Context(), openDir(t, src), "", Normalize(sandbox.ArtifactPolicy{}))
	if err != nil {
		t.Fatal(err)
	}
	for _, problem := range artifacttest.Problems(arts, planted) {
		t.Error(problem)
	}
	entries, _ := os.ReadDir(base)
	if len(entries) != 1 {
		t.Errorf("decide-only left files next to the source: %v", entries)
	}
	for i := 1; i < len(arts); i++ {
		if arts[i-1].Path >= arts[i].Path {
			t.Errorf("not sorted: %q before %q", arts[i-1].Path, arts[i].Path)
		}
	}
}

func TestCollectPlantedLinksInDestination(t *testing.T) {
	base := t.TempDir()
	src, dst, outside := filepath.Join(base, "src"), filepath.Join(base, "dst"), filepath.Join(base, "outside")
	for _, d := range []string{filepath.Join(src, "sub"), dst, outside} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	write := func(p, s string) {
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(filepath.Join(src, "a.csv"), "a,1\n")
	write(filepath.Join(src, "sub", "b.csv"), "b,2\n")
	write(filepath.Join(outside, "a.csv"), "host file\n")
	// With Overwrite, a link where a file goes is replaced, not followed.
	if err := os.Symlink(filepath.Join(outside, "a.csv"), filepath.Join(dst, "a.csv")); err != nil {
		t.Fatal(err)
	}
	// A link where a folder goes is refused.
	if err := os.Symlink(outside, filepath.Join(dst, "sub")); err != nil {
		t.Fatal(err)
	}
	_, err := CollectTo(t.Context(), openDir(t, src), Destination{Dir: dst, Overwrite: true}, Normalize(sandbox.ArtifactPolicy{}))
	if err == nil || !strings.Contains(err.Error(), "sub") {
		t.Fatalf("Collect = %v, want an error about the linked folder", err)
	}
	if got, _ := os.ReadFile(filepath.Join(outside, "a.csv")); string(got) != "host file\n" {
		t.Errorf("file outside changed: %q", got)
	}
	if _, err := os.Stat(filepath.Join(outside, "b.csv")); err == nil {
		t.Error("a file was written through the linked folder")
	}
	fi, err := os.Lstat(filepath.Join(dst, "a.csv"))
	if err != nil || !fi.Mode().IsRegular() {
		t.Errorf("dst/a.csv should now be a regular file: %v %v", fi, err)
	}
}

func TestCollectEntryCap(t *testing.T) {
	base := t.TempDir()
	for i := range 300 {
		if err := os.MkdirAll(filepath.Join(base, fmt.Sprintf("d%03d", i), "e"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	p := Normalize(sandbox.ArtifactPolicy{MaxFiles: 100})
	arts, err := Collect(t.Context(), openDir(t, base), "", p)
	if err != nil {
		t.Fatal(err)
	}
	if len(arts) != 1 || !strings.Contains(arts[0].Reason, "more than 100 entries") || arts[0].Path != "d050" {
		t.Fatalf("got %+v", arts)
	}
}

func TestCollectCaps(t *testing.T) {
	base := t.TempDir()
	for i := range 5 {
		if err := os.WriteFile(filepath.Join(base, fmt.Sprintf("f%d.txt", i)), bytes.Repeat([]byte("x"), 400), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	p := Normalize(sandbox.ArtifactPolicy{MaxTotalBytes: 1000})
	arts, err := Collect(t.Context(), openDir(t, base), t.TempDir(), p)
	if err != nil {
		t.Fatal(err)
	}
	var verdicts []string
	for _, a := range arts {
		verdicts = append(verdicts, a.Verdict)
	}
	if strings.Join(verdicts, ",") != "accepted,accepted,rejected,rejected,rejected" || !strings.Contains(arts[2].Reason, "in total") {
		t.Fatalf("got %+v", arts)
	}
}

func TestCheckFile(t *testing.T) {
	base := t.TempDir()
	if err := os.WriteFile(filepath.Join(base, "a.csv"), []byte("=1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/etc/passwd", filepath.Join(base, "p.csv")); err != nil {
		t.Fatal(err)
	}
	root := openDir(t, base)
	p := Normalize(sandbox.ArtifactPolicy{})
	out := &memOutput{}
	a, err := CheckFile(t.Context(), root, "a.csv", out, p)
	if err != nil || a.Verdict != sandbox.VerdictSanitized || out.String() != "'=1\n" {
		t.Fatalf("a.csv: %+v %v %q", a, err, out.String())
	}
	for _, rel := range []string{"p.csv", "../a.csv", "nope.csv"} {
		a, err := CheckFile(t.Context(), root, rel, &memOutput{}, p)
		if err != nil || a.Verdict != sandbox.VerdictRejected {
			t.Errorf("%s: %+v %v", rel, a, err)
		}
	}
}

func TestDestNamedFallback(t *testing.T) {
	for _, named := range []bool{false, true} {
		dir := t.TempDir()
		d, err := openDest(dir, false)
		if err != nil {
			t.Fatal(err)
		}
		d.named = named
		keep, err := d.create("sub/keep.csv")
		if err != nil {
			t.Fatal(err)
		}
		keep.f.WriteString("kept\n")
		drop, err := d.create("sub/drop.csv")
		if err != nil {
			t.Fatal(err)
		}
		drop.f.WriteString("dropped\n")
		drop.abort()
		if why, err := keep.commit(); why != "" || err != nil {
			t.Fatal(why, err)
		}
		d.close()
		entries, _ := os.ReadDir(filepath.Join(dir, "sub"))
		if len(entries) != 1 || entries[0].Name() != "keep.csv" {
			t.Errorf("named=%v: folder holds %v", named, entries)
		}
		if got, _ := os.ReadFile(filepath.Join(dir, "sub", "keep.csv")); string(got) != "kept\n" {
			t.Errorf("named=%v: keep.csv = %q", named, got)
		}
	}
}
