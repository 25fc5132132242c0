#!/usr/bin/env bash
# Set everything up, then run the block-matmul demo on 3 workers (4 ranks) and print the report.
#   bash scripts/demo.sh [N] [BS]     (default 1024 256: 64 block tasks)
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
mkdir -p build-examples
clang-16 -O2 -fopenmp -fopenmp-targets=x86_64-pc-linux-gnu examples/matmul/matmul.c -lm -o build-examples/matmul
report="$(mktemp -d)/report.json"
echo "demo: target/release/ompcluster-run -np 4 build-examples/matmul ${1:-1024} ${2:-256}"
OMPCLUSTER_REPORT="$report" target/release/ompcluster-run -np 4 build-examples/matmul "${1:-1024}" "${2:-256}"
echo "demo: run report ($report):"
cat "$report"
