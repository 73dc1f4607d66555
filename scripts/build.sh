#!/usr/bin/env bash
# Configures and builds StarRing into build/ (Release). CUDA/cuBLAS/NCCL are built when the
# toolkit is found (STARRING_CUDA=AUTO); pass -DSTARRING_CUDA=OFF (or ON) as extra arguments.
#   scripts/build.sh [extra cmake args...]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${STARRING_BUILD_DIR:-$root/build}
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release "$@" >/dev/null
cmake --build "$build" -j "$(nproc)"
echo "[build] binaries in $build/bin"
