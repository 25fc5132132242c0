#!/usr/bin/env bash
# Build containers/Dockerfile without an image registry or a Docker engine, then run the demo
# inside the image it made:
#   1. a debian:12 base image from Debian's own packages (debootstrap), made once and kept
#      (skipped while localhost/debian-min:12 exists), tagged as the image the Dockerfile's
#      FROM names, so the Dockerfile stays an ordinary one;
#   2. buildah bud --isolation chroot -f containers/Dockerfile (RUN steps in a chroot: no
#      OCI runtime, which cannot start containers on these machines, see docs/containers.md);
#   3. bash scripts/demo.sh in a working container of the new image (buildah run --isolation
#      chroot), which must print "result correct";
#   4. where Apptainer is installed (not on Debian 12), containers/ompcluster.def from the same
#      base image.
#
#   bash containers/build.sh [--worktree] [--no-demo] [--base-only]
#     --worktree  build the work tree as it is (tracked and untracked, not ignored files)
#                 instead of the last commit (git archive HEAD, the default)
#     --no-demo   stop after the build
#     --base-only stop once the base image is made and tagged
#   Settings (environment): IMAGE (default localhost/ompcluster:latest),
#     BASE (default localhost/debian-min:12), DEBIAN_MIRROR (default http://deb.debian.org/debian),
#     BUILD_JOBS (cargo's jobs inside the build; default: cargo's own, one per core),
#     HOST_CA (default /etc/ssl/certs/ca-certificates.crt; empty: none): this machine's CA
#     bundle, read-only inside the build for cargo's downloads (a TLS-intercepting proxy's CA
#     is trusted here only through it); not kept in the image,
#     SIF (default target/ompcluster.sif): where Apptainer's image goes, if Apptainer is installed.
#
# Needs root (debootstrap, buildah's chroot isolation). Installs debootstrap and buildah with
# apt when they are missing. Every temporary file is under a mktemp directory removed at exit,
# and so is every working container this script made.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD

IMAGE=${IMAGE:-localhost/ompcluster:latest}
BASE=${BASE:-localhost/debian-min:12}
DEBIAN_MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
BUILD_JOBS=${BUILD_JOBS:-}
HOST_CA=${HOST_CA-/etc/ssl/certs/ca-certificates.crt}
SIF=${SIF:-$repo/target/ompcluster.sif}
worktree=0 demo=1 base_only=0
for a in "$@"; do
  case $a in
    --worktree) worktree=1 ;;
    --no-demo) demo=0 ;;
    --base-only) base_only=1 ;;
    -h|--help) sed -n "2,29p" "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "containers/build.sh: unknown argument $a (see --help)" >&2; exit 2 ;;
  esac
done

die() { echo "containers/build.sh: FAILED: $*" >&2; exit 1; }
[ "$(id -u)" -eq 0 ] || die "must run as root (debootstrap and buildah's chroot isolation need it)"

work=$(mktemp -d "${TMPDIR:-/tmp}/ompcluster-containers.XXXXXXXX")
containers=()
cleanup() {
  local c
  for c in "${containers[@]}"; do buildah rm "$c" >/dev/null 2>&1 || true; done
  # An interrupted debootstrap may leave /proc, /sys or /dev mounted in its target: unmount
  # them (deepest first) and never let rm cross into another file system.
  awk -v w="$work/" 'index($2, w) == 1 { print $2 }' /proc/self/mounts | sort -r |
    while read -r m; do umount -l "$m" 2>/dev/null || true; done
  rm -rf --one-file-system "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

t_start=$SECONDS
step_t=0
step() { step_t=$SECONDS; echo "== $*"; }
took() { echo "== $1: $((SECONDS - step_t)) s"; }
# Copies its input, with the seconds since the step began before buildah's STEP and COMMIT lines.
stamp() {
  local l
  while IFS= read -r l; do
    case $l in STEP\ *|COMMIT\ *) printf '[%4d s] %s\n' $((SECONDS - step_t)) "$l" ;; *) printf '%s\n' "$l" ;; esac
  done
}

# --- tools
missing=()
command -v debootstrap >/dev/null || missing+=(debootstrap)
command -v buildah >/dev/null || missing+=(buildah)
if ((${#missing[@]})); then
  step "installing ${missing[*]} (apt)"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null \
    || die "apt-get install ${missing[*]}"
  took "tools"
fi

image_exists() { buildah inspect --type image "$1" >/dev/null 2>&1; }
image_id() { buildah inspect --type image --format '{{.FromImageID}}' "$1" 2>/dev/null || true; }
# remove_if_untagged ID: removes an image this script replaced, once no name points to it
# (quietly kept when a container still uses it).
remove_if_untagged() {
  [ -n "$1" ] || return 0
  buildah images --filter dangling=true --no-trunc --format '{{.ID}}' | grep -q "$1" || return 0
  buildah rmi "$1" >/dev/null 2>&1 && echo "== removed the image this build replaced (${1:0:12})" || true
}

# --- the build context, and the image its Dockerfile's FROM names
ctx=$work/context
mkdir "$ctx"
if ((worktree)); then
  echo "== context: the work tree (tracked and untracked files, .gitignore'd ones left out)"
  git ls-files -z -co --exclude-standard | tar --null --ignore-failed-read -T - -cf - | tar -C "$ctx" -xf -
else
  echo "== context: git archive HEAD ($(git rev-parse --short HEAD))"
  git archive HEAD | tar -C "$ctx" -xf -
fi

# The image the Dockerfile's FROM names, as buildah names it (debian:12 -> docker.io/library/debian:12).
from=$(awk 'toupper($1) == "FROM" { print $2; exit }' "$ctx/containers/Dockerfile")
[ -n "$from" ] || die "no FROM line in containers/Dockerfile"
case $from in *:*|*@*) ;; *) from="$from:latest" ;; esac
first=${from%%/*}
if [ "$first" = "$from" ]; then
  from_full="docker.io/library/$from"
elif [[ $first == *.* || $first == *:* || $first == localhost ]]; then
  from_full=$from
else
  from_full="docker.io/$from"
fi

# --- 1. the base image, from Debian's packages
made_base=0
if image_exists "$BASE"; then
  echo "== base image $BASE exists: kept (buildah rmi $BASE to make it again)"
else
  step "debootstrap --variant=minbase bookworm ($DEBIAN_MIRROR)"
  rootfs=$work/rootfs
  mkdir "$rootfs"
  debootstrap --variant=minbase bookworm "$rootfs" "$DEBIAN_MIRROR" >"$work/debootstrap.log" 2>&1 \
    || { tail -20 "$work/debootstrap.log" >&2; die "debootstrap (log above)"; }
  # The sources of Debian's own debian:12 image (security updates included: rustc-web 1.96
  # is there), no package lists or downloaded packages kept.
  rm -f "$rootfs/etc/apt/sources.list"
  cat >"$rootfs/etc/apt/sources.list.d/debian.sources" <<EOF
Types: deb
URIs: $DEBIAN_MIRROR
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: ${DEBIAN_MIRROR%/debian}/debian-security
Suites: bookworm-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
  rm -rf "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/log/*.log
  took "debootstrap"

  step "importing the root file system as $BASE"
  c=$(buildah from --pull=never scratch)
  containers+=("$c")
  mnt=$(buildah mount "$c")
  tar -C "$rootfs" --numeric-owner -cf - . | tar -C "$mnt" --numeric-owner -xpf -
  buildah umount "$c" >/dev/null
  buildah config --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    --cmd bash --os linux --arch "$(dpkg --print-architecture)" "$c"
  buildah commit --quiet --rm "$c" "$BASE" >/dev/null
  containers=()
  rm -rf "$rootfs"
  made_base=1
  took "base import"
fi
if ((made_base)) || ! image_exists "$from_full"; then
  old_base=$(image_id "$from_full")
  buildah tag "$BASE" "$from_full"
  [ "$old_base" = "$(image_id "$from_full")" ] || remove_if_untagged "$old_base"
  echo "== tagged $BASE as $from_full (the Dockerfile's FROM $from)"
else
  echo "== $from_full exists: used as it is"
fi
((base_only)) && { echo "== done (--base-only) in $((SECONDS - t_start)) s"; exit 0; }

# --- 2. buildah bud
ca_args=()
if [ -n "$HOST_CA" ]; then
  [ -r "$HOST_CA" ] || die "HOST_CA=$HOST_CA is not a readable file"
  ca_args=(--volume "$(readlink -f "$HOST_CA"):/run/host-ca.crt:ro" --build-arg CARGO_CAINFO=/run/host-ca.crt)
fi
# The image this build replaces, removed after it unless something else still uses it (no
# --layers: its cache would keep a few GB of intermediate images per source change).
old_id=$(image_id "$IMAGE")
step "buildah bud --isolation chroot -f containers/Dockerfile -t $IMAGE"
buildah bud --isolation chroot --pull=never -f "$ctx/containers/Dockerfile" \
  --build-arg BUILD_JOBS="$BUILD_JOBS" "${ca_args[@]}" -t "$IMAGE" "$ctx" 2>&1 | stamp | tee "$work/bud.log" \
  || die "buildah bud (output above)"
took "bud"
[ "$old_id" = "$(image_id "$IMAGE")" ] || remove_if_untagged "$old_id"

# --- 3. the demo inside the image
if ((demo)); then
  step "bash scripts/demo.sh inside $IMAGE (buildah run --isolation chroot)"
  c=$(buildah from --pull=never "$IMAGE")
  containers+=("$c")
  buildah run --isolation chroot "$c" -- bash scripts/demo.sh 2>&1 | tee "$work/demo.log" \
    || die "the demo failed inside $IMAGE (output above)"
  grep -q "result correct" "$work/demo.log" || die "the demo did not print 'result correct' (output above)"
  took "demo"
fi

# --- 4. the Apptainer definition, where Apptainer is installed (it is not on Debian 12)
apptainer=$(command -v apptainer || command -v singularity || true)
if [ -z "$apptainer" ]; then
  echo "== apptainer: not installed (Debian 12 has no package of it, see docs/containers.md): containers/ompcluster.def not built"
else
  # The definition's own steps, from the same local base image: its Bootstrap/From header
  # points at an OCI archive of $from_full instead of a registry.
  step "$apptainer build $SIF from containers/ompcluster.def (base: $from_full as an OCI archive)"
  buildah push --quiet "$from_full" "oci-archive:$work/base.tar" >/dev/null || die "buildah push $from_full to an OCI archive"
  sed -e '0,/^Bootstrap:/s|^Bootstrap:.*|Bootstrap: oci-archive|' -e "0,/^From:/s|^From:.*|From: $work/base.tar|" \
    "$ctx/containers/ompcluster.def" >"$work/ompcluster.def"
  mkdir -p "$(dirname "$SIF")"
  (cd "$ctx" && "$apptainer" build --force "$SIF" "$work/ompcluster.def") || die "$apptainer build (output above)"
  took "apptainer build"
fi

echo "== done in $((SECONDS - t_start)) s: $IMAGE ($(buildah images --format '{{.Size}}' "$IMAGE" | head -1))"
