package kubernetes_test

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/backend/backendtest"
	"github.com/airlock-sandbox/airlock/backend/kubernetes"
	"github.com/airlock-sandbox/airlock/image"
	"github.com/airlock-sandbox/airlock/internal/testenv"
	"github.com/airlock-sandbox/airlock/internal/testimage"
	"github.com/airlock-sandbox/airlock/sandbox"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8s "k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// replica names this test process in the labels of its Pods, so that the
// leak check counts only its own.
var replica = "test-" + strconv.Itoa(os.Getpid())

func TestMain(m *testing.M) {
	if name := os.Getenv(replicaEnv); name != "" {
		os.Exit(serveReplica(name))
	}
	os.Exit(backendtest.Main(m, leftovers))
}

// clusterNeed is what the tests need, and how to get it.
const clusterNeed = "a Kubernetes cluster with the gVisor RuntimeClass and airlock's images " +
	"(bash test/k8s/up.sh prints a kubeconfig: set KUBECONFIG to it)"

// client is a client of the test cluster, or nil without one. Its
// connections are closed by closeClient.
func client() (k8s.Interface, string) {
	tc := testClient()
	return tc.c, tc.ns
}

var testClient = sync.OnceValue(func() (tc struct {
	c  k8s.Interface
	ns string
	hc *http.Client
}) {
	path := os.Getenv("KUBECONFIG")
	if path == "" {
		return tc
	}
	cc := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(&clientcmd.ClientConfigLoadingRules{ExplicitPath: path}, nil)
	cfg, err := cc.ClientConfig()
	if err != nil {
		return tc
	}
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return tc
	}
	c, err := k8s.NewForConfigAndClient(cfg, hc)
	if err != nil {
		return tc
	}
	tc.c, tc.hc = c, hc
	tc.ns, _, _ = cc.Namespace()
	return tc
})

// closeClient closes the idle connections of client's, which the leak
// check would otherwise count.
func closeClient() {
	if hc := testClient().hc; hc != nil {
		hc.CloseIdleConnections()
	}
}

// leftovers lists the sandbox Pods and NetworkPolicies of this test
// process (its replicas' names start with replica) that are still there.
func leftovers() []string {
	c, ns := client()
	if c == nil {
		return nil
	}
	defer closeClient()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var out []string
	pods, err := c.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/managed-by=airlock"})
	if err != nil {
		return []string{"listing the Pods: " + err.Error()}
	}
	for _, p := range pods.Items {
		if strings.HasPrefix(p.Labels["airlock.dev/replica"], replica) {
			out = append(out, "pod "+p.Name+" ("+string(p.Status.Phase)+")")
		}
	}
	nps, err := c.NetworkingV1().NetworkPolicies(ns).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/managed-by=airlock"})
	if err == nil {
		for _, n := range nps.Items {
			if _, err := c.CoreV1().Pods(ns).Get(ctx, n.Name, metav1.GetOptions{}); err != nil {
				out = append(out, "networkpolicy "+n.Name+" without its Pod")
			}
		}
	}
	return out
}

// options are the test cluster's backend options, as test/k8s/up.sh
// sets it up (images imported, no registry, airlock's seccomp profile
// installed as airlock.json, one node of 2 CPUs on which the suite's
// sandboxes must fit at once).
func options() kubernetes.Options {
	return kubernetes.Options{Replica: replica, PullPolicy: "Never", SeccompProfile: "airlock.json", CPURequest: 0.1}
}

// newBackend returns a backend on the test cluster, closed when t ends;
// it skips t (fails it under CI) when there is no cluster.
func newBackend(t testing.TB, opts kubernetes.Options) *kubernetes.Backend {
	t.Helper()
	be := kubernetes.New(opts)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	testenv.Require(t, clusterNeed, be.Probe(ctx))
	t.Cleanup(func() { be.Close() })
	return be
}

// pythonImage is the built python image, resolved.
func pythonImage(t *testing.T) sandbox.Image {
	t.Helper()
	img, err := image.Resolve(testimage.Store(t), testimage.Name)
	if err != nil {
		t.Fatal(err)
	}
	return img
}

func TestSuite(t *testing.T) {
	be := newBackend(t, options())
	img := pythonImage(t)
	backendtest.Run(t, backendtest.Config{Backend: be, Image: img, DataImage: img, Skip: skips,
		Leftovers: leftovers, PidsReserve: kubernetes.AgentTasks})
}

// skips are the suite's checks that a gVisor Pod answers otherwise, and
// why.
var skips = map[string]string{
	"memory cap": "gVisor does not enforce the memory cap itself: the Pod's cgroup does, and the host's OOM killer ends the sentry, " +
		"which is the whole sandbox; the command's Result says oom_killed with exit 137 and the sandbox has ended, so the " +
		"test's second command cannot run (TestMemoryEndsSandbox checks this)",
	"survives memory bomb at twice the cap": "reaching the memory cap ends the whole sandbox, as the skip of \"memory cap\" " +
		"says (TestMemoryEndsSandbox checks it): there is no next command to run",
	"artifact fifo": "a FIFO made inside gVisor lives in the sentry's mount of the sandbox container only: the files " +
		"container, whose tar stream the filter reads, sees nothing of it on the shared emptyDir",
	"artifact socket": "a unix socket bound inside gVisor lives in the sentry only: the files container sees nothing of it",
	"pids_limit_hit reported": "the sandbox's tasks are capped by RLIMIT_NPROC, which gVisor's sentry enforces (forks beyond it " +
		"fail with EAGAIN), but nothing outside sees a refusal to report",
	"inodes stop at the cap": "a memory-backed emptyDir is sized in bytes by Kubernetes (sizeLimit), which cannot cap its inodes; " +
		"the disk cap in bytes holds (fill /tmp stops at the disk cap)",
	"lower /proc/self/oom_score_adj": "oom_score_adj inside is a number of gVisor's kernel with no effect on the host",
	"open /dev/tty":                  "gVisor's own /dev has a tty device of the sentry; without a controlling terminal open() fails with ENXIO",
	"/dev is minimal":                "gVisor's /dev also holds tty, fuse and net/tun, all implemented inside the sentry: no host device is reachable",
	"every mount is nosuid": "gVisor's root and /dev/pts show no nosuid; no_new_privs (allowPrivilegeEscalation: false) makes " +
		"setuid bits inert, and setuid would only change ids inside the sentry",
	"uid 0 is not host root": "the uid_map inside is gVisor's own user namespace: no sandbox uid is a host uid, the sentry serves " +
		"every system call",
	"landlock": "the kubernetes backend applies no Landlock ruleset (a Pod's runtime offers none): the checks that only " +
		"Landlock stops (writes to a process's own /proc files, signals and abstract sockets between commands of one " +
		"sandbox) cannot apply; sandboxes stay apart from each other and from the node",
	"i386 system call kills the process":                       "gVisor has no i386 ABI: int 0x80 is answered by the sentry, never passed to the host kernel",
	"/proc/sysrq-trigger masked":                               "gVisor's /proc is the sentry's own: its sysrq-trigger reaches no host kernel",
	"memfd_create MFD_NOEXEC_SEAL works":                       "gVisor's memfd_create knows no MFD_NOEXEC_SEAL and answers EINVAL",
	"exec of a memfd (flags 0) via execveat":                   memfdExec,
	"exec of a memfd (flags 0) via execve /proc/self/fd/N":     memfdExec,
	"exec of a memfd (MFD_CLOEXEC) via execveat":               memfdExec,
	"exec of a memfd (MFD_CLOEXEC) via execve /proc/self/fd/N": memfdExec,
	"/proc/sys read-only":                                      procRW,
	"/proc/irq read-only":                                      procRW,
	"/proc/bus read-only":                                      procRW,
	"/proc/fs read-only":                                       procRW,
	"ioctl TIOCSTI": "the runtime's default seccomp profile allows every ioctl request; no terminal reaches a Pod's " +
		"process (stdin, stdout and stderr are pipes), so the kernel answers ENOTTY",
	"ioctl TIOCLINUX": "the runtime's default seccomp profile allows every ioctl request; no console reaches a Pod",
	"read /home":      "the image has its own /home (empty, from Debian's base-files); no host folder is mounted",
	"list /home":      "the image has its own empty /home; no host folder is mounted",
}

const memfdExec = "gVisor has neither vm.memfd_noexec nor Landlock: a binary written into a memfd made without MFD_EXEC " +
	"runs, inside the sentry, which serves its every system call (README, The limits of isolation)"

const procRW = "gVisor's /proc is the sentry's own emulation, not the host kernel's: a write changes at most the sentry's " +
	"state (write /proc/sys/* checks what it refuses)"

// TestMemoryEndsSandbox checks what the skip of "memory cap" says: twice
// the memory cap ends the command with oom_killed and exit 137, and the
// sandbox with it.
func TestMemoryEndsSandbox(t *testing.T) {
	be := newBackend(t, options())
	p, err := sandbox.Policy{Limits: sandbox.Limits{MemoryBytes: 64 << 20}}.Normalize()
	if err != nil {
		t.Fatal(err)
	}
	inst := backendtest.Create(t, be, pythonImage(t), p)
	res, err := sandbox.Exec(context.Background(), inst, sandbox.ProcessSpec{Cmd: []string{"python3", "-c",
		"x = bytearray(128 << 20)\nfor i in range(0, len(x), 4096): x[i] = 1\nprint('survived')"}})
	if !res.OOMKilled || res.ExitCode != sandbox.ExitOOM {
		t.Fatalf("twice the memory cap: %+v %v", res, err)
	}
	select {
	case <-inst.Done():
	case <-time.After(30 * time.Second):
		t.Fatal("the sandbox did not end")
	}
	t.Logf("oom_killed, exit %d; the sandbox ended: %v", res.ExitCode, inst.Err())
}

func ExampleNew() {
	be := kubernetes.New(kubernetes.Options{Namespace: "airlock", RuntimeClass: "gvisor"})
	defer be.Close()
	fmt.Println(be.Name())
	// Output: kubernetes
}
