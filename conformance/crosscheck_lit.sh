#!/usr/bin/env bash
# Cross-check run.py's lit emulation against the real lit 16.0.6 (from PyPI, in a
# throw-away venv) for the stock plugin: writes the lit.site.cfg that
# openmp/libomptarget/test/CMakeLists.txt would configure for x86_64-pc-linux-gnu
# on Debian 12 and runs lit on the same four directories. lit passes LD_LIBRARY_PATH on to the
# tests: /usr/lib/llvm-16/lib goes in front of it, since on Debian 12 libomptarget 16 finds its
# stock plugins only there (without it every region runs on the host, as run.py's "stock"
# configuration now avoids too).
# Usage: conformance/crosscheck_lit.sh [TEST_ROOT]   (default: the runner's cache)
set -euo pipefail
cache="${XDG_CACHE_HOME:-$HOME/.cache}/ompcluster-conformance"
root="${1:-$(ls -d "$cache"/src/llvm-toolchain-16_*/openmp/libomptarget/test | tail -1)}"
obj="$cache/lit-obj/x86_64-pc-linux-gnu"
venv="$cache/lit-venv"
[ -x "$venv/bin/lit" ] || { python3 -m venv "$venv" && "$venv/bin/pip" install -q 'lit==16.0.6'; }
mkdir -p "$obj"
cat > "$obj/lit.site.cfg" <<CFG
config.test_c_compiler = "$(command -v clang-16)"
config.test_cxx_compiler = "$(command -v clang++-16)"
config.test_compiler_features = ['clang', 'clang-16', 'clang-16.0', 'clang-$(clang-16 -dumpversion)']
config.test_openmp_flags = "-fopenmp -pthread"
config.test_extra_flags = ""
config.cuda_path = ""
config.cuda_libdir = ""
config.cuda_test_arch = ""
config.libomptarget_obj_root = "$obj"
config.library_dir = "/usr/lib/llvm-16/lib"
config.omp_header_directory = "$(ls -d /usr/lib/llvm-16/lib/clang/*/include | head -1)"
config.omp_host_rtl_directory = "/usr/lib/llvm-16/lib"
config.llvm_lib_directory = "/usr/lib/llvm-16/lib"
config.operating_system = "Linux"
config.libomptarget_all_targets = "aarch64-unknown-linux-gnu aarch64-unknown-linux-gnu-LTO amdgcn-amd-amdhsa amdgcn-amd-amdhsa-LTO powerpc64le-ibm-linux-gnu powerpc64le-ibm-linux-gnu-LTO powerpc64-ibm-linux-gnu powerpc64-ibm-linux-gnu-LTO x86_64-pc-linux-gnu x86_64-pc-linux-gnu-LTO nvptx64-nvidia-cuda nvptx64-nvidia-cuda-LTO nvptx64-nvidia-cuda-JIT-LTO".split()
config.libomptarget_current_target = "x86_64-pc-linux-gnu"
config.libomptarget_filecheck = "$(command -v FileCheck-16)"
config.libomptarget_not = "$(command -v not-16 || echo /usr/lib/llvm-16/bin/not)"
config.libomptarget_debug = False
lit_config.load_config(config, "$root/lit.cfg")
CFG
LD_LIBRARY_PATH="/usr/lib/llvm-16/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" exec "$venv/bin/lit" -j2 "$obj/offloading" "$obj/mapping" "$obj/api" "$obj/env"
