package microvm_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/backend/backendtest"
	"github.com/airlock-sandbox/airlock/backend/microvm"
	"github.com/airlock-sandbox/airlock/image"
	"github.com/airlock-sandbox/airlock/internal/testenv"
	"github.com/airlock-sandbox/airlock/internal/testimage"
	"github.com/airlock-sandbox/airlock/sandbox"
	"golang.org/x/sys/unix"
)

func TestMain(m *testing.M) {
	if childMode() {
		os.Exit(0)
	}
	os.Exit(backendtest.Main(m, leftovers))
}

// leftovers lists the QEMU processes and cgroups of this process's
// machines.
func leftovers() []string { return microvm.Leftovers(os.Getpid()) }

// newBackend returns a backend of the python image's store and the CI
// kernel, forced to TCG unless AIRLOCK_MICROVM_ACCEL says otherwise.
func newBackend(t *testing.T) (*microvm.Backend, sandbox.Image) {
	t.Helper()
	testenv.Require(t, "root: the microvm tests run as root here (CI does)", testenv.Root())
	store := testimage.Store(t)
	img, err := image.Resolve(store, testimage.Name)
	if err != nil {
		t.Fatal(err)
	}
	be := microvm.New(microvm.Options{KernelDir: testimage.Kernels(t), CacheDir: filepath.Join(store.Dir(), ".microvm"), Accel: accel()})
	testenv.Require(t, "the microvm backend", be.Probe(context.Background()))
	return be, img
}

// accel is TCG unless AIRLOCK_MICROVM_ACCEL says otherwise: KVM cannot run
// guests on the machines these tests run on.
func accel() string {
	if a := os.Getenv("AIRLOCK_MICROVM_ACCEL"); a != "" {
		return a
	}
	return microvm.AccelTCG
}

// cacheDir is the cache of the python image's store.
func cacheDir(t *testing.T) string {
	return filepath.Join(testimage.Store(t).Dir(), ".microvm")
}

func TestGuestKernelIsNotTheHosts(t *testing.T) {
	be, img := newBackend(t)
	inst := backendtest.CreateWithin(t, 5*time.Minute, be, img, backendtest.Policy(t, nil))
	res := backendtest.Exec(t, inst, sandbox.ProcessSpec{Cmd: []string{"uname", "-r"}})
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		t.Fatal(err)
	}
	host := unix.ByteSliceToString(u.Release[:])
	guest := strings.TrimSpace(res.Stdout)
	if res.ExitCode != 0 || guest == "" || guest == host {
		t.Fatalf("uname -r inside: %q (exit %d, stderr %q); the host's is %q", guest, res.ExitCode, res.Stderr, host)
	}
	if res.BackendDetails["guest_kernel"] != guest || res.BackendDetails["accel"] == "" {
		t.Errorf("backend details %v, want guest_kernel %q and an accel", res.BackendDetails, guest)
	}
	t.Logf("guest kernel %s, host kernel %s, details %v", guest, host, res.BackendDetails)
}

// TestSuite runs the conformance and attack suite on microvm machines
// under TCG (KVM with AIRLOCK_MICROVM_ACCEL=kvm where it works).
func TestSuite(t *testing.T) {
	be, img := newBackend(t)
	// the suite's environment check wants no image variables: the same
	// image, and so the same disk, without its environment
	bare := sandbox.Image{Name: "python, without its environment", RootFS: img.RootFS, Digest: img.Digest}
	backendtest.Run(t, backendtest.Config{
		Backend:   be,
		Image:     bare,
		DataImage: img,
		Leftovers: leftovers,
		// a machine boots in seconds under TCG, longer on a loaded host
		CreateTimeout: 5 * time.Minute,
		// each run boots a machine: 3 show that nothing piles up
		ManyRuns: 3,
		// under TCG a python3 start alone takes seconds on a loaded host
		TimeScale: 5,
		Skip:      suiteSkips,
	})
}

// suiteSkips are the checks that cannot apply to a microvm sandbox of the
// python image on Debian 12's 6.1 guest kernel, with the reason.
var suiteSkips = map[string]string{
	"read /home":                             "the image has its own /home (empty, from Debian's base-files); the host's folders are not in the machine at all",
	"list /home":                             "the image has its own empty /home; the host's folders are not in the machine at all",
	"exec of a memfd (flags 0) via execveat": noMemfdNoexec,
	"exec of a memfd (flags 0) via execve /proc/self/fd/N":     noMemfdNoexec,
	"exec of a memfd (MFD_CLOEXEC) via execveat":               noMemfdNoexec,
	"exec of a memfd (MFD_CLOEXEC) via execve /proc/self/fd/N": noMemfdNoexec,
	"memfd_create MFD_NOEXEC_SEAL works":                       "MFD_NOEXEC_SEAL came with Linux 6.3; the 6.1 guest kernel answers EINVAL",
	"landlock: mknod a whiteout (char 0:0) in /tmp": "the 6.1 guest kernel lets the sandbox make a whiteout (char 0:0) in /tmp, which Landlock " +
		"refuses on the host's 6.18 (why was not traced); a whiteout opens no device, and real device nodes are refused (check \"mknod char device\")",
	"landlock: signal a process of another command":          noScoping,
	"landlock: connect to another command's abstract socket": noScoping,
}

const (
	noMemfdNoexec = "vm.memfd_noexec came with Linux 6.3: in the 6.1 guest kernel a binary written into a memfd made without MFD_EXEC can run " +
		"(inside the machine, as uid 1000 under seccomp; README, microvm), as on docker and gvisor"
	noScoping = "Landlock's signal and abstract-socket scoping came with ABI 6 (Linux 6.12); the 6.1 guest kernel has ABI 2, " +
		"so the sandbox's own processes may signal each other; other sandboxes are other machines"
)
