package containerbench_test

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/backend/docker"
	"github.com/airlock-sandbox/airlock/backend/gvisor"
	"github.com/airlock-sandbox/airlock/backend/internal/containertest"
	"github.com/airlock-sandbox/airlock/backend/native"
	"github.com/airlock-sandbox/airlock/sandbox"
	"golang.org/x/sys/unix"
)

// floodBytes is what the flood prints: 1 GiB, against the default cap of
// 1 MiB kept.
const floodBytes = 1 << 30

// BenchmarkFlood prints 1 GiB on stdout in one sandbox of each backend
// and reports what it cost the host beside what it cost the sandbox:
// host-cpu-ms is the CPU time of this process, of its children, and of
// the daemons a backend goes through (dockerd, containerd and the shims,
// with their waited-for children such as runsc exec); sandbox-cpu-ms is
// the CPU time the backend counts for the process (its cgroup; gVisor's
// sentry with it); host-per-sandbox is their ratio.
//
//	go test -run '^$' -bench Flood -benchtime 3x ./backend/internal/containerbench
func BenchmarkFlood(b *testing.B) {
	if os.Geteuid() != 0 {
		b.Skip("the backends' full forms need root")
	}
	b.Run("native-host", func(b *testing.B) {
		flood(b, native.New(native.Options{}), sandbox.HostImage(), false)
	})
	b.Run("gvisor-host", func(b *testing.B) {
		flood(b, gvisor.New(gvisor.Options{Runsc: containertest.Runsc(b)}), sandbox.HostImage(), false)
	})
	for _, rt := range []string{docker.RuntimeRunc, docker.RuntimeRunsc} {
		b.Run("docker-"+rt, func(b *testing.B) {
			be, img, _ := dockerBackend(b, rt)
			flood(b, be, img, true)
		})
	}
}

// flood measures one backend; daemons adds the CPU of the Docker daemons
// it goes through (only for docker: the shims of other containers come
// and go, and their exits would move the sum).
func flood(b *testing.B, be sandbox.Backend, img sandbox.Image, daemons bool) {
	ctx := context.Background()
	p, err := sandbox.Policy{Limits: sandbox.Limits{Timeout: sandbox.Duration(5 * time.Minute)}}.Normalize()
	if err != nil {
		b.Fatal(err)
	}
	inst, err := be.Create(ctx, sandbox.Spec{Image: img, Policy: p})
	if err != nil {
		b.Fatal(err)
	}
	defer inst.Destroy(ctx)
	cmd := []string{"head", "-c", strconv.Itoa(floodBytes), "/dev/zero"}
	var host, guest, wall float64
	for b.Loop() {
		before := hostCPU(daemons)
		t0 := time.Now()
		res, err := sandbox.Exec(ctx, inst, sandbox.ProcessSpec{Cmd: cmd})
		wall += float64(time.Since(t0).Milliseconds())
		host += hostCPU(daemons) - before
		if err != nil || res.ExitCode != 0 || !res.StdoutTruncated || len(res.Stdout) != int(p.Limits.OutputBytes) {
			b.Fatalf("flood: exit %d truncated %v kept %d: %v %s", res.ExitCode, res.StdoutTruncated, len(res.Stdout), err, res.Stderr)
		}
		guest += res.Usage.CPUMillis
	}
	n := float64(b.N)
	b.ReportMetric(host/n, "host-cpu-ms")
	b.ReportMetric(guest/n, "sandbox-cpu-ms")
	b.ReportMetric(host/guest, "host-per-sandbox")
	b.ReportMetric(wall/n, "wall-ms")
}

// hostCPU is the CPU time, in ms, of this process and its waited-for
// children, and with daemons of the Docker daemons with theirs.
func hostCPU(daemons bool) float64 {
	var self, kids unix.Rusage
	_ = unix.Getrusage(unix.RUSAGE_SELF, &self)
	_ = unix.Getrusage(unix.RUSAGE_CHILDREN, &kids)
	ms := func(r unix.Rusage) float64 {
		return float64(r.Utime.Sec*1000+r.Stime.Sec*1000) + float64(r.Utime.Usec+r.Stime.Usec)/1000
	}
	total := ms(self) + ms(kids)
	if !daemons {
		return total
	}
	ticks := 100.0 // USER_HZ
	for _, p := range procs() {
		name := filepath.Base(strings.Fields(p.cmdline + " x")[0])
		if name != "dockerd" && name != "containerd" && !strings.HasPrefix(name, "containerd-shim") {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", p.pid, "stat"))
		if err != nil {
			continue
		}
		s := string(b)
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		// utime stime cutime cstime are fields 14-17, 12-15 after the name
		var t float64
		for _, k := range []int{11, 12, 13, 14} {
			v, _ := strconv.ParseFloat(f[k], 64)
			t += v
		}
		total += t * 1000 / ticks
	}
	return total
}
