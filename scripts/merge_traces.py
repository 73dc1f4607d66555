#!/usr/bin/env python3
"""Merges the per-rank timelines of one run (`starring train --trace trace.%r.json`) into one
Chrome trace-event file, one process per rank, to open in https://ui.perfetto.dev or
chrome://tracing:
  scripts/merge_traces.py merged.json trace.*.json*
(`trace.*.json*` takes a killed rank's trace.<rank>.json.partial too: its events up to the
kill; a .partial beside a file of the same name is the newer run's and is read instead.)
Each rank's times are microseconds of the UTC day on its host's wall clock (read once beside
the steady clock), so ranks of one host line up, and ranks on different hosts as well as the
hosts' clocks agree; ranks started on both sides of a midnight are put on the earlier day's.
The sweep driver does this for every traced run (runs/<id>/trace.json). Exit 0 when every file
given was merged, 1 when one was left out (named on stderr, with why), the output cannot be
written or the arguments are missing."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import starring_results as sr  # noqa: E402

if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] in ("-h", "--help"):  # not an output file named --help
        print(__doc__)
        sys.exit(0)
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    skipped = {}
    try:
        merged = sr.merge_traces(sys.argv[2:], sys.argv[1], skipped)
    except OSError as e:  # the output (a folder that is not there, a directory, a full disk)
        sys.exit(f"merge_traces.py: cannot write {sys.argv[1]}: {e.strerror or e}")
    for path, why in skipped.items():  # a missing rank's file, or one that is not a trace
        print(f"merge_traces.py: left out {path}: {why}", file=sys.stderr)
    print(f"merged {len(merged)} of {len(sys.argv) - 2} files into {sys.argv[1]}")
    sys.exit(0 if len(merged) == len(sys.argv) - 2 else 1)
