#!/usr/bin/env bash
# Install what the project needs on Debian 12 and build it (release).
# Idempotent: packages already present are not reinstalled; cargo rebuilds only what changed.
set -euo pipefail
cd "$(dirname "$0")/.."

. scripts/toolchain.sh

packages=(clang-16 clang-tools-16 libomp-16-dev llvm-16-tools libclang-16-dev
          openmpi-bin libopenmpi-dev libffi-dev pkg-config make)
# The other compilers the cluster serves: clang-19 (C, C++) and flang-19 (Fortran), with
# clang-tools-19 (their offload linker). Never libomp-19-dev or libomp5-19: they conflict
# with LLVM 16's (installing one removes the other, and clang-16 then finds no omp.h); the
# compile wrappers (ompcluster-cc, ...) link every program against LLVM 16's runtime.
llvm19=(clang-19 clang-tools-19 flang-19)
# No cargo recent enough (none on a bare Debian 12, whose `cargo` package is 1.65): Debian's
# own newer toolchain, rustc-web and cargo-web (1.96 in bookworm's security updates).
if ! find_cargo >/dev/null; then
  packages+=(rustc-web cargo-web)
fi
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
missing19=()
for p in "${llvm19[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing19+=("$p")
done
SUDO=""
if ((${#missing[@]} + ${#missing19[@]})) && [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || { echo "setup: need root (or sudo) to install: ${missing[*]} ${missing19[*]}" >&2; exit 1; }
  SUDO=sudo
fi
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
if ((${#missing19[@]})); then
  ((${#missing[@]})) || $SUDO apt-get update -qq
  # Only if apt would remove nothing (it would remove LLVM 16's OpenMP runtime if anything
  # pulled libomp5-19 in).
  removed=$(DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -s --no-install-recommends "${missing19[@]}" | awk '/^Remv /{print $2}' | paste -sd' ' -)
  if [ -n "$removed" ]; then
    echo "setup: NOT installing ${missing19[*]}: apt would remove $removed (clang-16 needs them); clang-19 and flang-19 programs cannot be built here" >&2
  else
    echo "setup: installing ${missing19[*]}"
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing19[@]}" >/dev/null
  fi
fi
omp_h=/usr/lib/llvm-16/lib/clang/16/include/omp.h
[ -f "$omp_h" ] || { echo "setup: $omp_h is missing: reinstall libomp-16-dev (did libomp-19-dev replace it?)" >&2; exit 1; }

use_cargo
export MPICC="${MPICC:-mpicc.openmpi}"
echo "setup: building (cargo build --release) with $CARGO_BIN: $("$CARGO_BIN" --version)"
"$CARGO_BIN" build --release --workspace --quiet
echo "setup: done: target/release/ompcluster-run, the compile wrappers target/release/ompcluster-{cc,c++,fortran} and target/release/libompcluster_plugin.so"
