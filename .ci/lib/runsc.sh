#!/usr/bin/env bash
# Builds gVisor's runsc from the Go module gvisor.dev/gvisor at the version
# pinned in .ci/versions/runsc, caches it in
# $AIRLOCK_CI_CACHE/runsc-VERSION/runsc and prints that path. A cached
# binary that runs is reused. Progress goes to stderr, one line a step.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cache=${AIRLOCK_CI_CACHE:-/var/cache/airlock-ci}
version=$(tr -d '[:space:]' < "$repo/.ci/versions/runsc")
dest=$cache/runsc-$version
bin=$dest/runsc

step() { echo "runsc: $*" >&2; }
fail() { echo "runsc: error: $*" >&2; exit 1; }

mkdir -p "$cache"
exec 9>"$cache/.runsc.lock"
flock 9

if [ -x "$bin" ] && "$bin" --version >/dev/null 2>&1; then
	step "cached $version"
	echo "$bin"
	exit 0
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

step "downloading gvisor.dev/gvisor@$version"
(cd "$tmp" && go mod download -json "gvisor.dev/gvisor@$version") > "$tmp/module.json" 2> "$tmp/download.log" ||
	{ cat "$tmp/download.log" "$tmp/module.json" >&2; fail "go mod download failed"; }
src=$(jq -r .Dir "$tmp/module.json")
[ -d "$src/runsc" ] || fail "module folder $src has no runsc"

# The module cache is read-only; build from a writable copy of the module,
# which is its own main module with its go.mod and go.sum.
step "building runsc (CGO_ENABLED=0)"
cp -R "$src" "$tmp/src"
chmod -R u+w "$tmp/src"
(cd "$tmp/src" && CGO_ENABLED=0 GOFLAGS=-mod=readonly go build -trimpath \
	-ldflags "-X gvisor.dev/gvisor/runsc/version.version=$version" -o "$tmp/runsc" ./runsc) > "$tmp/build.log" 2>&1 ||
	{ cat "$tmp/build.log" >&2; fail "go build ./runsc failed"; }
"$tmp/runsc" --version > "$tmp/version.txt" 2>&1 || { cat "$tmp/version.txt" >&2; fail "the new runsc does not run"; }
grep -q "$version" "$tmp/version.txt" || fail "runsc --version does not name $version: $(head -1 "$tmp/version.txt")"

mkdir -p "$dest"
install -m 0755 "$tmp/runsc" "$dest/.runsc.new"
mv -f "$dest/.runsc.new" "$bin"
for old in "$cache"/runsc-*; do
	[ "$old" = "$dest" ] || rm -rf "$old"
done
step "installed $(head -1 "$tmp/version.txt")"
echo "$bin"
