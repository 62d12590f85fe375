#!/usr/bin/env bash
# Build the small container image the container tests run jobs in, and install the runtime
# that runs it. Apptainer has no Debian or PyPI package, so the tests exercise the same
# interpreter-override path (`<runtime> ... IMAGE python3` as submitit's python) with
# Charliecloud's `ch-run`, which runs a SquashFS image unprivileged, like `apptainer exec`.
#
# The image is a Debian bookworm minbase rootfs with python3 (same minor version as the
# project's Python, so the host virtual environment can be put on PYTHONPATH inside it), plus
# empty mount points for the directories given as arguments (ch-run binds onto existing
# directories of a read-only image; Apptainer creates them itself).
#
# Usage: slurm/testing/image.sh [BIND_DIR ...]
#   image path: $POPULORA_TEST_IMAGE (default /var/cache/populora/ci-image.sqfs)
#   default bind dirs: the repository root and /tmp. Does nothing when the image exists and
#   already has those mount points.
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive
here="$(cd "$(dirname "$0")" && pwd -P)"
. "$here/lib.sh"
repo="$(cd "$here/../.." && pwd -P)"  # physical, as the tests resolve it
image="${POPULORA_TEST_IMAGE:-/var/cache/populora/ci-image.sqfs}"
# the Debian mirror this machine's apt already uses (first "URIs:" / "deb" line), unless given
apt_mirror() {
  { grep -hsE '^URIs:' /etc/apt/sources.list.d/*.sources | awk '{print $2}'
    grep -hsE '^deb ' /etc/apt/sources.list | awk '{print $2}'; } 2>/dev/null \
    | grep -v security | head -1 || true
}
t0=$SECONDS
log() { echo "[slurm-testing image] $*"; }
[ $# -gt 0 ] || set -- "$repo" /tmp

installed="$(apt_install_missing charliecloud-runtime squashfs-tools squashfuse debootstrap)"
[ -z "$installed" ] || log "installed $installed: $((SECONDS-t0))s"

# An existing image is reused when it already has every mount point; otherwise it is unpacked
# and repacked with the missing ones (a checkout at another path needs another mount point).
missing=()
if [ -s "$image" ]; then
  listing="$(unsquashfs -l -d /ROOT "$image")"
  for d in "$@"; do grep -qxF "/ROOT$d" <<<"$listing" || missing+=("$d"); done
  if [ ${#missing[@]} -eq 0 ]; then log "image exists with mount points for $*: $image"; exit 0; fi
fi
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
if [ -s "$image" ]; then
  log "image lacks mount points ${missing[*]}: repacking $image"
  unsquashfs -q -no-progress -d "$work/rootfs" "$image" >/dev/null
else
  mirror="${DEBIAN_MIRROR:-$(apt_mirror)}"
  [ -n "$mirror" ] || { echo "image.sh: no Debian mirror found in the apt sources; set DEBIAN_MIRROR" >&2; exit 1; }
  debootstrap --variant=minbase --include=python3 bookworm "$work/rootfs" "$mirror" >"$work/debootstrap.log" 2>&1 \
    || { tail -20 "$work/debootstrap.log" >&2; exit 1; }
fi
for d in "$@"; do mkdir -p "$work/rootfs/$d"; done
rm -rf "$work/rootfs/var/cache/apt/archives/"*.deb
install -d "$(dirname "$image")"
mksquashfs "$work/rootfs" "$image.part" -noappend -comp gzip -quiet -no-progress
mv "$image.part" "$image"
log "built $image ($(du -h "$image" | cut -f1)) in $((SECONDS-t0))s"
