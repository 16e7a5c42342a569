package kubernetes

import (
	"encoding/json"
	"fmt"

	"github.com/airlock-sandbox/airlock/sandbox"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Labels and annotations of what the backend makes. Another airlock
// process finds a sandbox, its policy and its session's record from them
// alone (see Recover).
const (
	labelManaged  = "app.kubernetes.io/managed-by"
	managedBy     = "airlock"
	labelSandbox  = "airlock.dev/sandbox"
	labelReplica  = "airlock.dev/replica"
	labelRecorded = "airlock.dev/recorded" // "true" once a session holds the sandbox

	annPolicy  = "airlock.dev/policy"  // the normalized sandbox.Policy, JSON
	annImage   = "airlock.dev/image"   // the sandbox.Image, JSON
	annRecord  = "airlock.dev/record"  // the session's sandbox.Record, JSON
	annTouched = "airlock.dev/touched" // RFC 3339: when a session last used it
)

// The sandbox's fixed identity, as on every backend.
const (
	sandboxUID = 1000
	hostname   = "airlock"
)

// Sizes of the Pod's own parts beyond the policy's.
const (
	filesMemory = 48 << 20 // the files container: its init and one file operation at a time
	// The files container's CPU limit, in thousandths of a CPU, on the
	// node's kernel and under a sandboxing runtime (see podFor).
	filesCPUOwn    = 100
	filesCPUShared = 10
	agentVolume    = 32 << 20 // the volume the agent is copied into
	// AgentTasks is what the pids cap allows the agent's own tasks in the
	// sandbox, beyond the policy's cap: init and the files container's
	// init (each a Go program of a few threads), the shepherd of each
	// running process, a file operation. The sandbox user's tasks are
	// counted together by gVisor's RLIMIT_NPROC.
	AgentTasks = 48
)

// podName is the name of sandbox id's Pod.
func podName(id string) string { return "airlock-" + id }

// podFor is the Pod of a new sandbox.
func (b *Backend) podFor(id, image string, spec sandbox.Spec) (*corev1.Pod, error) {
	pol := spec.Policy
	lim := pol.Limits
	polJSON, err := json.Marshal(pol)
	if err != nil {
		return nil, err
	}
	imgJSON, err := json.Marshal(spec.Image)
	if err != nil {
		return nil, err
	}
	no, yes := false, true
	uid := int64(sandboxUID)
	deadline := int64(b.opts.MaxLifetime.Seconds())
	grace := int64(0)
	seccomp := &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}
	if name := b.opts.SeccompProfile; name != "" {
		seccomp = &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeLocalhost, LocalhostProfile: &name}
	}
	secure := func(readOnlyRoot bool) *corev1.SecurityContext {
		return &corev1.SecurityContext{
			RunAsUser: &uid, RunAsGroup: &uid, RunAsNonRoot: &yes,
			AllowPrivilegeEscalation: &no, Privileged: &no,
			ReadOnlyRootFilesystem: &readOnlyRoot,
			Capabilities:           &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
			SeccompProfile:         seccomp,
		}
	}
	mem := resource.NewQuantity(lim.MemoryBytes, resource.BinarySI)
	cpu := resource.NewMilliQuantity(int64(lim.CPUs*1000), resource.DecimalSI)
	share := b.opts.CPURequest
	if share <= 0 || share > 1 {
		share = 1
	}
	cpuRequest := resource.NewMilliQuantity(max(int64(lim.CPUs*1000*share), 1), resource.DecimalSI)
	// Under a sandboxing runtime the Pod's containers share one kernel
	// (gVisor's sentry, Kata's machine), whose CPU quota is the sum of
	// their limits: the files container's own limit would add to the
	// sandbox's CPUs, so it gets a sliver there. On the node's kernel it
	// has a cgroup of its own and needs a share to tar an output.
	filesMilli := int64(filesCPUOwn)
	if isSandboxing(b.handler) {
		filesMilli = filesCPUShared
	}
	filesCPURequest := resource.NewMilliQuantity(max(int64(float64(filesMilli)*share), 1), resource.DecimalSI)
	filesMem := resource.NewQuantity(filesMemory, resource.BinarySI)
	filesCPU := resource.NewMilliQuantity(filesMilli, resource.DecimalSI)
	sizeOf := func(n int64) *resource.Quantity { return resource.NewQuantity(n, resource.BinarySI) }
	scratch := "scratch"
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: podName(id),
			Labels: map[string]string{labelManaged: managedBy, labelSandbox: id, labelReplica: b.replica,
				labelRecorded: "false"},
			Annotations: map[string]string{annPolicy: string(polJSON), annImage: string(imgJSON)},
		},
		Spec: corev1.PodSpec{
			RestartPolicy:                 corev1.RestartPolicyNever,
			ActiveDeadlineSeconds:         &deadline,
			TerminationGracePeriodSeconds: &grace,
			AutomountServiceAccountToken:  &no,
			EnableServiceLinks:            &no,
			HostNetwork:                   false,
			HostPID:                       false,
			HostIPC:                       false,
			Hostname:                      hostname,
			DNSPolicy:                     corev1.DNSNone,
			// no resolver: nothing answers on the loopback
			DNSConfig: &corev1.PodDNSConfig{Nameservers: []string{"127.0.0.1"}},
			SecurityContext: &corev1.PodSecurityContext{
				RunAsUser: &uid, RunAsGroup: &uid, RunAsNonRoot: &yes,
				SeccompProfile: seccomp,
			},
			Containers: []corev1.Container{
				{
					// First, so that it starts first: it puts the agent in
					// the volume the sandbox container waits on.
					Name:            filesContainer,
					Image:           b.opts.AgentImage,
					ImagePullPolicy: corev1.PullPolicy(b.opts.PullPolicy),
					Command:         []string{agentInFiles, "init", "--install", AgentPath},
					SecurityContext: secure(true),
					Env:             []corev1.EnvVar{{Name: "GOMAXPROCS", Value: "1"}},
					Resources: corev1.ResourceRequirements{
						Requests: corev1.ResourceList{corev1.ResourceMemory: *filesMem, corev1.ResourceCPU: *filesCPURequest},
						Limits:   corev1.ResourceList{corev1.ResourceMemory: *filesMem, corev1.ResourceCPU: *filesCPU},
					},
					VolumeMounts: []corev1.VolumeMount{
						{Name: "agent", MountPath: agentDirShared},
						{Name: scratch, MountPath: "/tmp", SubPath: "tmp"},
						{Name: scratch, MountPath: "/workspace/output", SubPath: "output"},
						{Name: "input", MountPath: "/workspace/input"},
					},
				},
				{
					Name:            sandboxContainer,
					Image:           image,
					ImagePullPolicy: corev1.PullPolicy(b.opts.PullPolicy),
					// The agent is there once the files container copied
					// it; the image needs a /bin/sh to wait for it.
					Command:         []string{"/bin/sh", "-c", "until [ -x " + AgentPath + " ]; do sleep 0.02; done; exec " + AgentPath + " init"},
					Env:             []corev1.EnvVar{{Name: "GOMAXPROCS", Value: "1"}},
					WorkingDir:      "/workspace",
					SecurityContext: secure(true),
					Resources: corev1.ResourceRequirements{
						Requests: corev1.ResourceList{corev1.ResourceMemory: *mem, corev1.ResourceCPU: *cpuRequest},
						Limits:   corev1.ResourceList{corev1.ResourceMemory: *mem, corev1.ResourceCPU: *cpu},
					},
					VolumeMounts: []corev1.VolumeMount{
						{Name: "agent", MountPath: agentDirShared, ReadOnly: true},
						{Name: scratch, MountPath: "/tmp", SubPath: "tmp"},
						{Name: scratch, MountPath: "/workspace/output", SubPath: "output"},
						{Name: scratch, MountPath: "/dev/shm", SubPath: "shm"},
						{Name: "input", MountPath: "/workspace/input", ReadOnly: true},
					},
				},
			},
			Volumes: []corev1.Volume{
				{Name: "agent", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{SizeLimit: sizeOf(agentVolume)}}},
				// /tmp, /workspace/output and /dev/shm share the disk cap:
				// one memory-backed volume, its size set by the cap.
				{Name: scratch, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{
					Medium: corev1.StorageMediumMemory, SizeLimit: sizeOf(lim.DiskBytes)}}},
				{Name: "input", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{
					Medium: corev1.StorageMediumMemory, SizeLimit: sizeOf(lim.InputBytes)}}},
			},
		},
	}
	if b.runtimeClass != "" {
		rc := b.runtimeClass
		pod.Spec.RuntimeClassName = &rc
	}
	if b.anchor != nil {
		pod.OwnerReferences = []metav1.OwnerReference{*b.anchor}
	}
	return pod, nil
}

// Where the agent lies in the sandbox container: AgentPath, in the
// volume the files container copies it into. The agent's processes there
// (init, pid 1, and a shepherd per process) run as the sandbox user.
const (
	agentDirShared = "/airlock"
	AgentPath      = agentDirShared + "/agent"
)

// networkPolicyFor is the NetworkPolicy of a sandbox: no traffic in or
// out of its Pod. The runtime already gives the Pod no network (runsc
// with --network=none); this holds the same on clusters whose CNI
// enforces NetworkPolicy, should a Pod ever run without that runtime.
// Egress, where the policy allows it, never takes the Pod's network: the
// proxy's connections travel over the exec API (see egress.go).
func (b *Backend) networkPolicyFor(pod *corev1.Pod) *networkingv1.NetworkPolicy {
	id := pod.Labels[labelSandbox]
	return &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{
			Name:   pod.Name,
			Labels: map[string]string{labelManaged: managedBy, labelSandbox: id},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Pod", Name: pod.Name, UID: pod.UID,
				BlockOwnerDeletion: ptr(true)}},
		},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{labelSandbox: id}},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress},
		},
	}
}

func ptr[T any](v T) *T { return &v }

// decodePod reads the policy and image a Pod was made with.
func decodePod(pod *corev1.Pod) (sandbox.Policy, sandbox.Image, error) {
	var pol sandbox.Policy
	var img sandbox.Image
	if err := json.Unmarshal([]byte(pod.Annotations[annPolicy]), &pol); err != nil {
		return pol, img, fmt.Errorf("pod %s: its policy annotation: %w", pod.Name, err)
	}
	if err := json.Unmarshal([]byte(pod.Annotations[annImage]), &img); err != nil {
		return pol, img, fmt.Errorf("pod %s: its image annotation: %w", pod.Name, err)
	}
	return pol, img, nil
}
