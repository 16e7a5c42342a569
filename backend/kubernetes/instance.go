package kubernetes

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/airlock-sandbox/airlock/backend/kubernetes/agent"
	"github.com/airlock-sandbox/airlock/egress"
	"github.com/airlock-sandbox/airlock/sandbox"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// instance is one sandbox Pod.
type instance struct {
	b        *Backend
	id, pod  string
	policy   sandbox.Policy
	image    sandbox.Image
	proxyEnv map[string]string // the egress proxy's variables, with egress rules

	running chan struct{} // closed when both containers run
	runOnce sync.Once
	done    chan struct{} // closed when the sandbox ended
	endOnce sync.Once

	mu      sync.Mutex
	err     error       // why it ended
	last    *corev1.Pod // the last state seen
	stopped bool        // Destroy was called
	procs   map[*process]struct{}
	seq     int

	touchMu   sync.Mutex
	touchedAt time.Time // the last Touch sent
	touching  atomic.Bool
}

var (
	_ sandbox.Instance        = (*instance)(nil)
	_ sandbox.OutputArchiver  = (*instance)(nil)
	_ sandbox.NetworkAttacher = (*instance)(nil)
	_ sandbox.Recorder        = (*instance)(nil)
)

// newInstance registers the instance of a Pod that is being created or
// recovered, so that the informer's events reach it.
func (b *Backend) newInstance(id string, pol sandbox.Policy, img sandbox.Image) *instance {
	i := &instance{b: b, id: id, pod: podName(id), policy: pol, image: img,
		running: make(chan struct{}), done: make(chan struct{}), procs: map[*process]struct{}{}}
	if pol.Network.Enabled() {
		i.proxyEnv = egress.Env(sandbox.EgressAddr)
	}
	b.mu.Lock()
	b.insts[i.pod] = i
	b.mu.Unlock()
	return i
}

func (i *instance) ID() string { return i.id }

func (i *instance) Done() <-chan struct{} { return i.done }

func (i *instance) Err() error {
	i.mu.Lock()
	defer i.mu.Unlock()
	return i.err
}

// alive fails once the sandbox has ended.
func (i *instance) alive() error {
	select {
	case <-i.done:
		return i.Err()
	default:
		return nil
	}
}

// end marks the sandbox ended with err, once, and cancels its processes.
func (i *instance) end(err error) {
	i.endOnce.Do(func() {
		i.mu.Lock()
		i.err = err
		procs := make([]*process, 0, len(i.procs))
		for p := range i.procs {
			procs = append(procs, p)
		}
		i.mu.Unlock()
		close(i.done)
		for _, p := range procs {
			p.abort()
		}
		i.b.mu.Lock()
		if i.b.insts[i.pod] == i {
			delete(i.b.insts, i.pod)
		}
		i.b.mu.Unlock()
	})
}

// observe takes the Pod's new state from the informer (or a call's
// answer): running, ended, or gone.
func (i *instance) observe(pod *corev1.Pod, deleted bool) {
	i.mu.Lock()
	if i.last != nil && pod.ResourceVersion != "" && i.last.ResourceVersion != "" && !deleted &&
		newer(i.last.ResourceVersion, pod.ResourceVersion) {
		i.mu.Unlock()
		return
	}
	i.last = pod
	stopped := i.stopped
	i.mu.Unlock()
	if stopped {
		return
	}
	if deleted || pod.DeletionTimestamp != nil {
		i.end(fmt.Errorf("sandbox %s: its Pod was deleted (by another airlock process, or by hand): %w", i.id, sandbox.ErrDestroyed))
		return
	}
	if why := podEnded(pod); why != "" {
		i.end(fmt.Errorf("sandbox %s: %s: %w", i.id, why, sandbox.ErrDied))
		return
	}
	if podRunning(pod) {
		i.runOnce.Do(func() { close(i.running) })
	}
}

// newer tells whether resource version a is newer than b, as far as
// numbers tell (the API server's are numbers in practice).
func newer(a, b string) bool {
	var x, y uint64
	if _, err := fmt.Sscan(a, &x); err != nil {
		return false
	}
	if _, err := fmt.Sscan(b, &y); err != nil {
		return false
	}
	return x > y
}

// podRunning tells whether both containers of pod run.
func podRunning(pod *corev1.Pod) bool {
	if pod.Status.Phase != corev1.PodRunning {
		return false
	}
	n := 0
	for _, c := range pod.Status.ContainerStatuses {
		if c.State.Running != nil {
			n++
		}
	}
	return n == 2
}

// podEnded says why pod can no longer run its sandbox, or "".
func podEnded(pod *corev1.Pod) string {
	if pod.Status.Phase == corev1.PodFailed || pod.Status.Phase == corev1.PodSucceeded {
		why := "its Pod " + strings.ToLower(string(pod.Status.Phase))
		if pod.Status.Reason != "" {
			why += " (" + pod.Status.Reason + ")"
		}
		if t := terminated(pod); t != "" {
			why += ": " + t
		}
		return why
	}
	if t := terminated(pod); t != "" {
		return t
	}
	for _, c := range pod.Status.ContainerStatuses {
		if w := c.State.Waiting; w != nil && waitingFatal[w.Reason] {
			return fmt.Sprintf("container %s cannot start: %s: %s", c.Name, w.Reason, w.Message)
		}
	}
	return ""
}

// terminated describes a terminated container of pod, or "".
func terminated(pod *corev1.Pod) string {
	for _, c := range pod.Status.ContainerStatuses {
		if t := c.State.Terminated; t != nil {
			return fmt.Sprintf("container %s terminated: %s, exit %d", c.Name, t.Reason, t.ExitCode)
		}
	}
	return ""
}

// oomKilled tells whether the sandbox's memory cap ended the Pod.
func oomKilled(pod *corev1.Pod) bool {
	if pod == nil {
		return false
	}
	for _, c := range pod.Status.ContainerStatuses {
		if t := c.State.Terminated; t != nil && (t.Reason == "OOMKilled" || t.ExitCode == 137) {
			return true
		}
	}
	return false
}

// waitingFatal are the reasons a container waits for that it will not
// get past by itself.
var waitingFatal = map[string]bool{"ErrImageNeverPull": true, "InvalidImageName": true, "CreateContainerConfigError": true,
	"CreateContainerError": true, "RunContainerError": true, "ImagePullBackOff": true, "ErrImagePull": true}

// waitRunning waits until the Pod runs and its agent answers.
func (i *instance) waitRunning(ctx context.Context, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	select {
	case <-i.running:
	case <-i.done:
		return fmt.Errorf("sandbox %s did not start: %w", i.id, i.Err())
	case <-ctx.Done():
		return fmt.Errorf("sandbox %s: its Pod did not run in time (%s): %w", i.id, i.describe(), ctx.Err())
	}
	// The sandbox container runs a shell until the agent is in place;
	// the agent answers once it is.
	for {
		v, err := i.version(ctx)
		if err == nil {
			if v != agent.Version {
				return fmt.Errorf("sandbox %s: its agent speaks protocol %q, this airlock %q: %w", i.id, v, agent.Version, sandbox.ErrUnsupported)
			}
			return nil
		}
		select {
		case <-i.done:
			return fmt.Errorf("sandbox %s did not start: %w", i.id, i.Err())
		case <-ctx.Done():
			return fmt.Errorf("sandbox %s: its agent did not answer (%v): %w", i.id, err, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// version asks the sandbox container's agent its protocol version.
func (i *instance) version(ctx context.Context) (string, error) {
	var out bytes.Buffer
	err := i.b.execStream(ctx, i.pod, sandboxContainer, []string{AgentPath, agent.CmdVersion}, nil, &out, nil)
	return strings.TrimSpace(out.String()), err
}

// answers says whether the sandbox's agent answers within d.
func (i *instance) answers(d time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	_, err := i.version(ctx)
	return err
}

// ended waits up to d for the Pod to have ended with every container's
// end reported (the kubelet reports them one at a time: the files
// container's exit may come before the sandbox container's OOMKilled),
// and returns its last state.
func (i *instance) ended(d time.Duration) *corev1.Pod {
	deadline := time.After(d)
	for {
		i.mu.Lock()
		pod := i.last
		i.mu.Unlock()
		select {
		case <-i.done:
			if allTerminated(pod) {
				return pod
			}
		default:
		}
		select {
		case <-deadline:
			return pod
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// allTerminated says whether every container of pod has ended.
func allTerminated(pod *corev1.Pod) bool {
	if pod == nil || len(pod.Status.ContainerStatuses) == 0 {
		return false
	}
	for _, c := range pod.Status.ContainerStatuses {
		if c.State.Terminated == nil {
			return false
		}
	}
	return true
}

// describe is the Pod's last state, in short.
func (i *instance) describe() string {
	i.mu.Lock()
	pod := i.last
	i.mu.Unlock()
	if pod == nil {
		return "no state seen"
	}
	parts := []string{"phase " + string(pod.Status.Phase)}
	for _, c := range pod.Status.Conditions {
		if c.Status != corev1.ConditionTrue && c.Message != "" {
			parts = append(parts, string(c.Type)+": "+c.Message)
		}
	}
	for _, c := range pod.Status.ContainerStatuses {
		if w := c.State.Waiting; w != nil {
			parts = append(parts, c.Name+" waiting: "+w.Reason+" "+w.Message)
		}
	}
	return strings.Join(parts, "; ")
}

// streamError is the error of an exec stream that broke: the sandbox's
// end if it ended, else err.
func (i *instance) streamError(what string, err error) error {
	if e := i.alive(); e != nil {
		return fmt.Errorf("%s: %w", what, e)
	}
	return fmt.Errorf("%s: the exec stream failed: %w", what, err)
}

// Destroy deletes the Pod at once and ends every process.
func (i *instance) Destroy(ctx context.Context) error {
	i.mu.Lock()
	first := !i.stopped
	i.stopped = true
	i.mu.Unlock()
	i.end(fmt.Errorf("sandbox %s: %w", i.id, sandbox.ErrDestroyed))
	if !first {
		return nil
	}
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	if err := i.b.deletePod(dctx, i.pod); err != nil {
		return fmt.Errorf("sandbox %s: delete its Pod: %w", i.id, err)
	}
	return nil
}

// SetRecord stores rec in the Pod's annotations and marks the Pod
// recorded, so that other replicas find it.
func (i *instance) SetRecord(ctx context.Context, rec sandbox.Record) error {
	b, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	now := time.Now().UTC().Format(time.RFC3339Nano)
	patch := map[string]any{"metadata": map[string]any{
		"labels":      map[string]string{labelRecorded: "true"},
		"annotations": map[string]string{annRecord: string(b), annTouched: now},
	}}
	return i.patch(ctx, patch)
}

func (i *instance) patch(ctx context.Context, patch any) error {
	body, err := json.Marshal(patch)
	if err != nil {
		return err
	}
	pod, err := i.b.client.CoreV1().Pods(i.b.ns).Patch(ctx, i.pod, types.MergePatchType, body, metav1.PatchOptions{})
	if apierrors.IsNotFound(err) {
		return fmt.Errorf("sandbox %s: its Pod is gone: %w", i.id, sandbox.ErrDestroyed)
	}
	if err != nil {
		return fmt.Errorf("sandbox %s: patch its Pod: %w", i.id, err)
	}
	i.observe(pod, false)
	return nil
}

// touchEvery coalesces Touch: the Pod's annotation is written at most
// this often.
const touchEvery = 5 * time.Second

// Touch writes the time of use into the Pod's annotations, in the
// background and at most every touchEvery.
func (i *instance) Touch() {
	i.touchMu.Lock()
	if time.Since(i.touchedAt) < touchEvery || i.alive() != nil {
		i.touchMu.Unlock()
		return
	}
	i.touchedAt = time.Now()
	i.touchMu.Unlock()
	if !i.touching.CompareAndSwap(false, true) {
		return
	}
	go func() {
		defer i.touching.Store(false)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		now := time.Now().UTC().Format(time.RFC3339Nano)
		if err := i.patch(ctx, map[string]any{"metadata": map[string]any{"annotations": map[string]string{annTouched: now}}}); err != nil {
			i.b.log.Debug("touch failed", "sandbox", i.id, "err", err)
		}
	}()
}

// Touched is the touch time of the Pod's last known state.
func (i *instance) Touched() time.Time {
	i.mu.Lock()
	defer i.mu.Unlock()
	if i.last == nil {
		return time.Time{}
	}
	return podTouched(i.last)
}

// podTouched reads a Pod's touch time.
func podTouched(pod *corev1.Pod) time.Time {
	t, err := time.Parse(time.RFC3339Nano, pod.Annotations[annTouched])
	if err != nil {
		return time.Time{}
	}
	return t
}

// podRecord reads a Pod's record, if it has one.
func podRecord(pod *corev1.Pod) (sandbox.Record, bool) {
	var rec sandbox.Record
	s, ok := pod.Annotations[annRecord]
	if !ok || json.Unmarshal([]byte(s), &rec) != nil {
		return rec, false
	}
	return rec, true
}

// Recover finds a sandbox Pod by its id, with its record.
func (b *Backend) Recover(ctx context.Context, id string) (sandbox.Instance, sandbox.Record, error) {
	if err := b.connect(ctx); err != nil {
		return nil, sandbox.Record{}, err
	}
	if strings.ContainsAny(id, "/ ") || len(id) == 0 || len(id) > 64 {
		return nil, sandbox.Record{}, fmt.Errorf("sandbox %q: %w", id, sandbox.ErrNotFound)
	}
	b.mu.Lock()
	if i := b.insts[podName(id)]; i != nil {
		b.mu.Unlock()
		i.mu.Lock()
		pod := i.last
		i.mu.Unlock()
		if rec, ok := podRecord(pod); ok && i.alive() == nil {
			return i, rec, nil
		}
		return nil, sandbox.Record{}, fmt.Errorf("sandbox %s has no session: %w", id, sandbox.ErrNotFound)
	}
	b.mu.Unlock()
	pod, err := b.client.CoreV1().Pods(b.ns).Get(ctx, podName(id), metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, sandbox.Record{}, fmt.Errorf("sandbox %s: %w", id, sandbox.ErrNotFound)
	}
	if err != nil {
		return nil, sandbox.Record{}, fmt.Errorf("sandbox %s: %w", id, err)
	}
	rec, ok := podRecord(pod)
	if !ok || pod.Labels[labelManaged] != managedBy || pod.Labels[labelSandbox] != id {
		return nil, sandbox.Record{}, fmt.Errorf("sandbox %s has no session: %w", id, sandbox.ErrNotFound)
	}
	if why := podEnded(pod); why != "" || pod.DeletionTimestamp != nil {
		return nil, sandbox.Record{}, fmt.Errorf("sandbox %s ended (%s): %w", id, why, sandbox.ErrNotFound)
	}
	pol, img, err := decodePod(pod)
	if err != nil {
		return nil, sandbox.Record{}, err
	}
	i := b.newInstance(id, pol, img)
	i.observe(pod, false)
	if err := i.waitRunning(ctx, b.opts.StartTimeout); err != nil {
		i.end(err)
		return nil, sandbox.Record{}, err
	}
	return i, rec, nil
}
