package kubernetes

import (
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/airlock-sandbox/airlock/sandbox"
)

// Options configure a Backend.
type Options struct {
	// Kubeconfig is the path of a kubeconfig file; "" means $KUBECONFIG,
	// else the in-cluster configuration of a Pod's service account.
	Kubeconfig string
	// Namespace is where sandbox Pods live; "" means the kubeconfig's
	// namespace (the Pod's own, in a cluster), else "default".
	Namespace string
	// RuntimeClass runs the sandbox Pods; "" means "gvisor". A class
	// whose handler is not a sandboxing runtime (gVisor's runsc, Kata)
	// is refused unless Unsandboxed is set, and Capabilities then says
	// the code shares the node's kernel.
	RuntimeClass string
	// Unsandboxed allows a RuntimeClass (or none, with RuntimeClass "-")
	// that runs the code on the node's kernel, such as runc.
	Unsandboxed bool
	// AgentImage is the image of airlock-k8s-agent (see package agent).
	AgentImage string
	// ImageRef names the container image of a resolved sandbox image; nil
	// means DefaultImageRef with the prefix "airlock.local/".
	ImageRef func(sandbox.Image) (string, error)
	// PullPolicy is the Pods' imagePullPolicy; "" means IfNotPresent.
	// The test cluster, which has no registry, uses Never.
	PullPolicy string
	// SeccompProfile names the Localhost seccomp profile of the sandbox
	// Pods, a file in the seccomp folder of each node's kubelet; "" means
	// the runtime's default profile (RuntimeDefault). Under gVisor the
	// default profile breaks threads: runsc answers its ENOSYS refusal of
	// clone3 with EPERM (gVisor ignores errnoRet), on which glibc does not
	// fall back to clone. airlock's profile (`airlock-k8s-agent
	// seccomp-profile` prints it) refuses clone3 so that the fallback
	// works, and refuses what airlock refuses on every container backend
	// (tracing, other processes' memory, raw sockets…).
	SeccompProfile string
	// CPURequest is the share of the policy's CPUs that a sandbox Pod
	// requests (its limit is always the policy's): 0 means 1, requests
	// equal to limits and Pods of the Guaranteed QoS class, so that the
	// scheduler never places more sandboxes on a node than its CPUs hold.
	// Less lets more sandboxes share a node, each still capped at its
	// limit (CPU time is throttled, never taken back); the test cluster,
	// one node of 2 CPUs, uses 0.1. Memory is always requested in full.
	CPURequest float64
	// MaxLifetime is every sandbox Pod's activeDeadlineSeconds: the most
	// it lives even if no airlock process is left to destroy it; 0 means
	// 24 hours (session.Options.MaxTTL's default).
	MaxLifetime time.Duration
	// StartTimeout bounds the wait for a new Pod to run; 0 means 3
	// minutes.
	StartTimeout time.Duration
	// Replica names this airlock process in the labels of the Pods it
	// creates; "" means the host name and the pid.
	Replica string
	// Logger receives what the backend does; nil discards it.
	Logger *slog.Logger
}

// DefaultRuntimeClass is the RuntimeClass of sandbox Pods unless the
// options name another.
const DefaultRuntimeClass = "gvisor"

// DefaultImageRef returns an ImageRef that names a built image
// PREFIX+NAME:DIGEST12, the first 12 hex digits of its digest: the name
// under which test/k8s/images.sh imports it into the node's containerd,
// and under which an operator pushes it to a registry.
func DefaultImageRef(prefix string) func(sandbox.Image) (string, error) {
	return func(img sandbox.Image) (string, error) {
		if img.IsHost() || img.Digest == "" {
			return "", fmt.Errorf("image %q: the kubernetes backend runs built images only (not the host's folders or a bare folder): %w",
				img.Name, sandbox.ErrUnsupported)
		}
		return prefix + img.Name + ":" + ImageTag(img.Digest), nil
	}
}

// ImageTag is the tag of an image with this digest ("sha256:…" or bare
// hex): its first 12 hex digits.
func ImageTag(digest string) string {
	d := digest
	if _, hex, ok := strings.Cut(digest, ":"); ok {
		d = hex
	}
	if len(d) > 12 {
		d = d[:12]
	}
	return d
}

// sandboxingHandlers are the RuntimeClass handlers that give the code a
// kernel of its own.
var sandboxingHandlers = []string{"runsc", "gvisor", "kata", "kata-qemu", "kata-clh", "kata-fc", "kata-dragonball"}

func isSandboxing(handler string) bool {
	for _, h := range sandboxingHandlers {
		if handler == h {
			return true
		}
	}
	return strings.HasPrefix(handler, "kata-")
}
