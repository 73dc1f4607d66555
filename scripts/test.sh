#!/usr/bin/env bash
# The README's second command: installs what is missing, builds, and runs the whole test suite
# (single-process suites and the multi-rank ones under mpirun, registered with CTest).
#   scripts/test.sh [ctest args...]      e.g. scripts/test.sh -R ring
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/setup.sh"
"$root/scripts/build.sh"
build=${STARRING_BUILD_DIR:-$root/build}
export OPENBLAS_NUM_THREADS=${OPENBLAS_NUM_THREADS:-1}
ctest --test-dir "$build" --output-on-failure -j "$(nproc)" "$@"
