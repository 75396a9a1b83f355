#!/usr/bin/env bash
# Builds fedpq's container image (deploy/Containerfile) with podman:
#   scripts/image.sh [TAG]        (default TAG: localhost/fedpq:latest)
# fedpq is compiled here with the host's Go, static (CGO_ENABLED=0), into a
# build context that holds only the binary and the run directory's skeleton,
# so the build needs no registry and no network. Prints the image's size.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
tag=${1:-localhost/fedpq:latest}
export CONTAINERS_CONF=${CONTAINERS_CONF:-$repo/deploy/podman/containers.conf}
command -v podman >/dev/null || { echo "image.sh: podman is not installed (apt-get install podman runc)" >&2; exit 1; }

ctx=$(mktemp -d)
trap 'rm -rf "$ctx"' EXIT
(cd "$repo" && CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o "$ctx/fedpq" ./cmd/fedpq)
# A static binary: built without cgo and with no ELF interpreter to load it.
grep -q 'CGO_ENABLED=0' <<<"$(go version -m "$ctx/fedpq")" || { echo "image.sh: fedpq was built with cgo" >&2; exit 1; }
if command -v readelf >/dev/null && readelf -l "$ctx/fedpq" | grep -q INTERP; then
  echo "image.sh: fedpq is dynamically linked" >&2; exit 1
fi
mkdir -p "$ctx/rootfs/var/lib/fedpq/config" "$ctx/rootfs/tmp"
chmod 1777 "$ctx/rootfs/tmp"
podman build --quiet -f "$repo/deploy/Containerfile" -t "$tag" "$ctx" >/dev/null
size=$(podman image inspect --format '{{.Size}}' "$tag")
echo "$tag: $(awk -v b="$size" 'BEGIN { printf "%.1f MB (%d bytes)", b / 1e6, b }'), binary $(stat -c %s "$ctx/fedpq") bytes"
