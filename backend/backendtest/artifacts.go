//go:build linux

package backendtest

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/artifact"
	"github.com/airlock-sandbox/airlock/artifact/artifacttest"
	"github.com/airlock-sandbox/airlock/sandbox"
)

// testArtifacts plants every artifact hazard from inside the sandbox and,
// while a second sandboxed process keeps swapping a folder and a file with
// links to the host's root, runs the filter into a host folder several
// times: only safe files may arrive, nothing may hang, and a canary file
// on the host that the links point at must be neither read nor changed.
func (s *suite) testArtifacts(t *testing.T) {
	base := t.TempDir()
	canaryDir := filepath.Join(base, "canary")
	if err := os.MkdirAll(canaryDir, 0o755); err != nil {
		t.Fatal(err)
	}
	token := []byte(fmt.Sprintf("CANARY-%d", time.Now().UnixNano()))
	canary := filepath.Join(canaryDir, "inner.csv")
	if err := os.WriteFile(canary, append(token, '\n'), 0o644); err != nil {
		t.Fatal(err)
	}
	// an access time older than the change time makes any read update it
	if err := os.Chtimes(canary, time.Date(2001, 1, 1, 0, 0, 0, 0, time.UTC), time.Now()); err != nil {
		t.Fatal(err)
	}
	before := accessTime(t, canary)
	passwd, _ := os.ReadFile("/etc/passwd")

	// a 1 GiB disk lets a sparse file pass the 256 MiB default file cap
	// (a 1 TB one cannot exist inside: the file size rlimit refuses it)
	inst := s.create(t, Policy(t, func(p *sandbox.Policy) {
		p.Limits.Timeout = sandbox.Duration(3 * time.Minute)
		p.Limits.DiskBytes = 1 << 30
	}))
	res := Exec(t, inst, sandbox.ProcessSpec{Cmd: []string{"python3", "-", "plant", "/workspace/output", canary},
		Stdin: strings.NewReader(artifacttest.Script)})
	var planted artifacttest.Planted
	if err := json.Unmarshal([]byte(res.Stdout), &planted); err != nil || res.ExitCode != 0 {
		t.Fatalf("plant hazards inside: exit %d, %v\nstdout %s\nstderr %s", res.ExitCode, err, res.Stdout, res.Stderr)
	}
	for h, why := range planted.Skipped {
		t.Logf("hazard %q cannot be planted inside the sandbox: %s", h, why)
	}
	// A hazard the backend keeps from ever reaching the host folder (a
	// FIFO inside gVisor lives in the sentry only) gets no verdict: the
	// config says why, and the check of it is skipped.
	kept := planted.Planted[:0]
	for _, h := range planted.Planted {
		if why, ok := s.Skip["artifact "+h]; ok {
			t.Logf("SKIP hazard %q: does not apply to backend %s: %s", h, s.Backend.Name(), why)
			continue
		}
		kept = append(kept, h)
	}
	planted.Planted = kept
	res = sh(t, inst, "truncate -s 768M /workspace/output/sparse-inside.csv")
	if res.ExitCode != 0 {
		t.Fatalf("sparse file inside: %s", res.Stderr)
	}
	ctx, cancel := context.WithCancel(context.Background())
	type ended struct {
		res sandbox.Result
		err error
	}
	raced := make(chan ended, 1)
	go func() {
		r, err := sandbox.Exec(ctx, inst, sandbox.ProcessSpec{Cmd: []string{"python3", "-", "race", "/workspace/output", canaryDir},
			Stdin: strings.NewReader(artifacttest.Script)})
		raced <- ended{r, err}
	}()
	defer func() {
		cancel()
		<-raced
	}()
	// the racer makes its links first: wait for one of them
	waitFor(t, func() bool {
		select {
		case e := <-raced:
			raced <- e
			t.Fatalf("the racer ended before its links appeared: exit %d stdout %.300q stderr %.300q: %v",
				e.res.ExitCode, e.res.Stdout, e.res.Stderr, e.err)
		default:
		}
		r := Exec(t, inst, sandbox.ProcessSpec{Cmd: []string{"test", "-L", "/workspace/output/.swapfile-link"}})
		return r.ExitCode == 0
	})
	p := artifact.Normalize(sandbox.ArtifactPolicy{})
	verdicts := map[string]int{}
	for round := range 6 {
		dst := filepath.Join(base, fmt.Sprintf("dst%d", round))
		cctx, ccancel := context.WithTimeout(ctx, 2*time.Minute)
		arts, err := collectOutput(cctx, inst, dst, p)
		ccancel()
		if err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		for _, problem := range artifacttest.RoundProblems(dst, arts, planted, token, passwd) {
			t.Errorf("round %d: %s", round, problem)
		}
		for _, a := range arts {
			verdicts[a.Verdict]++
			if a.Path == "sparse-inside.csv" && (a.Verdict != sandbox.VerdictRejected || a.SHA256 != "") {
				t.Errorf("round %d: a 768 MiB sparse file over the 256 MiB cap: %+v, want rejected unread", round, a)
			}
		}
	}
	if after := accessTime(t, canary); !after.Equal(before) {
		t.Errorf("the host canary was read: access time %v, was %v", after, before)
	}
	if b, err := os.ReadFile(canary); err != nil || string(b) != string(token)+"\n" {
		t.Errorf("the host canary changed: %q %v", b, err)
	}
	t.Logf("6 rounds of the filter while racing; verdicts: %v", verdicts)
}

func accessTime(t *testing.T, path string) time.Time {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		t.Fatal(err)
	}
	return time.Unix(st.Atim.Sec, st.Atim.Nsec)
}

// waitFor polls cond for up to a minute.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatal("timed out waiting")
}
