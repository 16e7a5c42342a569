#!/usr/bin/env bash
# ociarchive.sh ROOTFS NAME ENTRYPOINT... > ARCHIVE
#
# Writes to stdout an OCI image archive (an image layout as a tar, what
# `ctr images import` reads) of one uncompressed layer holding the folder
# ROOTFS, named NAME, whose entrypoint is ENTRYPOINT (none when absent).
# The layer is made reproducibly: sorted names, numeric owners, mtime 0.
set -euo pipefail
[ $# -ge 2 ] || { echo "usage: ociarchive.sh ROOTFS NAME [ENTRYPOINT...] > ARCHIVE" >&2; exit 2; }
rootfs=$1 name=$2
shift 2
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
mkdir -p "$out/blobs/sha256"

# blob FILE: moves FILE into the layout under its digest and prints it.
blob() {
	local d
	d=$(sha256sum "$1" | cut -d' ' -f1)
	mv "$1" "$out/blobs/sha256/$d"
	echo "$d"
}

tar --sort=name --numeric-owner --mtime=@0 --format=posix \
	--pax-option=exthdr.name=%d/PaxHeaders/%f,delete=atime,delete=ctime \
	-C "$rootfs" -cf "$out/layer" .
layer_size=$(stat -c %s "$out/layer")
layer=$(blob "$out/layer")

entry=$(printf '%s\n' "$@" | jq -R . | jq -cs 'map(select(. != ""))')
jq -cn --arg diff "sha256:$layer" --argjson entry "$entry" \
	'{architecture: "amd64", os: "linux", config: ({} + (if ($entry | length) > 0 then {Entrypoint: $entry} else {} end)),
	  rootfs: {type: "layers", diff_ids: [$diff]}}' > "$out/config"
config_size=$(stat -c %s "$out/config")
config=$(blob "$out/config")

jq -cn --arg config "sha256:$config" --argjson csize "$config_size" --arg layer "sha256:$layer" --argjson lsize "$layer_size" \
	'{schemaVersion: 2, mediaType: "application/vnd.oci.image.manifest.v1+json",
	  config: {mediaType: "application/vnd.oci.image.config.v1+json", digest: $config, size: $csize},
	  layers: [{mediaType: "application/vnd.oci.image.layer.v1.tar", digest: $layer, size: $lsize}]}' > "$out/manifest"
manifest_size=$(stat -c %s "$out/manifest")
manifest=$(blob "$out/manifest")

jq -cn --arg m "sha256:$manifest" --argjson size "$manifest_size" --arg name "$name" \
	'{schemaVersion: 2, mediaType: "application/vnd.oci.image.index.v1+json",
	  manifests: [{mediaType: "application/vnd.oci.image.manifest.v1+json", digest: $m, size: $size,
	    annotations: {"io.containerd.image.name": $name, "org.opencontainers.image.ref.name": ($name | sub(".*:"; ""))}}]}' > "$out/index.json"
echo '{"imageLayoutVersion":"1.0.0"}' > "$out/oci-layout"
tar --sort=name --numeric-owner --mtime=@0 -C "$out" -cf - oci-layout index.json blobs
