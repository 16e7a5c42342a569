#!/usr/bin/env bash
# Builds what the test cluster runs and is not in Debian, each cached in
# $AIRLOCK_CI_CACHE/k8s keyed by its version (and, for the ones patched or
# written here, by the hash of what this script does to them):
#
#   kubernetes-VERSION/   kube-apiserver kube-controller-manager
#                         kube-scheduler kubelet kubectl, from the module
#                         k8s.io/kubernetes (.ci/versions/kubernetes)
#   containerd-VERSION/   containerd and ctr, from the module
#                         github.com/containerd/containerd/v2
#                         (.ci/versions/containerd)
#   shim-GVISOR-KEY/      containerd-shim-runsc-v1, from the module
#                         gvisor.dev/gvisor (.ci/versions/runsc)
#   pause-KEY.tar         the pause image, an OCI archive
#
# (the parts named as arguments, default all) and prints the folder "k8s"
# under the cache. Each part that is cached is
# reused. Progress goes to stderr, one line a step.
#
# Why these and not Debian's: Debian 12 has no kubelet or API server;
# its containerd (1.6) cannot read the start reply of a current gVisor
# shim (a JSON object where 1.6 wants a bare address), and Kubernetes
# from 1.36 on wants containerd 2. The gVisor shim sets its own
# oom_score_adj to -999 and gives up when that fails, which it does on a
# host without CAP_SYS_RESOURCE (this VM): the copy built here goes on
# with the score it has; nothing else of the shim changes.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cache=${AIRLOCK_CI_CACHE:-/var/cache/airlock-ci}/k8s
k8s_version=$(tr -d '[:space:]' < "$repo/.ci/versions/kubernetes")
containerd_version=$(tr -d '[:space:]' < "$repo/.ci/versions/containerd")
gvisor_version=$(tr -d '[:space:]' < "$repo/.ci/versions/runsc")
export PATH=/usr/local/go/bin:$PATH

step() { echo "k8s build: $*" >&2; }
fail() { echo "k8s build: error: $*" >&2; exit 1; }

mkdir -p "$cache"

tmp=$(mktemp -d)
trap 'chmod -R u+w "$tmp" 2>/dev/null; rm -rf "$tmp"' EXIT

# module_copy MODULE@VERSION DEST: a writable copy of the module's source.
module_copy() {
	local json
	json=$(cd "$tmp" && go mod download -json "$1" 2> "$tmp/download.log") ||
		{ cat "$tmp/download.log" >&2; echo "$json" >&2; fail "go mod download $1 failed"; }
	cp -R "$(jq -r .Dir <<< "$json")" "$2"
	chmod -R u+w "$2"
}

# keep BIN... DEST: moves the built binaries into DEST atomically and
# removes the other versions of the same part.
keep() {
	local dest=${*: -1} part=$1
	shift
	mkdir -p "$dest.new"
	while [ $# -gt 1 ]; do
		install -m 0755 "$1" "$dest.new/"
		shift
	done
	rm -rf "$dest"
	mv "$dest.new" "$dest"
	for old in "$cache/$part"-*; do
		[ "$old" = "$dest" ] || rm -rf "$old"
	done
}

build_kubernetes() {
	local dest=$cache/kubernetes-$k8s_version bins="kube-apiserver kube-controller-manager kube-scheduler kubelet kubectl"
	local ok=1 b
	for b in $bins; do [ -x "$dest/$b" ] || ok=0; done
	if [ $ok = 1 ]; then
		step "cached kubernetes $k8s_version"
		return
	fi
	step "building kubernetes $k8s_version (about 5 minutes on 2 cores)"
	local src=$tmp/kubernetes staging=v0.${k8s_version#v1.}
	module_copy "k8s.io/kubernetes@$k8s_version" "$src"
	# The module points its staging modules at folders inside itself with
	# replace directives, which a module build cannot use: drop them and
	# require the published staging modules of the same release instead.
	rm -f "$src/go.work" "$src/go.work.sum"
	awk '/^replace \($/ { skip = 1; next } skip && /^\)$/ { skip = 0; next } !skip' "$src/go.mod" |
		sed -E "s#^(\s+k8s\.io/[a-z0-9-]+) v0\.0\.0\$#\1 $staging#" > "$tmp/go.mod"
	mv "$tmp/go.mod" "$src/go.mod"
	! grep -q '=> ./staging' "$src/go.mod" || fail "a replace of a staging module is left in go.mod"
	local minor=${k8s_version#v1.}
	minor=${minor%%.*}
	local pkg=k8s.io/component-base/version
	local ldflags="-s -w -X $pkg.gitVersion=$k8s_version -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor -X $pkg.gitTreeState=clean"
	local cmds=() out=()
	for b in $bins; do
		cmds+=("./cmd/$b")
		out+=("$tmp/bin/$b")
	done
	mkdir -p "$tmp/bin"
	(cd "$src" && CGO_ENABLED=0 GOFLAGS=-mod=mod go build -trimpath -ldflags "$ldflags" -o "$tmp/bin/" "${cmds[@]}") \
		> "$tmp/k8s.log" 2>&1 || { tail -n 40 "$tmp/k8s.log" >&2; fail "go build of kubernetes failed"; }
	"$tmp/bin/kubectl" version --client 2>/dev/null | grep -q "$k8s_version" || fail "kubectl does not say $k8s_version"
	keep kubernetes "${out[@]}" "$dest"
	chmod -R u+w "$src"
	rm -rf "$src"
}

build_containerd() {
	local dest=$cache/containerd-$containerd_version
	if [ -x "$dest/containerd" ] && [ -x "$dest/ctr" ]; then
		step "cached containerd $containerd_version"
		return
	fi
	step "building containerd $containerd_version"
	local src=$tmp/containerd pkg=github.com/containerd/containerd/v2/version
	module_copy "github.com/containerd/containerd/v2@$containerd_version" "$src"
	mkdir -p "$tmp/bin"
	(cd "$src" && CGO_ENABLED=0 GOFLAGS=-mod=mod go build -trimpath -tags "no_btrfs no_devmapper no_zfs" \
		-ldflags "-s -w -X $pkg.Version=$containerd_version" -o "$tmp/bin/" ./cmd/containerd ./cmd/ctr) \
		> "$tmp/containerd.log" 2>&1 || { tail -n 40 "$tmp/containerd.log" >&2; fail "go build of containerd failed"; }
	keep containerd "$tmp/bin/containerd" "$tmp/bin/ctr" "$dest"
}

# shim_patch makes the shim go on when it cannot lower its oom_score_adj.
shim_patch() {
	local f=$1/pkg/shim/v1/manager.go
	grep -q 'return shim.BootstrapParams{}, fmt.Errorf("failed to set OOM Score on shim: %w", err)' "$f" ||
		fail "$f: the OOM score call is not where this script expects it; look at the shim again"
	# Nothing may be printed instead: containerd reads the start reply
	# from the shim's output, and a log line there breaks it.
	sed -i 's|return shim.BootstrapParams{}, fmt.Errorf("failed to set OOM Score on shim: %w", err)|_ = err // no CAP_SYS_RESOURCE: the shim keeps the score it has|' "$f"
}

build_shim() {
	local key dest
	key=$(declare -f shim_patch | sha256sum | cut -c1-8)
	dest=$cache/shim-$gvisor_version-$key
	if [ -x "$dest/containerd-shim-runsc-v1" ]; then
		step "cached gVisor's containerd shim"
		return
	fi
	step "building gVisor's containerd shim ($gvisor_version)"
	local src=$tmp/gvisor
	module_copy "gvisor.dev/gvisor@$gvisor_version" "$src"
	shim_patch "$src"
	mkdir -p "$tmp/bin"
	(cd "$src" && CGO_ENABLED=0 GOFLAGS=-mod=readonly go build -trimpath -o "$tmp/bin/containerd-shim-runsc-v1" ./shim) \
		> "$tmp/shim.log" 2>&1 || { tail -n 40 "$tmp/shim.log" >&2; fail "go build of the shim failed"; }
	keep shim "$tmp/bin/containerd-shim-runsc-v1" "$dest"
}

build_pause() {
	local key dest
	key=$(cat "$repo/test/k8s/pause/main.go" "$repo/test/k8s/ociarchive.sh" | sha256sum | cut -c1-12)
	dest=$cache/pause-$key.tar
	if [ -s "$dest" ]; then
		step "cached pause image"
		return
	fi
	step "building the pause image"
	mkdir -p "$tmp/pause/rootfs"
	(cd "$repo/test/k8s/pause" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$tmp/pause/rootfs/pause" .) ||
		fail "go build of the pause program failed"
	bash "$repo/test/k8s/ociarchive.sh" "$tmp/pause/rootfs" airlock.local/pause:1 /pause > "$dest.new"
	mv "$dest.new" "$dest"
	for old in "$cache"/pause-*.tar; do
		[ "$old" = "$dest" ] || rm -f "$old"
	done
}

# each part under a lock of its own, so that two builds of one part never
# race and different parts may build at once
for part in ${@:-kubernetes containerd shim pause}; do
	(
		exec 9>"$cache/.build-$part.lock"
		flock 9
		"build_$part"
	)
done
echo "$cache"
