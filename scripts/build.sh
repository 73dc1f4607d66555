#!/usr/bin/env bash
# Configures and builds StarRing into build/ (Release; STARRING_BUILD_DIR=DIR for another folder).
# CUDA/cuBLAS/NCCL are built when the toolkit is found (STARRING_CUDA=AUTO); pass
# -DSTARRING_CUDA=OFF (or ON) as extra arguments.
# `--target T` (repeatable) builds only T (e.g. `--target starring`: the executable, without the
# test binaries and the SimGrid bench, about half the build); without it, everything.
#   scripts/build.sh [--target T ...] [extra cmake args...]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${STARRING_BUILD_DIR:-$root/build}
targets=()
cmake_args=()
while [ $# -gt 0 ]; do
  case "$1" in
    --target)
      [ $# -ge 2 ] || { echo "[build] error: --target needs a target name" >&2; exit 2; }
      targets+=(--target "$2"); shift 2 ;;
    --target=*) targets+=(--target "${1#--target=}"); shift ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d' | cut -c3-; exit 0 ;;  # the usage above
    *) cmake_args+=("$1"); shift ;;
  esac
done
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release ${cmake_args[@]+"${cmake_args[@]}"} >/dev/null
cmake --build "$build" -j "$(nproc)" ${targets[@]+"${targets[@]}"}
echo "[build] binaries in $build/bin"
