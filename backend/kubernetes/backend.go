package kubernetes

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/airlock-sandbox/airlock/backend/kubernetes/agent"
	"github.com/airlock-sandbox/airlock/sandbox"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
)

// Backend runs sandboxes as Pods of one namespace of a Kubernetes cluster.
type Backend struct {
	opts Options
	log  *slog.Logger

	connectMu sync.Mutex
	connected bool
	connErr   error

	// Set by connect.
	config       *rest.Config
	client       kubernetes.Interface
	ns           string
	replica      string
	runtimeClass string
	handler      string // the RuntimeClass's handler, "" when it could not be read
	anchor       *metav1.OwnerReference
	pods         cache.SharedIndexInformer
	informers    informers.SharedInformerFactory
	stop         chan struct{}
	wg           sync.WaitGroup

	mu    sync.Mutex
	insts map[string]*instance // by Pod name
}

var _ sandbox.Backend = (*Backend)(nil)
var _ sandbox.Recoverer = (*Backend)(nil)

// anchorName is the ConfigMap that owns every sandbox Pod: deleting it
// (or the namespace) deletes them all, through the garbage collector.
const anchorName = "airlock-sandboxes"

// Heartbeats of a replica: each Backend renews a Lease; another one may
// remove the unclaimed Pods (warm pools) of a replica whose Lease has
// not been renewed for leaseExpiry.
const (
	leaseEvery  = 10 * time.Second
	leaseExpiry = 45 * time.Second
	janitorEach = 3 // janitor rounds run every janitorEach lease renewals
)

// New returns a kubernetes backend; it connects on first use.
func New(opts Options) *Backend {
	if opts.RuntimeClass == "" {
		opts.RuntimeClass = DefaultRuntimeClass
	}
	if opts.ImageRef == nil {
		opts.ImageRef = DefaultImageRef("airlock.local/")
	}
	if opts.PullPolicy == "" {
		opts.PullPolicy = string(corev1.PullIfNotPresent)
	}
	if opts.MaxLifetime <= 0 {
		opts.MaxLifetime = 24 * time.Hour
	}
	if opts.StartTimeout <= 0 {
		opts.StartTimeout = 3 * time.Minute
	}
	if opts.AgentImage == "" {
		opts.AgentImage = "airlock.local/airlock-k8s-agent:" + agent.Version
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	return &Backend{opts: opts, log: opts.Logger, insts: map[string]*instance{}}
}

// Name is "kubernetes".
func (b *Backend) Name() string { return "kubernetes" }

// Features says what sandbox Pods can do.
func (b *Backend) Features() sandbox.Features {
	return sandbox.Features{Egress: true, ConcurrentProcesses: true, KeepAlive: true, Signals: true,
		Files: sandbox.FilesStream, OwnKernel: !b.opts.Unsandboxed, SurvivesOOM: false}
}

// Probe connects to the cluster and checks that the backend may work in
// its namespace.
func (b *Backend) Probe(ctx context.Context) error {
	return b.connect(ctx)
}

// loadConfig finds the cluster: the kubeconfig the options or
// $KUBECONFIG name, else the in-cluster configuration.
func loadConfig(path string) (*rest.Config, string, error) {
	if path == "" {
		path = os.Getenv("KUBECONFIG")
	}
	if path == "" {
		cfg, err := rest.InClusterConfig()
		if err != nil {
			return nil, "", fmt.Errorf("no kubeconfig (KUBECONFIG is empty) and not in a cluster: %v: %w", err, sandbox.ErrUnsupported)
		}
		ns := "default"
		if b, err := os.ReadFile("/var/run/secrets/kubernetes.io/serviceaccount/namespace"); err == nil && len(bytes.TrimSpace(b)) > 0 {
			ns = string(bytes.TrimSpace(b))
		}
		return cfg, ns, nil
	}
	cc := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(&clientcmd.ClientConfigLoadingRules{ExplicitPath: path},
		&clientcmd.ConfigOverrides{})
	cfg, err := cc.ClientConfig()
	if err != nil {
		return nil, "", fmt.Errorf("kubeconfig %s: %v: %w", path, err, sandbox.ErrUnsupported)
	}
	ns, _, err := cc.Namespace()
	if err != nil || ns == "" {
		ns = "default"
	}
	return cfg, ns, nil
}

// connect sets the backend up once: the client, the RuntimeClass check,
// the anchor, the Pod informer, the Lease and the janitor. A failure is
// kept: every later call gets it.
func (b *Backend) connect(ctx context.Context) error {
	b.connectMu.Lock()
	defer b.connectMu.Unlock()
	if b.connected {
		return b.connErr
	}
	b.connErr = b.setup(ctx)
	if b.connErr == nil || !errors.Is(b.connErr, context.Canceled) && !errors.Is(b.connErr, context.DeadlineExceeded) {
		b.connected = true
	}
	return b.connErr
}

func (b *Backend) setup(ctx context.Context) error {
	cfg, ns, err := loadConfig(b.opts.Kubeconfig)
	if err != nil {
		return err
	}
	if b.opts.Namespace != "" {
		ns = b.opts.Namespace
	}
	cfg.QPS, cfg.Burst = 200, 400
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("kubernetes client: %v: %w", err, sandbox.ErrUnsupported)
	}
	b.config, b.client, b.ns = cfg, client, ns
	b.replica = replicaName(b.opts.Replica)
	cctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	if _, err := client.CoreV1().Pods(ns).List(cctx, metav1.ListOptions{Limit: 1}); err != nil {
		return fmt.Errorf("kubernetes backend: cannot list the Pods of namespace %s at %s: %v: %w", ns, cfg.Host, err, sandbox.ErrUnsupported)
	}
	if err := b.checkRuntimeClass(cctx); err != nil {
		return err
	}
	if err := b.ensureAnchor(cctx); err != nil {
		return err
	}
	b.stop = make(chan struct{})
	factory := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithNamespace(ns),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = labelManaged + "=" + managedBy }))
	b.pods = factory.Core().V1().Pods().Informer()
	b.informers = factory
	_, err = b.pods.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { b.observe(obj, false) },
		UpdateFunc: func(_, obj any) { b.observe(obj, false) },
		DeleteFunc: func(obj any) { b.observe(obj, true) },
	})
	if err != nil {
		return err
	}
	factory.Start(b.stop)
	if !cache.WaitForCacheSync(cctx.Done(), b.pods.HasSynced) {
		close(b.stop)
		return fmt.Errorf("kubernetes backend: the Pod informer did not sync: %w", sandbox.ErrUnsupported)
	}
	b.wg.Add(1)
	go b.heartbeat()
	b.log.Info("kubernetes backend connected", "server", cfg.Host, "namespace", ns, "replica", b.replica,
		"runtime_class", b.runtimeClass, "handler", b.handler)
	return nil
}

// checkRuntimeClass reads the RuntimeClass's handler, where the backend
// may (a ClusterRole is needed; without one, the class is taken on trust
// and Capabilities says so), and refuses one that does not sandbox
// unless the options allow it.
func (b *Backend) checkRuntimeClass(ctx context.Context) error {
	if b.opts.RuntimeClass == "-" {
		if !b.opts.Unsandboxed {
			return fmt.Errorf("kubernetes backend: no RuntimeClass runs the code on the node's kernel; that needs Unsandboxed: %w", sandbox.ErrUnsupported)
		}
		return nil
	}
	b.runtimeClass = b.opts.RuntimeClass
	rc, err := b.client.NodeV1().RuntimeClasses().Get(ctx, b.runtimeClass, metav1.GetOptions{})
	switch {
	case apierrors.IsForbidden(err):
		return nil
	case apierrors.IsNotFound(err):
		return fmt.Errorf("kubernetes backend: RuntimeClass %q does not exist: %w", b.runtimeClass, sandbox.ErrUnsupported)
	case err != nil:
		return fmt.Errorf("kubernetes backend: RuntimeClass %q: %v: %w", b.runtimeClass, err, sandbox.ErrUnsupported)
	}
	b.handler = rc.Handler
	if !isSandboxing(rc.Handler) && !b.opts.Unsandboxed {
		return fmt.Errorf("kubernetes backend: RuntimeClass %q has handler %q, which runs the code on the node's kernel; that needs Unsandboxed: %w",
			b.runtimeClass, rc.Handler, sandbox.ErrUnsupported)
	}
	return nil
}

// ensureAnchor finds or makes the ConfigMap that owns the sandbox Pods.
func (b *Backend) ensureAnchor(ctx context.Context) error {
	cms := b.client.CoreV1().ConfigMaps(b.ns)
	cm, err := cms.Get(ctx, anchorName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		cm, err = cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: anchorName,
			Labels: map[string]string{labelManaged: managedBy}},
			Data: map[string]string{"about": "Owns every sandbox Pod of airlock in this namespace; deleting it deletes them."}},
			metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			cm, err = cms.Get(ctx, anchorName, metav1.GetOptions{})
		}
	}
	if err != nil {
		return fmt.Errorf("kubernetes backend: ConfigMap %s: %v: %w", anchorName, err, sandbox.ErrUnsupported)
	}
	b.anchor = &metav1.OwnerReference{APIVersion: "v1", Kind: "ConfigMap", Name: cm.Name, UID: cm.UID}
	return nil
}

// replicaName makes a label value of name, or of the host name and pid.
func replicaName(name string) string {
	if name == "" {
		h, _ := os.Hostname()
		name = h + "-" + strconv.Itoa(os.Getpid())
	}
	name = regexp.MustCompile(`[^A-Za-z0-9._-]+`).ReplaceAllString(name, "-")
	name = strings.Trim(name, "-._")
	if len(name) > 50 {
		name = name[:50]
	}
	if name == "" {
		name = "airlock"
	}
	return strings.ToLower(name)
}

// observe routes an informer event to the instance of its Pod.
func (b *Backend) observe(obj any, deleted bool) {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj, deleted = t.Obj, true
	}
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	b.mu.Lock()
	inst := b.insts[pod.Name]
	b.mu.Unlock()
	if inst != nil {
		inst.observe(pod, deleted)
	}
}

// Create starts a sandbox Pod and waits until its agent answers.
func (b *Backend) Create(ctx context.Context, spec sandbox.Spec) (sandbox.Instance, error) {
	if err := b.connect(ctx); err != nil {
		return nil, err
	}
	image, err := b.opts.ImageRef(spec.Image)
	if err != nil {
		return nil, err
	}
	id := spec.ID
	if id == "" {
		id = randomID()
	}
	pod, err := b.podFor(id, image, spec)
	if err != nil {
		return nil, err
	}
	inst := b.newInstance(id, spec.Policy, spec.Image)
	ok := false
	defer func() {
		if !ok {
			_ = inst.Destroy(context.WithoutCancel(ctx))
		}
	}()
	created, err := b.client.CoreV1().Pods(b.ns).Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("create Pod %s: %w", pod.Name, err)
	}
	inst.observe(created, false)
	if _, err := b.client.NetworkingV1().NetworkPolicies(b.ns).Create(ctx, b.networkPolicyFor(created), metav1.CreateOptions{}); err != nil {
		return nil, fmt.Errorf("create NetworkPolicy %s: %w", pod.Name, err)
	}
	if err := inst.waitRunning(ctx, b.opts.StartTimeout); err != nil {
		return nil, err
	}
	ok = true
	return inst, nil
}

func randomID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// Close stops the informer and the heartbeat and removes this replica's
// Lease; sandboxes are not touched.
func (b *Backend) Close() error {
	b.connectMu.Lock()
	defer b.connectMu.Unlock()
	if !b.connected || b.connErr != nil || b.stop == nil {
		return nil
	}
	select {
	case <-b.stop:
		return nil
	default:
	}
	close(b.stop)
	b.wg.Wait()
	// the informer's watch ends before its connection is closed below
	b.informers.Shutdown()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := b.client.CoordinationV1().Leases(b.ns).Delete(ctx, b.leaseName(), metav1.DeleteOptions{})
	if apierrors.IsNotFound(err) {
		err = nil
	}
	// the connections to the API server are client-go's, shared by
	// clients of the same configuration; the idle ones go now
	if rc, ok := b.client.CoreV1().RESTClient().(*rest.RESTClient); ok && rc.Client != nil {
		utilnet.CloseIdleConnectionsFor(rc.Client.Transport)
	}
	return err
}

func (b *Backend) leaseName() string { return "airlock-replica-" + b.replica }

// heartbeat renews this replica's Lease and, every few renewals, runs the
// janitor.
func (b *Backend) heartbeat() {
	defer b.wg.Done()
	t := time.NewTicker(leaseEvery)
	defer t.Stop()
	for n := 0; ; n++ {
		ctx, cancel := context.WithTimeout(context.Background(), leaseEvery)
		if err := b.renewLease(ctx); err != nil {
			b.log.Warn("renewing the replica's Lease failed", "err", err)
		}
		if n > 0 && n%janitorEach == 0 {
			for _, r := range b.janitor(ctx) {
				b.log.Info("removed a stale sandbox", "what", r)
			}
		}
		cancel()
		select {
		case <-b.stop:
			return
		case <-t.C:
		}
	}
}

func (b *Backend) renewLease(ctx context.Context) error {
	leases := b.client.CoordinationV1().Leases(b.ns)
	now := metav1.NewMicroTime(time.Now())
	secs := int32(leaseExpiry.Seconds())
	l, err := leases.Get(ctx, b.leaseName(), metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		_, err = leases.Create(ctx, &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: b.leaseName(), Labels: map[string]string{labelManaged: managedBy, labelReplica: b.replica}},
			Spec:       coordinationv1.LeaseSpec{HolderIdentity: &b.replica, LeaseDurationSeconds: &secs, RenewTime: &now},
		}, metav1.CreateOptions{})
		return err
	}
	if err != nil {
		return err
	}
	l.Spec.RenewTime = &now
	_, err = leases.Update(ctx, l, metav1.UpdateOptions{})
	return err
}

// CleanupStale removes what dead airlock processes left in the namespace
// (see janitor).
func (b *Backend) CleanupStale(ctx context.Context) []string {
	if b.connect(ctx) != nil {
		return nil
	}
	return b.janitor(ctx)
}

// janitor deletes the sandbox Pods that nobody will destroy: those that
// ended (failed, succeeded), those whose session's TTL or idle timeout
// passed, and the unclaimed ones (warm pools) of replicas whose Lease
// expired. The Pods of this process's live instances are left alone.
func (b *Backend) janitor(ctx context.Context) []string {
	pods, err := b.client.CoreV1().Pods(b.ns).List(ctx, metav1.ListOptions{LabelSelector: labelManaged + "=" + managedBy})
	if err != nil {
		return nil
	}
	live := b.liveReplicas(ctx)
	now := time.Now()
	var out []string
	for k := range pods.Items {
		pod := &pods.Items[k]
		b.mu.Lock()
		mine := b.insts[pod.Name] != nil
		b.mu.Unlock()
		if mine || pod.DeletionTimestamp != nil {
			continue
		}
		why := staleReason(pod, now, live)
		if why == "" {
			continue
		}
		if err := b.deletePod(ctx, pod.Name); err == nil {
			out = append(out, "pod "+pod.Name+": "+why)
		}
	}
	return out
}

// staleReason says why pod is stale, or "" when it is not.
func staleReason(pod *corev1.Pod, now time.Time, live map[string]bool) string {
	switch pod.Status.Phase {
	case corev1.PodFailed, corev1.PodSucceeded:
		return "ended (" + string(pod.Status.Phase) + ")"
	}
	if rec, ok := podRecord(pod); ok {
		if !rec.Expires.IsZero() && now.After(rec.Expires) {
			return "its session's TTL passed"
		}
		if touched := podTouched(pod); rec.Idle > 0 && !touched.IsZero() && now.Sub(touched) > time.Duration(rec.Idle) {
			return "its session was idle past its idle timeout"
		}
		return ""
	}
	if live != nil && !live[pod.Labels[labelReplica]] && now.Sub(pod.CreationTimestamp.Time) > leaseExpiry {
		return "unclaimed, and its replica " + pod.Labels[labelReplica] + " is gone"
	}
	return ""
}

// liveReplicas are the replicas whose Lease is fresh; nil when the
// Leases cannot be read (then every replica counts as alive).
func (b *Backend) liveReplicas(ctx context.Context) map[string]bool {
	live := map[string]bool{b.replica: true}
	leases, err := b.client.CoordinationV1().Leases(b.ns).List(ctx, metav1.ListOptions{LabelSelector: labelManaged + "=" + managedBy})
	if err != nil {
		// without the Leases, count every replica as alive
		return nil
	}
	for _, l := range leases.Items {
		switch age := leaseAge(&l); {
		case age < leaseExpiry:
			live[l.Labels[labelReplica]] = true
		case age > leaseForget:
			// a replica that died long ago: its Lease goes too
			_ = b.client.CoordinationV1().Leases(b.ns).Delete(ctx, l.Name, metav1.DeleteOptions{})
		}
	}
	return live
}

// leaseForget is when the Lease of a replica that stopped renewing it is
// removed.
const leaseForget = 10 * time.Minute

func leaseAge(l *coordinationv1.Lease) time.Duration {
	if l.Spec.RenewTime == nil {
		return time.Since(l.CreationTimestamp.Time)
	}
	return time.Since(l.Spec.RenewTime.Time)
}

// deletePod deletes a sandbox Pod at once (no grace: its processes get
// SIGKILL) and its NetworkPolicy.
func (b *Backend) deletePod(ctx context.Context, name string) error {
	zero := int64(0)
	err := b.client.CoreV1().Pods(b.ns).Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: &zero})
	if apierrors.IsNotFound(err) {
		err = nil
	}
	nerr := b.client.NetworkingV1().NetworkPolicies(b.ns).Delete(ctx, name, metav1.DeleteOptions{})
	if err == nil && nerr != nil && !apierrors.IsNotFound(nerr) {
		err = nerr
	}
	return err
}

// Capabilities says how each layer holds on this cluster.
func (b *Backend) Capabilities(ctx context.Context) sandbox.Capabilities {
	m := func(layer, name string, s sandbox.Strength, detail string) sandbox.Mechanism {
		return sandbox.Mechanism{Layer: layer, Name: name, Strength: s, Detail: detail}
	}
	caps := sandbox.Capabilities{Backend: b.Name()}
	if err := b.connect(ctx); err != nil {
		caps.Mechanisms = append(caps.Mechanisms, m("kernel", "cluster", sandbox.Missing, err.Error()))
		return caps
	}
	kernel := m("kernel", "runtime class "+b.runtimeClass, sandbox.Full, "handler "+b.handler+": the code talks to a kernel of its own")
	network := m("network", "runtime without network", sandbox.Full,
		"the RuntimeClass's runtime gives the Pod only lo (runsc --network=none, from the node's containerd configuration); "+
			"a NetworkPolicy denies all traffic besides; egress travels over the exec API to the proxy")
	switch {
	case b.runtimeClass == "" || (b.handler != "" && !isSandboxing(b.handler)):
		kernel = m("kernel", "runtime class "+b.runtimeClass, sandbox.Missing, "allowed by Unsandboxed: the code runs on the node's kernel")
		network = m("network", "NetworkPolicy", sandbox.Weaker, "only a NetworkPolicy keeps the Pod off the network, and only where the CNI enforces it")
	case b.handler == "":
		kernel.Strength, kernel.Detail = sandbox.Weaker, "the RuntimeClass could not be read (no ClusterRole to get runtimeclasses): taken on trust"
	}
	seccomp := m("privileges", "seccomp", sandbox.Full, "airlock's container profile, the node's Localhost profile "+b.opts.SeccompProfile)
	if b.opts.SeccompProfile == "" {
		seccomp = m("privileges", "seccomp", sandbox.Weaker, "the runtime's default profile (RuntimeDefault), which allows ptrace and "+
			"reading other processes' memory, and whose ENOSYS refusal of clone3 gVisor answers with EPERM, breaking glibc's threads")
	}
	caps.Mechanisms = append(caps.Mechanisms, kernel, network,
		m("filesystem", "read-only root", sandbox.Full, "readOnlyRootFilesystem; /tmp, /workspace/output and /dev/shm share one memory-backed volume capped by the disk cap"),
		m("filesystem", "inode cap", sandbox.Weaker, "a memory-backed emptyDir has a size and no inode cap; the disk cap in bytes holds"),
		m("resources", "memory cap", sandbox.Full, "the Pod's memory limit; reaching it ends the whole sandbox (gVisor's sentry is killed)"),
		m("resources", "pids cap", sandbox.Weaker, fmt.Sprintf("RLIMIT_NPROC, which gVisor counts per user in the sandbox, the agent's own tasks included (%d more are allowed for them)", AgentTasks)),
		m("privileges", "user and capabilities", sandbox.Full, "runAsNonRoot as 1000:1000, every capability dropped, no privilege escalation, no service-account token"),
		seccomp,
		m("privileges", "landlock", sandbox.Weaker, "none: processes of one sandbox may signal one another and write their own /proc files"),
		m("lifecycle", "sweep", sandbox.Full, "each process's shepherd is the subreaper of what it starts and kills it when the process ends"),
		m("lifecycle", "owner", sandbox.Full, "every Pod is owned by the ConfigMap "+anchorName+" and has an activeDeadlineSeconds of "+b.opts.MaxLifetime.String()),
	)
	return caps
}
