#!/usr/bin/env bash
# Brings up a real single-node Kubernetes cluster on this machine for the
# kubernetes backend's tests, and prints the path of its kubeconfig:
#
#   etcd (Debian's etcd-server), kube-apiserver, kube-controller-manager,
#   kube-scheduler and kubelet (built by build.sh), containerd 2 (built by
#   build.sh) with gVisor's shim and runsc as the RuntimeClass "gvisor"
#   (runsc with --network=none and --oci-seccomp), CNI bridge + host-local
#   from Debian with neither a gateway nor NAT on the host, the pause,
#   agent and python images imported into containerd (images.sh), and the
#   namespace $AIRLOCK_K8S_NAMESPACE (default airlock-test), and airlock's
#   seccomp profile as the kubelet's Localhost profile airlock.json.
#
# Everything listens on 127.0.0.1 on ports of its own; state, logs and
# pid files live in $AIRLOCK_K8S_STATE (default /run/airlock-k8s);
# containerd's content and snapshots in $AIRLOCK_CI_CACHE/k8s/containerd,
# so that images stay imported from one run to the next. down.sh removes
# everything up.sh started or made. Needs root. Progress goes to stderr.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
cache=${AIRLOCK_CI_CACHE:-/var/cache/airlock-ci}
state=${AIRLOCK_K8S_STATE:-/run/airlock-k8s}
namespace=${AIRLOCK_K8S_NAMESPACE:-airlock-test}
node=airlock-node
ready_wait=${AIRLOCK_K8S_WAIT:-120}
export PATH=/usr/local/go/bin:$PATH

# Ports, away from the usual ones so as not to meet another cluster.
etcd_port=23790 etcd_peer=23800 api_port=16443 kubelet_port=10350 kubelet_healthz=10348

step() { echo "k8s up: $(date +%H:%M:%S) $*" >&2; }
fail() { echo "k8s up: error: $*" >&2; exit 1; }

[ "$(id -u)" = 0 ] || fail "needs root"
if [ -f "$state/kubeconfig" ] && [ -f "$state/pids/kube-apiserver" ] && kill -0 "$(cat "$state/pids/kube-apiserver")" 2>/dev/null; then
	step "already up"
	echo "$state/kubeconfig"
	exit 0
fi

step "packages"
missing=()
command -v etcd >/dev/null || missing+=(etcd-server)
[ -x /usr/lib/cni/bridge ] || missing+=(containernetworking-plugins)
command -v openssl >/dev/null || missing+=(openssl)
command -v jq >/dev/null || missing+=(jq)
command -v iptables >/dev/null || missing+=(iptables)
if [ ${#missing[@]} -gt 0 ]; then
	log=$(mktemp)
	{ DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${missing[@]}" || { apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${missing[@]}"; }; } \
		> "$log" 2>&1 || { cat "$log" >&2; rm -f "$log"; fail "apt-get install ${missing[*]} failed"; }
	rm -f "$log"
fi

bins=$(bash "$here/build.sh")
k8s_version=$(tr -d '[:space:]' < "$repo/.ci/versions/kubernetes")
containerd_version=$(tr -d '[:space:]' < "$repo/.ci/versions/containerd")
kube=$bins/kubernetes-$k8s_version
ctrd=$bins/containerd-$containerd_version
shim=$(ls -d "$bins"/shim-*/ | head -1)
runsc=$(bash "$repo/.ci/lib/runsc.sh")

# what a cluster that was not torn down left (mounts, links) goes first
[ ! -d "$state" ] || bash "$here/down.sh"
mkdir -p "$state"/{pki,logs,pids,etcd,cni/conf,cni/ipam,kubelet,containerd}
# what existed before, so that down.sh removes only what this cluster made
ip -o link show | awk -F': ' '{print $2}' | sed 's/@.*//' > "$state/links.before"
ip netns list 2>/dev/null | awk '{print $1}' > "$state/netns.before"

# start NAME ARGS...: runs a daemon in a session of its own, logging to
# $state/logs/NAME.log, its pid in $state/pids/NAME.
start() {
	local name=$1
	shift
	setsid "$@" >> "$state/logs/$name.log" 2>&1 < /dev/null &
	echo $! > "$state/pids/$name"
}

# wait_for WHAT SECONDS CMD...: runs CMD until it succeeds.
wait_for() {
	local what=$1 secs=$2 waited=0
	shift 2
	until "$@" > /dev/null 2>&1; do
		if [ "$waited" -ge $((secs * 10)) ]; then
			tail -n 20 "$state"/logs/*.log >&2 || true
			fail "$what not ready within ${secs}s"
		fi
		sleep 0.1
		waited=$((waited + 1))
	done
}

step "certificates and tokens"
pki=$state/pki
openssl_quiet() { openssl "$@" > /dev/null 2>&1; }
openssl_quiet req -x509 -newkey rsa:2048 -nodes -keyout "$pki/ca.key" -out "$pki/ca.crt" -days 2 -subj "/CN=airlock-test-ca"
cat > "$pki/san.cnf" <<EOF
[ext]
subjectAltName = IP:127.0.0.1, IP:10.0.0.1, DNS:localhost, DNS:kubernetes, DNS:kubernetes.default, DNS:kubernetes.default.svc
EOF
openssl_quiet req -newkey rsa:2048 -nodes -keyout "$pki/apiserver.key" -out "$pki/apiserver.csr" -subj "/CN=kube-apiserver"
openssl_quiet x509 -req -in "$pki/apiserver.csr" -CA "$pki/ca.crt" -CAkey "$pki/ca.key" -CAcreateserial -days 2 \
	-extfile "$pki/san.cnf" -extensions ext -out "$pki/apiserver.crt"
openssl_quiet req -newkey rsa:2048 -nodes -keyout "$pki/kubelet-client.key" -out "$pki/kubelet-client.csr" -subj "/CN=kube-apiserver-kubelet-client/O=system:masters"
openssl_quiet x509 -req -in "$pki/kubelet-client.csr" -CA "$pki/ca.crt" -CAkey "$pki/ca.key" -CAcreateserial -days 2 -out "$pki/kubelet-client.crt"
openssl_quiet genrsa -out "$pki/sa.key" 2048
openssl_quiet rsa -in "$pki/sa.key" -pubout -out "$pki/sa.pub"
token() { head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n'; }
# The controller manager runs every controller under its own name
# (--use-service-account-credentials=false), so it gets the rights of all
# of them.
admin_token=$(token) node_token=$(token) cm_token=$(token) sched_token=$(token)
cat > "$pki/tokens.csv" <<EOF
$admin_token,admin,admin,system:masters
$node_token,system:node:$node,system:node:$node,system:nodes
$cm_token,system:kube-controller-manager,system:kube-controller-manager,system:masters
$sched_token,system:kube-scheduler,system:kube-scheduler
EOF
chmod 600 "$pki"/*

kubeconfig() {
	cat <<EOF
apiVersion: v1
kind: Config
clusters:
- name: airlock-test
  cluster:
    server: https://127.0.0.1:$api_port
    certificate-authority: $pki/ca.crt
users:
- name: user
  user:
    token: $1
contexts:
- name: airlock-test
  context: {cluster: airlock-test, user: user, namespace: $2}
current-context: airlock-test
EOF
}
kubeconfig "$admin_token" "$namespace" > "$state/kubeconfig"
kubeconfig "$node_token" default > "$state/kubelet.kubeconfig"
kubeconfig "$cm_token" default > "$state/controller-manager.kubeconfig"
kubeconfig "$sched_token" default > "$state/scheduler.kubeconfig"
chmod 600 "$state"/*.kubeconfig

step "etcd"
start etcd etcd --name airlock-test --data-dir "$state/etcd" \
	--listen-client-urls "http://127.0.0.1:$etcd_port" --advertise-client-urls "http://127.0.0.1:$etcd_port" \
	--listen-peer-urls "http://127.0.0.1:$etcd_peer" --initial-advertise-peer-urls "http://127.0.0.1:$etcd_peer" \
	--initial-cluster "airlock-test=http://127.0.0.1:$etcd_peer" --quota-backend-bytes 1073741824 --unsafe-no-fsync

step "containerd $containerd_version with gVisor's shim"
cstate=$state/containerd
croot=$cache/k8s/containerd
mkdir -p "$croot"
cat > "$state/runsc.toml" <<EOF
binary_name = "$runsc"
root = "$state/runsc"
log_path = "$state/logs/shim-%ID%.log"
[runsc_config]
  network = "none"
  oci-seccomp = "true"
EOF
cat > "$cstate/config.toml" <<EOF
version = 3
root = "$croot"
state = "$cstate/state"
[grpc]
  address = "$cstate/containerd.sock"
[ttrpc]
  address = "$cstate/containerd.sock.ttrpc"
[plugins."io.containerd.cri.v1.images"]
  snapshotter = "overlayfs"
  [plugins."io.containerd.cri.v1.images".pinned_images]
    sandbox = "airlock.local/pause:1"
[plugins."io.containerd.cri.v1.runtime"]
  restrict_oom_score_adj = true
  enable_selinux = false
  [plugins."io.containerd.cri.v1.runtime".containerd]
    default_runtime_name = "runsc"
    [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runsc]
      runtime_type = "io.containerd.runsc.v1"
      [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runsc.options]
        TypeUrl = "io.containerd.runsc.v1.options"
        ConfigPath = "$state/runsc.toml"
  [plugins."io.containerd.cri.v1.runtime".cni]
    bin_dirs = ["/usr/lib/cni"]
    conf_dir = "$state/cni/conf"
[plugins."io.containerd.grpc.v1.cri"]
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
EOF
cat > "$state/cni/conf/10-airlock.conflist" <<EOF
{"cniVersion": "1.0.0", "name": "airlock-test",
 "plugins": [{"type": "bridge", "bridge": "airlock-k8s0", "isGateway": false, "ipMasq": false, "hairpinMode": false,
   "ipam": {"type": "host-local", "ranges": [[{"subnet": "10.244.77.0/24"}]], "dataDir": "$state/cni/ipam"}}]}
EOF
PATH=$shim:$PATH start containerd "$ctrd/containerd" --config "$cstate/config.toml"
wait_for containerd 30 "$ctrd/ctr" --address "$cstate/containerd.sock" version

step "images"
CTR="$ctrd/ctr --address $cstate/containerd.sock" bash "$here/images.sh" >&2

step "kube-apiserver $k8s_version"
wait_for etcd 30 curl -fsS "http://127.0.0.1:$etcd_port/health"
start kube-apiserver "$kube/kube-apiserver" --etcd-servers "http://127.0.0.1:$etcd_port" \
	--bind-address 127.0.0.1 --advertise-address 127.0.0.1 --secure-port "$api_port" --endpoint-reconciler-type none \
	--service-cluster-ip-range 10.0.0.0/24 --authorization-mode Node,RBAC --token-auth-file "$pki/tokens.csv" \
	--client-ca-file "$pki/ca.crt" --tls-cert-file "$pki/apiserver.crt" --tls-private-key-file "$pki/apiserver.key" \
	--kubelet-client-certificate "$pki/kubelet-client.crt" --kubelet-client-key "$pki/kubelet-client.key" \
	--kubelet-preferred-address-types InternalIP \
	--service-account-issuer https://kubernetes.default.svc --service-account-key-file "$pki/sa.pub" \
	--service-account-signing-key-file "$pki/sa.key" --allow-privileged=false --profiling=false \
	--cert-dir "$pki/apiserver-certs"
kctl() { "$kube/kubectl" --kubeconfig "$state/kubeconfig" "$@"; }
wait_for kube-apiserver 90 kctl get --raw /readyz

step "kube-controller-manager, kube-scheduler"
start kube-controller-manager "$kube/kube-controller-manager" --kubeconfig "$state/controller-manager.kubeconfig" \
	--leader-elect=false --bind-address 127.0.0.1 --secure-port 0 --use-service-account-credentials=false \
	--controllers '*,-serviceaccount-token,-bootstrapsigner,-tokencleaner,-csrsigning,-nodeipam,-route,-cloud-node-lifecycle,-service,-persistentvolume-expander,-attachdetach,-ttl' \
	--profiling=false
start kube-scheduler "$kube/kube-scheduler" --kubeconfig "$state/scheduler.kubeconfig" --leader-elect=false \
	--bind-address 127.0.0.1 --secure-port 0 --profiling=false

step "kubelet"
cat > "$state/kubelet/config.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: 127.0.0.1
port: $kubelet_port
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: $kubelet_healthz
cgroupDriver: cgroupfs
failCgroupV1: false
failSwapOn: false
containerRuntimeEndpoint: unix://$cstate/containerd.sock
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: false}
  x509: {clientCAFile: $pki/ca.crt}
authorization: {mode: AlwaysAllow}
resolvConf: ""
serializeImagePulls: false
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard: {memory.available: "1Mi", nodefs.available: "1%", imagefs.available: "1%", nodefs.inodesFree: "1%"}
podPidsLimit: -1
maxPods: 250
registerNode: true
syncFrequency: 10s
fileCheckFrequency: 60s
nodeStatusUpdateFrequency: 4s
EOF
# airlock's seccomp profile as the Localhost profile airlock.json (the
# tests' Options.SeccompProfile): RuntimeDefault breaks threads under
# gVisor (see kubernetes.Options.SeccompProfile)
mkdir -p "$state/kubelet/root/seccomp"
(cd "$repo" && go run ./cmd/airlock-k8s-agent seccomp-profile) > "$state/kubelet/root/seccomp/airlock.json"
# The API server reaches the kubelet (exec, logs) at the node's address,
# and the kubelet refuses to report a loopback one. With an external cloud
# provider it reports none and keeps what is set: this script plays the
# cloud controller, setting 127.0.0.1 and removing the taint that waits
# for it.
start kubelet "$kube/kubelet" --config "$state/kubelet/config.yaml" --kubeconfig "$state/kubelet.kubeconfig" \
	--hostname-override "$node" --cloud-provider external --root-dir "$state/kubelet/root" --cert-dir "$state/kubelet/pki"
node_known() { kctl get node "$node"; }
wait_for "node $node to register" "$ready_wait" node_known
kctl patch node "$node" --subresource=status --type=merge \
	-p '{"status":{"addresses":[{"type":"InternalIP","address":"127.0.0.1"},{"type":"Hostname","address":"'"$node"'"}]}}' > /dev/null
kctl taint node "$node" node.cloudprovider.kubernetes.io/uninitialized- > /dev/null 2>&1 || true
node_ready() { kctl get node "$node" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}' | grep -qx True; }
wait_for "node $node" "$ready_wait" node_ready

step "RuntimeClass gvisor, namespace $namespace"
kctl apply -f - > /dev/null <<EOF
apiVersion: node.k8s.io/v1
kind: RuntimeClass
metadata: {name: gvisor}
handler: runsc
---
apiVersion: v1
kind: Namespace
metadata: {name: $namespace}
EOF
sa_ready() { kctl -n "$namespace" get serviceaccount default; }
wait_for "the default ServiceAccount" 60 sa_ready
step "ready"
echo "$state/kubeconfig"
