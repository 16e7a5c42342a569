#!/usr/bin/env bash
# Imports into the test cluster's containerd (namespace k8s.io, where the
# kubelet looks) the images its Pods run, each only when it is not there
# yet: the pause image (build.sh), airlock's agent image (built here from
# cmd/airlock-k8s-agent) and the built python image of $AIRLOCK_HOME's
# image store, as airlock.local/python:DIGEST12 (what the backend's
# DefaultImageRef names). $CTR is the ctr command line to use.
# No $AIRLOCK_HOME, or no python image in it: the python image is left out
# (the tests that need it say so).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
cache=${AIRLOCK_CI_CACHE:-/var/cache/airlock-ci}/k8s
: "${CTR:?set CTR to the ctr command line}"
export PATH=/usr/local/go/bin:$PATH

step() { echo "k8s images: $*" >&2; }
fail() { echo "k8s images: error: $*" >&2; exit 1; }

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

have() { $CTR -n k8s.io images ls -q 2>/dev/null | grep -qx "$1"; }
import() { $CTR -n k8s.io images import --all-platforms "$1" > "$tmp/import.log" 2>&1 || { cat "$tmp/import.log" >&2; fail "ctr import $1 failed"; }; }

pause=$(ls "$cache"/pause-*.tar | head -1)
if ! have airlock.local/pause:1 || [ "$pause" -nt "$cache/.pause-imported" ]; then
	step "pause"
	import "$pause"
	touch "$cache/.pause-imported"
fi

# The agent image: the static agent at /airlock-k8s-agent, nothing else.
version=$(sed -n 's/^const Version = "\(.*\)"$/\1/p' "$repo/backend/kubernetes/agent/proto.go")
mkdir -p "$tmp/agent/rootfs"
(cd "$repo" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$tmp/agent/rootfs/airlock-k8s-agent" ./cmd/airlock-k8s-agent) ||
	fail "go build ./cmd/airlock-k8s-agent failed"
sum=$(sha256sum "$tmp/agent/rootfs/airlock-k8s-agent" | cut -c1-12)
if ! have "airlock.local/airlock-k8s-agent:$version" || [ "$(cat "$cache/.agent-imported" 2>/dev/null)" != "$sum" ]; then
	step "agent (protocol $version, binary $sum)"
	bash "$here/ociarchive.sh" "$tmp/agent/rootfs" "airlock.local/airlock-k8s-agent:$version" /airlock-k8s-agent > "$tmp/agent.tar"
	import "$tmp/agent.tar"
	echo "$sum" > "$cache/.agent-imported"
fi

manifest=${AIRLOCK_HOME:-}/images/python/manifest.json
if [ -z "${AIRLOCK_HOME:-}" ] || [ ! -f "$manifest" ]; then
	step "no python image in \$AIRLOCK_HOME (${AIRLOCK_HOME:-unset}): left out"
	exit 0
fi
digest=$(jq -r .digest "$manifest")
tag=${digest#sha256:}
tag=${tag:0:12}
if have "airlock.local/python:$tag"; then
	step "python $tag (imported before)"
	exit 0
fi
step "python $tag: archiving its root and importing it"
start=$SECONDS
bash "$here/ociarchive.sh" "$AIRLOCK_HOME/images/python/rootfs" "airlock.local/python:$tag" > "$tmp/python.tar"
import "$tmp/python.tar"
# older tags of the python image are of no use any more
for old in $($CTR -n k8s.io images ls -q | grep '^airlock.local/python:' | grep -vx "airlock.local/python:$tag"); do
	$CTR -n k8s.io images rm "$old" > /dev/null || true
done
step "python imported in $((SECONDS - start))s"
