#!/usr/bin/env bash
# Install what the project needs on Debian 12 and build it (release).
# Idempotent: packages already present are not reinstalled; cargo rebuilds only what changed.
set -euo pipefail
cd "$(dirname "$0")/.."

. scripts/toolchain.sh

packages=(clang-16 clang-tools-16 libomp-16-dev llvm-16-tools libclang-16-dev
          openmpi-bin libopenmpi-dev libffi-dev pkg-config make)
# No cargo recent enough (none on a bare Debian 12, whose `cargo` package is 1.65): Debian's
# own newer toolchain, rustc-web and cargo-web (1.96 in bookworm's security updates).
if ! find_cargo >/dev/null; then
  packages+=(rustc-web cargo-web)
fi
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  SUDO=""
  if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null || { echo "setup: need root (or sudo) to install: ${missing[*]}" >&2; exit 1; }
    SUDO=sudo
  fi
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

use_cargo
export MPICC="${MPICC:-mpicc.openmpi}"
echo "setup: building (cargo build --release) with $CARGO_BIN: $("$CARGO_BIN" --version)"
"$CARGO_BIN" build --release --workspace --quiet
echo "setup: done: target/release/ompcluster-run and target/release/libompcluster_plugin.so"
