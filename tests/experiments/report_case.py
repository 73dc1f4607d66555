"""The committed fixture (tests/experiments/fixtures/results, written by make_fixture.py) and
scripts/report.py run on it or on a part of it, for the report tests: test_report.py (the whole
fixture's report), test_report_inputs.py (partial, broken or unwritable folders),
test_report_numbers.py (in-process, on its records). Puts scripts/ on sys.path."""
import json
import os
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
FIXTURE = os.path.join(HERE, "fixtures", "results")
REPORT = os.path.join(REPO, "scripts", "report.py")
sys.path.insert(0, os.path.join(REPO, "scripts"))
import starring_results as sr  # noqa: E402


def run_report(results, out):
    return subprocess.run([sys.executable, REPORT, results, "--out", out], capture_output=True,
                          text=True, timeout=300)


def fixture_runs_in(tmp, keep, metrics=True):
    """Writes to `tmp` the fixture's runs for which keep(run) holds (and with `metrics`, their
    metrics files) as a results folder."""
    runs, _ = sr.read_jsonl(os.path.join(FIXTURE, "runs.jsonl"))
    with open(os.path.join(tmp, "runs.jsonl"), "w", encoding="utf-8") as f:
        for r in runs:
            if keep(r):
                f.write(json.dumps(r) + "\n")
    if metrics:
        shutil.copytree(os.path.join(FIXTURE, "runs"), os.path.join(tmp, "runs"))

