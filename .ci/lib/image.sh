#!/usr/bin/env bash
# Builds the built-in "python" image with the airlock binary into
# $AIRLOCK_CI_CACHE/home-KEY and prints that folder, to be used as
# AIRLOCK_HOME. KEY hashes the image package's source files and built-in
# definitions (the same key image/build_linux_test.go computes), so a
# change to either builds afresh; otherwise the cached image is reused.
# Progress goes to stderr, one line a step.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cache=${AIRLOCK_CI_CACHE:-/var/cache/airlock-ci}

step() { echo "image: $*" >&2; }
fail() { echo "image: error: $*" >&2; exit 1; }

# sha256sum of the sorted source names, hashed again: 16 hex digits.
key=$(cd "$repo/image" && printf '%s\n' *.go definitions/*.json | grep -v '_test\.go$' | LC_ALL=C sort |
	xargs sha256sum | sha256sum | cut -c1-16)
home=$cache/home-$key

mkdir -p "$cache"
exec 9>"$cache/.image.lock"
flock 9

if [ -f "$home/images/python/manifest.json" ]; then
	step "cached python image ($key)"
	echo "$home"
	exit 0
fi

missing=()
command -v debootstrap >/dev/null || missing+=(debootstrap)
command -v bwrap >/dev/null || missing+=(bubblewrap)
command -v npm >/dev/null || missing+=(npm)
if [ ${#missing[@]} -gt 0 ]; then
	step "installing ${missing[*]}"
	log=$(mktemp)
	{ apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${missing[@]}"; } > "$log" 2>&1 ||
		{ cat "$log" >&2; rm -f "$log"; fail "apt-get install ${missing[*]} failed"; }
	rm -f "$log"
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
step "building airlock"
(cd "$repo" && go build -o "$tmp/airlock" ./cmd/airlock) > "$tmp/go.log" 2>&1 ||
	{ cat "$tmp/go.log" >&2; fail "go build ./cmd/airlock failed"; }

step "building the python image ($key); this takes minutes"
start=$SECONDS
AIRLOCK_HOME=$home "$tmp/airlock" image build python --replace > /dev/null 2> "$tmp/build.log" ||
	{ cat "$tmp/build.log" >&2; fail "airlock image build python failed"; }
step "built in $((SECONDS - start))s: $(tail -1 "$tmp/build.log" | sed 's/^ *//')"

for old in "$cache"/home-*; do
	[ "$old" = "$home" ] || rm -rf "$old"
done
echo "$home"
