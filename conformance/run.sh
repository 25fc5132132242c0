#!/usr/bin/env bash
# Conformance runner: LLVM 16's libomptarget tests under the stock x86_64 plugin (run.py puts
# /usr/lib/llvm-16/lib on those runs' LD_LIBRARY_PATH, where libomptarget 16 finds it on Debian 12)
# and under ours. All options go to run.py (see --help and docs/conformance.md).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
py="$(command -v python3.11 || command -v python3)"
exec "$py" "$here/run.py" "$@"
