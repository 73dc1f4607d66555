#!/usr/bin/env bash
# The sweep driver: `scripts/sweep.sh <sweep.ini|name> [--out DIR] [--quick] [--dry-run] ...`
# Runs every configuration of a sweep (experiments/sweeps/<name>.ini) through
# `scripts/mpirun.sh -np N build/bin/starring train ...`, each bounded by `timeout`, appends one
# JSON record per run to DIR/runs.jsonl and `starring bench --json` rows to DIR/bench.jsonl, then
# writes the report (scripts/report.py DIR). `scripts/sweep.sh --help` lists the options; the
# sweep file format is described at the top of scripts/sweep.py.
#   scripts/sweep.sh main                 # the README's main job
#   scripts/sweep.sh scaling --quick      # a smaller version of a big sweep
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# The driver needs only the standard library; the report it runs at the end needs matplotlib,
# which Debian installs for /usr/bin/python3 (a python3 earlier on PATH may lack it).
py=python3
if [ -x /usr/bin/python3 ] && /usr/bin/python3 -c 'import matplotlib' >/dev/null 2>&1; then
  py=/usr/bin/python3
fi
exec "$py" "$here/sweep.py" "$@"
