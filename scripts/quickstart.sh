#!/usr/bin/env bash
# The README's first command: installs what is missing, builds, and runs the main job: star vs
# ring on Fashion-MNIST (1, 2 and 4 workers; ring all-reduce, one parameter server, co-located
# servers; plus bandwidth bench passes), and the quick versions of the straggler and
# compute/communication studies (2 workers, 60- and 10-step runs, ~45 s) so that the report has
# every plot but the bucket, overlap, faults and recovery ones (their own sweeps); then writes
# the report, prints the main job's table and where the report is.
#   scripts/quickstart.sh [--out DIR]        (default results/main)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out="$root/results/main"
usage="usage: scripts/quickstart.sh [--out DIR]   (default DIR: results/main)"
while [ $# -gt 0 ]; do  # anything else is refused before the ~3-15 minutes of work start
  case "$1" in
    --out)
      [ -n "${2:-}" ] || { echo "[quickstart] error: --out needs a folder; $usage" >&2; exit 2; }
      out=$2; shift 2 ;;
    --out=?*) out=${1#--out=}; shift ;;
    -h|--help) echo "$usage"; exit 0 ;;
    *) echo "[quickstart] error: unknown argument '$1'; $usage" >&2; exit 2 ;;
  esac
done
# Where the results go must take them (or an earlier run's, moved aside): found now, before the
# minutes of set-up and build, not as three sweeps' refusals and a report of nothing after them.
# The nearest folder that exists on the way to DIR is where DIR (or DIR.<date>) gets created.
parent=$(dirname -- "$out")
while [ ! -e "$parent" ] && [ "$parent" != "$(dirname -- "$parent")" ]; do
  parent=$(dirname -- "$parent")
done
if [ ! -d "$parent" ] || [ ! -w "$parent" ] || [ ! -x "$parent" ]; then
  why="not a folder"
  [ -d "$parent" ] && why="a folder this user ($(id -un)) cannot write in"
  echo "[quickstart] error: cannot write the results to $out: '$parent' is $why;" \
    "give another folder with --out DIR" >&2
  exit 2
fi
start=$(date +%s)
"$root/scripts/setup.sh"
"$root/scripts/build.sh" --target starring  # the tests are scripts/test.sh's to build
if [ -e "$out" ]; then  # keep an earlier run's results instead of mixing or deleting them
  prev="$out.$(date -r "$out" +%Y%m%d-%H%M%S)"
  if ! mv -- "$out" "$prev"; then  # (in an && list, set -e let a failed mv go on)
    echo "[quickstart] error: cannot move the earlier results $out aside to $prev" >&2
    exit 1
  fi
  echo "[quickstart] earlier results moved to $prev"
fi
rc=0
"$root/scripts/sweep.sh" main --out "$out" --no-report || rc=$?
for study in straggler crossover; do
  "$root/scripts/sweep.sh" "$study" --quick --out "$out" --no-report || rc=$?
done
py=python3
if [ -x /usr/bin/python3 ] && /usr/bin/python3 -c 'import matplotlib' >/dev/null 2>&1; then
  py=/usr/bin/python3  # the one Debian's python3-matplotlib installs into
fi
report=0
"$py" "$root/scripts/report.py" "$out" --table-sweep main || report=$?
if [ "$report" -eq 0 ]; then
  echo "[quickstart] done in $(( $(date +%s) - start )) s; open $out/report/report.html"
else  # no page to open: say so instead of pointing at one
  echo "[quickstart] failed after $(( $(date +%s) - start )) s: no report was written" \
    "(see above)" >&2
  rc=$report
fi
exit "$rc"
