// Package artifacttest plants the hazards that the artifact filter must
// withstand and checks what the filter made of them. The hazards come from
// one python3 script (Script) that uses only the standard library, so the
// same hazards can be planted on the host, as the tests of package artifact
// do, or inside a sandbox, as the backend suite does:
//
//	python3 - plant /workspace/output < hazards.py
//	python3 - race /workspace/output / < hazards.py &
package artifacttest

import (
	"bytes"
	"context"
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/airlock-sandbox/airlock/sandbox"
)

// Script is the python3 program that plants the hazards ("plant DIR
// [CANARY]") or races the filter ("race DIR TARGET"); see its doc string.
//
//go:embed hazards.py
var Script string

// Planted is what the plant command printed: the hazards it planted and
// why it skipped the others (for example mknod without CAP_MKNOD).
type Planted struct {
	Planted []string          `json:"planted"`
	Skipped map[string]string `json:"skipped"`
}

// Python returns the python3 to run: Debian's /usr/bin/python3, the one
// every sandbox has, when it is there (a version manager's shim in PATH
// can take a second to start), else python3 from PATH.
func Python() (string, error) {
	const debian = "/usr/bin/python3"
	if _, err := os.Stat(debian); err == nil {
		return debian, nil
	}
	return exec.LookPath("python3")
}

// script returns the command that runs Script with args.
func script(ctx context.Context, args ...string) (*exec.Cmd, error) {
	py, err := Python()
	if err != nil {
		return nil, fmt.Errorf("python3: %w", err)
	}
	cmd := exec.CommandContext(ctx, py, append([]string{"-"}, args...)...)
	cmd.Stdin = strings.NewReader(Script)
	return cmd, nil
}

// Plant plants the hazards under dir with python3 on this machine. canary,
// when not empty, is a file that some of the planted links point at.
func Plant(ctx context.Context, dir, canary string) (Planted, error) {
	cmd, err := script(ctx, "plant", dir, canary)
	if err != nil {
		return Planted{}, err
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return Planted{}, fmt.Errorf("plant hazards: %w: %s", err, stderr.String())
	}
	var p Planted
	if err := json.Unmarshal(out, &p); err != nil {
		return Planted{}, fmt.Errorf("plant hazards: read the report %q: %w", out, err)
	}
	return p, nil
}

// Race starts a second process that keeps swapping dir/swap (a folder)
// and dir/swapfile.csv with symbolic links to target and target/inner.csv,
// and returns once the swapping has begun. stop kills that process, by its
// pid, waits for it, and tells whether it had stopped on its own before;
// calling it again does nothing more.
// The "racing folder" hazard must have been planted.
func Race(ctx context.Context, dir, target string) (stop func() error, err error) {
	cmd, err := script(ctx, "race", dir, target)
	if err != nil {
		return nil, err
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start the racer: %w", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	stop = sync.OnceValue(func() error {
		select {
		case err := <-exited:
			return fmt.Errorf("the racer stopped on its own: %v: %s", err, stderr.String())
		default:
		}
		cmd.Process.Kill()
		<-exited
		return nil
	})
	// The racer makes its links first: wait for one of them.
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		if _, err := os.Lstat(filepath.Join(dir, ".swapfile-link")); err == nil {
			return stop, nil
		}
		select {
		case <-ctx.Done():
			stop()
			return nil, ctx.Err()
		case err := <-exited:
			exited <- err
			return nil, stop()
		case <-tick.C:
		}
	}
}

// Expectation is the verdict that the artifact at Path must get when
// Hazard was planted; Reason is a part of the reason.
type Expectation struct {
	Hazard, Path, Verdict, Reason string
}

// longDir is the path of the "long path" hazard that passes the 1024-byte
// cap of the default policy.
var longDir = "long/" + strings.Repeat(strings.Repeat("p", 250)+"/", 4) + strings.Repeat("p", 250)

// Expectations are the verdicts of the hazards under the default policy.
// The racing folder has none: its verdict depends on timing, and
// DestProblems checks that nothing it points at arrives.
var Expectations = []Expectation{
	{"symlink to /etc/passwd", "link-passwd.csv", sandbox.VerdictRejected, "symbolic link"},
	{"symlink to ..", "link-up", sandbox.VerdictRejected, "symbolic link"},
	{"symlink to /", "link-root", sandbox.VerdictRejected, "symbolic link"},
	{"symlink to the canary", "link-canary.csv", sandbox.VerdictRejected, "symbolic link"},
	{"fifo", "fifo.csv", sandbox.VerdictRejected, "FIFO"},
	{"socket", "sock.csv", sandbox.VerdictRejected, "socket"},
	{"device node", "null.csv", sandbox.VerdictRejected, "device node"},
	{"hard link", "hard-a.csv", sandbox.VerdictRejected, "hard link"},
	{"hard link", "hard-b.csv", sandbox.VerdictRejected, "hard link"},
	{"sparse 1 TB file", "sparse.csv", sandbox.VerdictRejected, "over the cap"},
	{"formula csv", "formula.csv", sandbox.VerdictSanitized, "formula cells neutralised"},
	{"svg with onload", "plot.svg", sandbox.VerdictSanitized, "removed 1 event handlers; removed 1 script elements"},
	{"docx with vbaProject.bin", "macro.docx", sandbox.VerdictRejected, "macro project"},
	{"xlsm renamed xlsx", "renamed.xlsx", sandbox.VerdictRejected, "macro"},
	{"ole2 renamed xlsx", "legacy.xlsx", sandbox.VerdictRejected, "OLE2"},
	{"zip bomb", "bomb.zip", sandbox.VerdictRejected, "expands more than"},
	{"overlapping zip bomb", "overlap.zip", sandbox.VerdictRejected, "share data"},
	{"nested zip bomb", "nested.zip", sandbox.VerdictRejected, "expands more than"},
	{"zip with escaping entry", "escape.zip", sandbox.VerdictRejected, "refers to a folder itself"},
	{"html named png", "fake.png", sandbox.VerdictRejected, "content is text/html"},
	{"elf named csv", "elf.csv", sandbox.VerdictRejected, "program"},
	{"deep tree", "deep" + strings.Repeat("/d", 15), sandbox.VerdictRejected, "depth cap"},
	{"long path", longDir, sandbox.VerdictRejected, "bytes long"},
	{"control characters in names", `ctrl\x01name.csv`, sandbox.VerdictRejected, "control character"},
	{"control characters in names", `new\nline.csv`, sandbox.VerdictRejected, "control character"},
	{"control characters in names", `bad\xffname.csv`, sandbox.VerdictRejected, "UTF-8"},
	{"control characters in names", `rlo\u202egpj.csv`, sandbox.VerdictRejected, "formatting character"},
	{"hidden names", ".env.txt", sandbox.VerdictRejected, "hidden name"},
	{"hidden names", ".git", sandbox.VerdictRejected, "hidden name"},
	{"npm install script", "pkg/package.json", sandbox.VerdictRejected, "install scripts (postinstall)"},
	{"safe files", "ok/good.csv", sandbox.VerdictAccepted, ""},
	{"safe files", "ok/plot.png", sandbox.VerdictAccepted, ""},
	{"safe files", "ok/data.json", sandbox.VerdictAccepted, ""},
	{"safe files", "ok/report.md", sandbox.VerdictAccepted, ""},
	{"safe files", "ok/page.html", sandbox.VerdictAccepted, ""},
	{"safe files", "ok/book.xlsx", sandbox.VerdictAccepted, ""},
}

// Problems compares the artifacts with the expectations of the hazards
// that were planted and describes every difference.
func Problems(arts []sandbox.Artifact, planted Planted) []string {
	byPath := map[string]sandbox.Artifact{}
	for _, a := range arts {
		byPath[a.Path] = a
	}
	was := map[string]bool{}
	for _, h := range planted.Planted {
		was[h] = true
	}
	var out []string
	for _, e := range Expectations {
		if !was[e.Hazard] {
			continue
		}
		a, ok := byPath[e.Path]
		switch {
		case !ok:
			out = append(out, fmt.Sprintf("%s (%s): no artifact", e.Path, e.Hazard))
		case a.Verdict != e.Verdict || !strings.Contains(a.Reason, e.Reason):
			out = append(out, fmt.Sprintf("%s (%s): got %s %q, want %s with %q", e.Path, e.Hazard, a.Verdict, a.Reason, e.Verdict, e.Reason))
		}
	}
	return out
}

// RoundProblems is Problems and DestProblems together, for a filter run
// that copied the artifacts into dst.
func RoundProblems(dst string, arts []sandbox.Artifact, planted Planted, forbidden ...[]byte) []string {
	return append(Problems(arts, planted), DestProblems(dst, arts, forbidden...)...)
}

// DestProblems checks a host folder that received artifacts: it holds
// only folders and regular files; each file is an accepted or sanitized
// artifact with the size and hash reported; every such artifact is there;
// and no file holds any of the forbidden byte strings (a canary's content,
// /etc/passwd).
func DestProblems(dst string, arts []sandbox.Artifact, forbidden ...[]byte) []string {
	want := map[string]sandbox.Artifact{}
	for _, a := range arts {
		if a.Verdict != sandbox.VerdictRejected {
			want[a.Path] = a
		}
	}
	var out []string
	seen := map[string]bool{}
	err := filepath.WalkDir(dst, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dst, p)
		switch {
		case d.IsDir():
			return nil
		case !d.Type().IsRegular():
			out = append(out, fmt.Sprintf("%s: %s in the output folder", rel, d.Type()))
			return nil
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		for _, f := range forbidden {
			if len(f) > 0 && bytes.Contains(data, f) {
				out = append(out, fmt.Sprintf("%s: holds forbidden content", rel))
			}
		}
		a, ok := want[filepath.ToSlash(rel)]
		sum := sha256.Sum256(data)
		switch {
		case !ok:
			out = append(out, fmt.Sprintf("%s: in the output folder but not accepted", rel))
		case a.SHA256 != hex.EncodeToString(sum[:]) || a.Size != int64(len(data)):
			out = append(out, fmt.Sprintf("%s: size or hash differs from the report", rel))
		}
		seen[filepath.ToSlash(rel)] = true
		return nil
	})
	if err != nil {
		out = append(out, "walk output folder: "+err.Error())
	}
	for p := range want {
		if !seen[p] {
			out = append(out, fmt.Sprintf("%s: accepted but missing from the output folder", p))
		}
	}
	return out
}
