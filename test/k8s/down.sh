#!/usr/bin/env bash
# Tears down what up.sh started: deletes the cluster's Pods first (so that
# containerd and runsc end their sandboxes themselves), then stops the
# daemons, kills any runsc or shim process left of this cluster, unmounts
# what lies under its state folders, and removes the CNI bridge, the veths
# and network namespaces it made, and the kubelet's cgroups and iptables
# chains. Safe to run when nothing is up. Progress goes to stderr.
set -uo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
cache=${AIRLOCK_CI_CACHE:-/var/cache/airlock-ci}
state=${AIRLOCK_K8S_STATE:-/run/airlock-k8s}
step() { echo "k8s down: $*" >&2; }

[ -d "$state" ] || { step "nothing is up"; exit 0; }

alive() { [ -f "$state/pids/$1" ] && kill -0 "$(cat "$state/pids/$1")" 2>/dev/null; }

if alive kube-apiserver && [ -f "$state/kubeconfig" ]; then
	kubectl=$(ls "$cache"/k8s/kubernetes-*/kubectl 2>/dev/null | head -1)
	if [ -n "$kubectl" ]; then
		step "deleting every Pod"
		timeout 60 "$kubectl" --kubeconfig "$state/kubeconfig" delete pods --all --all-namespaces --wait=true --timeout=50s > /dev/null 2>&1 || true
	fi
fi

# stop NAME: TERM, then KILL after 10 s.
stop() {
	alive "$1" || return 0
	local pid waited=0
	pid=$(cat "$state/pids/$1")
	kill -TERM "$pid" 2>/dev/null
	while kill -0 "$pid" 2>/dev/null; do
		if [ $waited -ge 100 ]; then
			kill -KILL "$pid" 2>/dev/null
			break
		fi
		sleep 0.1
		waited=$((waited + 1))
	done
	step "stopped $1"
}
for d in kubelet kube-scheduler kube-controller-manager kube-apiserver containerd etcd; do
	stop "$d"
done

# Processes of this cluster that outlived their daemons: shims and runsc,
# found by the state folder on their command lines.
for round in 1 2 3; do
	left=$(grep -lsF -- "$state" /proc/[0-9]*/cmdline 2>/dev/null | sed 's|/proc/\([0-9]*\)/cmdline|\1|' | grep -vx "$$" || true)
	[ -n "$left" ] || break
	for pid in $left; do
		kill -KILL "$pid" 2>/dev/null && step "killed $pid: $(tr '\0' ' ' < "/proc/$pid/cmdline" 2>/dev/null | cut -c1-120)"
	done
	sleep 0.5
done

# Mounts under the state folder and containerd's root (snapshots, shm,
# emptyDirs, the netns of Pods), deepest first.
croot=$cache/k8s/containerd
for round in 1 2 3; do
	mounts=$(awk -v s="$state/" -v r="$croot/" 'index($5, s) == 1 || index($5, r) == 1 { print $5 }' /proc/self/mountinfo | sort -r)
	[ -n "$mounts" ] || break
	for m in $mounts; do
		umount -l "$m" 2>/dev/null
	done
done

# Network namespaces and links that the cluster made.
if [ -f "$state/netns.before" ]; then
	for ns in $(ip netns list 2>/dev/null | awk '{print $1}'); do
		case $ns in cni-*) grep -qx "$ns" "$state/netns.before" || ip netns delete "$ns" 2>/dev/null ;; esac
	done
fi
ip link show airlock-k8s0 > /dev/null 2>&1 && ip link delete airlock-k8s0 && step "removed the bridge airlock-k8s0"
if [ -f "$state/links.before" ]; then
	for l in $(ip -o link show | awk -F': ' '{print $2}' | sed 's/@.*//'); do
		case $l in veth*) grep -qx "$l" "$state/links.before" || ip link delete "$l" 2>/dev/null ;; esac
	done
fi

# The kubelet's chains: its canaries, KUBE-FIREWALL and the hint of its iptables mode
# (no kube-proxy here).
for table in mangle nat filter; do
	for chain in KUBE-KUBELET-CANARY KUBE-FIREWALL KUBE-IPTABLES-HINT; do
		for ipt in iptables ip6tables; do
			if $ipt -t $table -S "$chain" > /dev/null 2>&1; then
				# the jumps to it first (INPUT and OUTPUT jump to KUBE-FIREWALL)
				$ipt -t $table -S | grep -- "-j $chain\$" | sed 's/^-A /-D /' | while read -r rule; do
					# shellcheck disable=SC2086
					$ipt -t $table $rule 2>/dev/null
				done
				$ipt -t $table -F "$chain" 2>/dev/null
				$ipt -t $table -X "$chain" 2>/dev/null
			fi
		done
	done
done

# The kubelet's cgroups (cgroupfs driver), leaves first.
for hier in /sys/fs/cgroup/*/ /sys/fs/cgroup/; do
	[ -d "$hier/kubepods" ] || [ -d "$hier/kubepods.slice" ] || continue
	find "$hier"/kubepods* -depth -type d -exec rmdir {} \; 2>/dev/null
done

rm -rf "$state"
step "down"
