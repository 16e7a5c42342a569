#!/usr/bin/env bash
# Readies what the microvm backend's tests need from Debian: QEMU and
# erofs-utils, installed without their recommendations (QEMU's GUI), and
# apt lists that know the guest kernel package, which the tests fetch
# into $AIRLOCK_CI_CACHE/kernels with apt-get download once per kernel
# release (image.FetchKernel; the folder is named after the release, so a
# new Debian kernel is fetched beside the old one). Prints that folder.
set -euo pipefail

cache=${AIRLOCK_CI_CACHE:-/var/cache/airlock-ci}
step() { echo "kernel: $*" >&2; }

export DEBIAN_FRONTEND=noninteractive
if ! command -v qemu-system-x86_64 >/dev/null || ! command -v mkfs.erofs >/dev/null; then
	step "installing qemu-system-x86 and erofs-utils"
	if ! apt-get install -y -qq --no-install-recommends qemu-system-x86 erofs-utils >/dev/null; then
		apt-get update -qq
		apt-get install -y -qq --no-install-recommends qemu-system-x86 erofs-utils >/dev/null
	fi
fi
if ! apt-cache policy linux-image-cloud-amd64 2>/dev/null | grep -q 'Candidate: [0-9]'; then
	step "apt-get update (the lists do not know linux-image-cloud-amd64)"
	apt-get update -qq
fi
mkdir -p "$cache/kernels"
echo "$cache/kernels"
