#!/usr/bin/env bash
# The README's second command: installs what is missing, builds, and runs the whole test suite
# (single-process suites and the multi-rank ones under mpirun, registered with CTest).
#   scripts/test.sh [ctest args...]      e.g. scripts/test.sh -R ring
#   scripts/test.sh --sanitize address|thread [ctest args...]
#     builds into build-asan (ASan + UBSan) or build-tsan (TSan), CPU only, just the test binaries
#     labelled `sanitize`, and runs those tests with the suppressions in scripts/sanitize/ (Open
#     MPI and what it loads are not instrumented).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
if [ "${1:-}" = "-h" ] || [ "${1:-}" = "--help" ]; then  # the usage above, before any build
  sed -n '2,8p' "$0" | cut -c3-
  exit 0
fi
"$root/scripts/setup.sh"
export OPENBLAS_NUM_THREADS=${OPENBLAS_NUM_THREADS:-1}
if [ "${1:-}" != "--sanitize" ]; then
  "$root/scripts/build.sh"
  build=${STARRING_BUILD_DIR:-$root/build}
  ctest --test-dir "$build" --output-on-failure -j "$(nproc)" "$@"
  exit
fi

kind=${2:-}
case "$kind" in
  address) build=$root/build-asan ;;
  thread) build=$root/build-tsan ;;
  *) echo "scripts/test.sh: --sanitize takes address or thread (got '$kind')" >&2; exit 2 ;;
esac
shift 2
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSTARRING_SANITIZE="$kind" \
  -DSTARRING_CUDA=OFF -DSTARRING_SMPI=OFF >/dev/null
# The executables of the tests labelled `sanitize` (an mpirun.sh test names its binary last; a
# test whose executable is not built yet has no command in the listing: its target is its name).
mapfile -t targets < <(ctest --test-dir "$build" -L sanitize --show-only=json-v1 | python3 -c '
import json, os, sys
names = {os.path.basename(t["command"][-1]) if "command" in t else t["name"]
         for t in json.load(sys.stdin)["tests"]}
print("\n".join(sorted(names)))')
cmake --build "$build" -j "$(nproc)" --target "${targets[@]}"
sup=$root/scripts/sanitize
# Leaks are checked with full stacks (fast_unwind_on_malloc=0): Open MPI's own are only
# recognised (and suppressed) through its frames; UB stops the test instead of only printing.
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:fast_unwind_on_malloc=0}
export LSAN_OPTIONS=${LSAN_OPTIONS:-suppressions=$sup/lsan.supp:print_suppressions=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
# TSan keeps the longest access history it can (history_size=7): a race report whose other
# stack is lost cannot be matched against the Open MPI suppressions.
export TSAN_OPTIONS=${TSAN_OPTIONS:-suppressions=$sup/tsan.supp:second_deadlock_stack=1:history_size=7}
ctest --test-dir "$build" -L sanitize --output-on-failure -j "$(nproc)" "$@"
