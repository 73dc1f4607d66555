#!/usr/bin/env bash
# The README's first command: installs what is missing, builds, and runs the main job: star vs
# ring on Fashion-MNIST (1, 2 and 4 workers; ring all-reduce, one parameter server, co-located
# servers; plus a bandwidth bench pass), then writes the report and prints where it is.
#   scripts/quickstart.sh [--out DIR]        (default results/main)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out="$root/results/main"
if [ "${1:-}" = "--out" ] && [ -n "${2:-}" ]; then out=$2; fi
start=$(date +%s)
"$root/scripts/setup.sh"
"$root/scripts/build.sh"
if [ -e "$out" ]; then  # keep an earlier run's results instead of mixing or deleting them
  prev="$out.$(date -r "$out" +%Y%m%d-%H%M%S)"
  mv "$out" "$prev" && echo "[quickstart] earlier results moved to $prev"
fi
"$root/scripts/sweep.sh" main --out "$out"
echo "[quickstart] done in $(( $(date +%s) - start )) s; open $out/report/report.html"
