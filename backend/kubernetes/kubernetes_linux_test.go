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
	"github.com/airlock-sandbox/airlock/backend/internal/containertest"
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
	c   k8s.Interface
	ns  string
	hc  *http.Client
	cfg *rest.Config
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
	tc.c, tc.hc, tc.cfg = c, hc, cfg
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
		Leftovers: leftovers, PidsReserve: kubernetes.AgentTasks, AgentExe: kubernetes.AgentPath})
}

// skips are the suite's checks that a Pod under gVisor answers
// otherwise, and why: gVisor's own, and those of a Pod's volumes.
var skips = containertest.Merge(containertest.GVisorSkips, containertest.ProfileSkips, containertest.ImageSkips, podSkips())

func podSkips() map[string]string {
	m := map[string]string{
		"artifact fifo": "a FIFO made inside gVisor lives in the sentry's mount of the sandbox container only: the files " +
			"container, whose tar stream the filter reads, sees nothing of it on the shared emptyDir",
		"artifact socket": "a unix socket bound inside gVisor lives in the sentry only: the files container sees nothing of it",
		"landlock": "the kubernetes backend applies no Landlock ruleset (gVisor implements none): the checks that only " +
			"Landlock stops (writes to a process's own /proc files, signals and abstract sockets between commands of one " +
			"sandbox) cannot apply; sandboxes stay apart from each other and from the node",
		"inodes stop at the cap": "a memory-backed emptyDir is sized in bytes by Kubernetes (sizeLimit), which cannot cap its " +
			"inodes, and gVisor's tmpfs takes no nr_inodes; each inode is memory of the sentry, charged to the Pod's memory limit",
		"/dev/shm shares the cap": "gVisor's shim makes /dev/shm a tmpfs of the sentry shared by the Pod's containers, with no " +
			"size of its own: one file stops at the disk cap (RLIMIT_FSIZE) and all of it at the Pod's memory limit, " +
			"since its pages are the sentry's memory",
	}
	for _, d := range []string{"/tmp", "/workspace/output", "/dev/shm", "/workspace/input"} {
		for _, f := range []string{"noexec", "nosuid", "nodev"} {
			m[d+" is "+f] = volumeFlags
		}
		m["ld.so of a binary in "+d] = volumeExec
		if d != "/workspace/input" {
			m["exec of a binary in "+d] = volumeExec
			m["exec of a binary written to "+d] = volumeExec
			m["the loader runs a binary written to "+d] = volumeExec
		}
	}
	return m
}

const volumeFlags = "Kubernetes mounts a volume without noexec, nosuid or nodev and has no field to ask for them (nor does " +
	"gVisor's pod-shared tmpfs take noexec unless every container's mount has it): setuid bits are inert " +
	"(allowPrivilegeEscalation: false sets no_new_privs, the image has no setuid binary) and no device node can be made " +
	"(no capability; mknod char device checks it)"

const volumeExec = "Kubernetes cannot mount a volume noexec: a binary written there runs, inside gVisor's sentry, as " +
	"uid 1000 with no capabilities and under the same seccomp profile as the code that wrote it, which could already " +
	"make any system call a binary can (README, The limits of isolation)"

// TestMemoryEndsSandbox checks what the skip of "memory cap" says: twice
// the memory cap ends the command with oom_killed and exit 137, and the
// sandbox with it.
func TestMemoryEndsSandbox(t *testing.T) {
	containertest.MemoryEndsSandbox(t, newBackend(t, options()), pythonImage(t))
}

func ExampleNew() {
	be := kubernetes.New(kubernetes.Options{Namespace: "airlock", RuntimeClass: "gvisor"})
	defer be.Close()
	fmt.Println(be.Name())
	// Output: kubernetes
}
