package main

import (
	"context"
	"fmt"
	"os/exec"
	"strconv"
	"strings"

	"github.com/airlock-sandbox/airlock/backend/docker"
	"github.com/airlock-sandbox/airlock/backend/gvisor"
	"github.com/airlock-sandbox/airlock/backend/kubernetes"
	"github.com/airlock-sandbox/airlock/backend/microvm"
	"github.com/airlock-sandbox/airlock/backend/native"
	"github.com/airlock-sandbox/airlock/image"
	"github.com/airlock-sandbox/airlock/sandbox"
	"github.com/airlock-sandbox/airlock/session"
	"github.com/go-logr/logr"
	"k8s.io/klog/v2"
)

// backendNames lists the backends this binary can run, in doctor's order.
var backendNames = []string{"native", "docker", "gvisor", "microvm", "kubernetes"}

// backendUsage is the help of a --backend flag.
var backendUsage = "backend: " + strings.Join(backendNames, ", ") + " (env AIRLOCK_BACKEND)"

// backendOptions are the settings of a backend that the command line
// gives; they apply to the backends that know them.
type backendOptions struct {
	// runtime is the Docker runtime, runc or runsc.
	runtime string
}

// newBackend returns the named backend. The caller closes it.
func newBackend(env *cliEnv, name string, o backendOptions) (sandbox.Backend, error) {
	if o.runtime != "" && name != "docker" {
		return nil, fmt.Errorf("--runtime applies to --backend docker only: %w", sandbox.ErrInvalid)
	}
	switch name {
	case "native":
		return native.New(native.Options{}), nil
	case "docker":
		rt := o.runtime
		if rt == "" {
			rt = env.getenv("AIRLOCK_DOCKER_RUNTIME")
		}
		if rt != "" && rt != docker.RuntimeRunc && rt != docker.RuntimeRunsc {
			return nil, fmt.Errorf("docker runtime %q: want %s or %s: %w", rt, docker.RuntimeRunc, docker.RuntimeRunsc, sandbox.ErrInvalid)
		}
		return docker.New(docker.Options{Runtime: rt}), nil
	case "gvisor":
		runsc := env.getenv("AIRLOCK_RUNSC")
		if runsc == "" {
			runsc, _ = exec.LookPath("runsc")
		}
		return gvisor.New(gvisor.Options{Runsc: runsc}), nil
	case "kubernetes":
		return kubernetes.New(kubernetesOptions(env)), nil
	case "microvm":
		return microvm.New(microvm.Options{Accel: env.getenv("AIRLOCK_MICROVM_ACCEL")}), nil
	}
	return nil, fmt.Errorf("unknown backend %q (have: %s): %w", name, strings.Join(backendNames, ", "), sandbox.ErrInvalid)
}

// newManager opens a session manager over one backend, resolving image
// names through the image store when there is one. Closing it closes the
// backend.
func newManager(ctx context.Context, env *cliEnv, be sandbox.Backend) (*session.Manager, error) {
	return session.New(ctx, session.Options{Backends: map[string]sandbox.Backend{be.Name(): be}, Images: imageStoreLookup(env)})
}

// imageStoreLookup is the default image store as a Lookup, nil when there
// is none (an untyped nil, for callers that compare with nil).
func imageStoreLookup(env *cliEnv) image.Lookup {
	if store := imageStore(env); store != nil {
		return store
	}
	return nil
}

// imageStore opens the default image store, or returns nil when there is
// none to open (then only "host" and folder paths name images).
func imageStore(env *cliEnv) *image.Store {
	dir, err := image.DefaultDir(env.getenv)
	if err != nil {
		return nil
	}
	s, err := image.OpenStore(dir)
	if err != nil {
		return nil
	}
	return s
}

// kubernetesOptions reads the kubernetes backend's settings from the
// environment: the cluster from KUBECONFIG (else the Pod's in-cluster
// configuration), the rest from AIRLOCK_K8S_* (see docs/KUBERNETES.md).
func kubernetesOptions(env *cliEnv) kubernetes.Options {
	// client-go reports a closed stream's reader and the like through
	// klog, on stderr: noise beside airlock's own errors, which say what
	// failed
	klog.SetLogger(logr.Discard())
	o := kubernetes.Options{
		Namespace:    env.getenv("AIRLOCK_K8S_NAMESPACE"),
		RuntimeClass: env.getenv("AIRLOCK_K8S_RUNTIME_CLASS"),
		Unsandboxed:  env.getenv("AIRLOCK_K8S_UNSANDBOXED") == "1",
		AgentImage:   env.getenv("AIRLOCK_K8S_AGENT_IMAGE"),
		PullPolicy:   env.getenv("AIRLOCK_K8S_PULL_POLICY"),
		Replica:      env.getenv("AIRLOCK_REPLICA"),

		SeccompProfile: env.getenv("AIRLOCK_K8S_SECCOMP_PROFILE"),
	}
	if share, err := strconv.ParseFloat(env.getenv("AIRLOCK_K8S_CPU_REQUEST"), 64); err == nil {
		o.CPURequest = share
	}
	if prefix := env.getenv("AIRLOCK_K8S_IMAGE_PREFIX"); prefix != "" {
		o.ImageRef = kubernetes.DefaultImageRef(prefix)
	}
	return o
}
