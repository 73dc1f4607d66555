#!/usr/bin/env python3
"""Tests of the report generator on partial, broken or unwritable folders made from the
committed fixture (tests/experiments/fixtures/results): malformed records left out and named,
folders with only bench rows, one study or the main sweep (the missing plots said and why), a
bench without PS rows, and a report folder or results file that cannot be made, written or
read (one line, no traceback). No `starring` binary needed. The whole fixture's report:
test_report.py.
"""
import html
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest

from report_case import FIXTURE, REPORT, fixture_runs_in, run_report, sr
from unprivileged import open_to_all, unprivileged


def report_page_of(tmp, keep):
    """The fixture's runs for which keep(run) holds, reported from `tmp`: (process, page text)."""
    fixture_runs_in(tmp, keep)
    proc = run_report(tmp, os.path.join(tmp, "report"))
    page = ""
    if proc.returncode == 0:
        with open(os.path.join(tmp, "report", "report.html"), encoding="utf-8") as f:
            page = html.unescape(re.sub(r"<[^>]+>", " ", f.read()))
    return proc, page


class ReportWithPartialData(unittest.TestCase):
    def test_malformed_records_are_left_out_and_named_not_a_traceback(self):
        # An "ok" record without a model, one with samples/s null (a NaN in a summary), one with
        # an empty step-time breakdown, and lines that parse but are not records: report.py
        # ended in a KeyError / TypeError / AttributeError traceback and wrote no page.
        with open(os.path.join(FIXTURE, "runs.jsonl"), encoding="utf-8") as f:
            recs = [json.loads(line) for line in f]
        broken = [dict(recs[0], run_id="no-model"), dict(recs[1], run_id="null-rate"),
                  dict(recs[2], run_id="no-steps", step_time={})]
        del broken[0]["model"]
        broken[1]["samples_per_s"] = None
        with tempfile.TemporaryDirectory(prefix="starring_report_test_") as tmp:
            with open(os.path.join(tmp, "runs.jsonl"), "w", encoding="utf-8") as f:
                f.write("".join(json.dumps(r) + "\n" for r in recs[:3] + broken) + "[1, 2]\n")
            with open(os.path.join(tmp, "bench.jsonl"), "w", encoding="utf-8") as f:
                f.write('"a string"\n')
            proc = run_report(tmp, os.path.join(tmp, "report"))
            self.assertEqual(proc.returncode, 0, proc.stderr)
            self.assertNotIn("Traceback", proc.stderr)
            for run_id in ("no-model", "null-rate", "no-steps"):
                self.assertIn(f"({run_id}): left out of the tables and plots", proc.stderr)
            self.assertIn("runs.jsonl line 7: not a JSON object", proc.stderr)
            with open(os.path.join(tmp, "report", "summary.md"), encoding="utf-8") as f:
                table = [line for line in f if line.startswith("| ring ")]
            self.assertEqual(len(table), 3)  # the three good runs
            with open(os.path.join(tmp, "report", "report.html"), encoding="utf-8") as f:
                self.assertIn("bench.jsonl line 1: not a JSON object", f.read())

    def test_a_record_of_keys_of_another_type_is_left_out_by_its_line(self):
        # "grid_point": null in runs.jsonl, a failed pass's "bench_args": ["a"] in bench.jsonl:
        # the notes on what did not succeed (made before any plot's guard) ended the report in a
        # TypeError traceback, exit 1, no summary.md or report.html
        with open(os.path.join(FIXTURE, "runs.jsonl"), encoding="utf-8") as f:
            recs = [json.loads(line) for line in f][:3]
        bench, _ = sr.read_jsonl(os.path.join(FIXTURE, "bench.jsonl"))
        with tempfile.TemporaryDirectory(prefix="starring_report_test_") as tmp:
            with open(os.path.join(tmp, "runs.jsonl"), "w", encoding="utf-8") as f:
                f.write("".join(json.dumps(r) + "\n" for r in recs) + "\n"  # line 4 blank
                        + json.dumps(dict(recs[0], run_id="null-point", grid_point=None)) + "\n"
                        + "[1, 2]\n" + json.dumps(dict(recs[1], run_id="no-model",
                                                        model=None)) + "\n")
            with open(os.path.join(tmp, "bench.jsonl"), "w", encoding="utf-8") as f:
                f.write("".join(json.dumps(b) + "\n" for b in bench[:2]) + json.dumps(
                    {"sweep": "main", "bench_id": "main-bench-x-np2", "bench_args": ["a"],
                     "status": "failed", "np": 2, "command": "c", "log_tail": "t"}) + "\n")
            proc = run_report(tmp, os.path.join(tmp, "report"))
            self.assertEqual(proc.returncode, 0, proc.stderr)
            self.assertNotIn("Traceback", proc.stderr)
            self.assertIn("runs.jsonl line 5 (null-point): 'grid_point' is null, left out",
                          proc.stderr)
            # each problem by its own line, not a count of the records left after those out
            # (both read "record 1" before)
            self.assertIn("runs.jsonl line 6: not a JSON object", proc.stderr)
            self.assertIn("runs.jsonl line 7 (no-model)", proc.stderr)
            self.assertIn("bench.jsonl line 3 (main-bench-x-np2): 'bench_args' is [\"a\"], "
                          "left out", proc.stderr)
            out = os.path.join(tmp, "report")
            self.assertIn("busbw.png", os.listdir(out))
            with open(os.path.join(out, "summary.md"), encoding="utf-8") as f:
                self.assertEqual(len([ln for ln in f if ln.startswith("| ring | 784-")]), 3)

    def test_bench_only_folder_skips_the_training_plots_and_says_so(self):
        tmp = tempfile.mkdtemp(prefix="starring_report_test_")
        try:
            shutil.copy(os.path.join(FIXTURE, "bench.jsonl"), tmp)
            proc = run_report(tmp, os.path.join(tmp, "report"))
            self.assertEqual(proc.returncode, 0, proc.stderr)
            out = os.path.join(tmp, "report")
            self.assertEqual(sorted(p for p in os.listdir(out) if p.endswith(".png")),
                             ["busbw.png", "overlap.png"])  # the bench plots
            with open(os.path.join(out, "report.html"), encoding="utf-8") as f:
                page = f.read()
            self.assertIn("Plots not drawn", page)
            self.assertIn("Throughput vs workers", page)
            # no runs: the counts said '0 runs: ; 54 bench rows.' and the page 'Hosts: ;
            # commits: .', an empty list each
            with open(os.path.join(out, "summary.md"), encoding="utf-8") as f:
                self.assertRegex(f.read(), r"\n0 runs; \d+ bench rows\.\n")
            self.assertNotIn("Hosts: ;", page)
            self.assertNotIn("commits: .", page)
            # bench rows that name their host and commit (a sweep's do) give them
            bench, _ = sr.read_jsonl(os.path.join(FIXTURE, "bench.jsonl"))
            with open(os.path.join(tmp, "bench.jsonl"), "w", encoding="utf-8") as f:
                f.writelines(json.dumps(dict(b, host="h1", git="abc123")) + "\n" for b in bench)
            proc = run_report(tmp, out)
            self.assertEqual(proc.returncode, 0, proc.stderr)
            with open(os.path.join(out, "report.html"), encoding="utf-8") as f:
                self.assertIn("Hosts: h1; commits: abc123.", f.read())
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    def test_a_study_only_folder_says_why_the_scaling_plots_are_missing(self):
        # every run of a straggler study has a step-time breakdown and metrics; the page must not
        # claim that none has (it said "no run recorded a step-time breakdown")
        with tempfile.TemporaryDirectory(prefix="starring_report_test_") as tmp:
            runs, _ = sr.read_jsonl(os.path.join(FIXTURE, "runs.jsonl"))
            study = [r for r in runs if r.get("sweep") == "straggler" and r["status"] == "ok"]
            self.assertTrue(study and all(r.get("step_time") for r in study))
            proc, page = report_page_of(tmp, lambda r: r in study)
            self.assertEqual(proc.returncode, 0, proc.stderr)
            self.assertIn("straggler.png", os.listdir(os.path.join(tmp, "report")))
            skipped = page.split("Plots not drawn")[1]
            self.assertNotIn("no run has a step-time breakdown", skipped)
            self.assertNotIn("no run has a history", skipped)
            self.assertIn("Step-time breakdown: the runs with a step-time breakdown all vary "
                          "--straggler", skipped)
            self.assertIn("Loss and accuracy vs wall time: the runs with a history or metrics "
                          "file all vary --straggler", skipped)

    def test_a_main_only_folder_names_the_sweep_behind_each_missing_study_plot(self):
        # `scripts/sweep.sh main` alone: the page said "Straggler: no run with --straggler" and
        # left the user to find which sweep makes it (only Faults and Recovery named theirs)
        with tempfile.TemporaryDirectory(prefix="starring_report_test_") as tmp:
            proc, page = report_page_of(tmp, lambda r: r.get("sweep") == "main")
            self.assertEqual(proc.returncode, 0, proc.stderr)
            skipped = " ".join(page.split("Plots not drawn")[1].split())
            for title, sweep in (("Straggler", "straggler"), ("Observed staleness", "straggler"),
                                 ("Compute/communication crossover", "crossover"),
                                 ("Bucket size", "bucket"),
                                 ("Communication/computation overlap", "bucket")):
                item = skipped.split(title + ":")[1].split(":")[0]
                self.assertIn(f"scripts/sweep.sh {sweep} [--quick] --out this results folder",
                              item, (title, skipped))


class ReportRunAgain(unittest.TestCase):
    """scripts/report.py run again on a folder whose results changed (a bench pass dropped, a
    sweep added): the report folder holds what this run drew, and nothing it drew before."""

    def test_a_plot_no_longer_drawn_leaves_no_png_and_a_skip_says_why(self):
        # ring W=2 with ring bench rows: no 1-worker run, so no compute time for the cost
        # model, whose check said "no successful training run of a calibrated backend"
        with tempfile.TemporaryDirectory(prefix="starring_report_test_") as tmp:
            fixture_runs_in(tmp, lambda r: r["run_id"] == "main-ring-w2")
            bench, _ = sr.read_jsonl(os.path.join(FIXTURE, "bench.jsonl"))
            with open(os.path.join(tmp, "bench.jsonl"), "w", encoding="utf-8") as f:
                f.write("".join(json.dumps(b) + "\n" for b in bench if b.get("np") == 2
                                and b.get("backend") == "ring" and b["bench"] == "allreduce"))
            out = os.path.join(tmp, "report")
            os.mkdir(out)
            open(os.path.join(out, "mine.png"), "w").close()  # not the report's: it stays

            def report():
                proc = run_report(tmp, out)
                self.assertEqual(proc.returncode, 0, proc.stderr)
                with open(os.path.join(out, "summary.md"), encoding="utf-8") as f:
                    summary = f.read()
                with open(os.path.join(out, "report.html"), encoding="utf-8") as f:
                    page = html.unescape(re.sub(r"<[^>]+>", " ", f.read()))
                return sorted(p for p in os.listdir(out) if p.endswith(".png")), summary, page

            pngs, summary, page = report()
            self.assertIn("busbw.png", pngs)
            self.assertIn("Cost model: predicted vs measured step time: no 1-worker run (or "
                          "bench-model row) gives a compute time", " ".join(page.split()))
            self.assertEqual(report()[:2], (pngs, summary))  # the same input: the same output
            open(os.path.join(tmp, "bench.jsonl"), "w").close()  # the bench pass dropped
            again, _, page = report()
            # busbw.png was left from the first report, looking current beside summary.md
            self.assertEqual(again, sorted(set(pngs) - {"busbw.png"}))
            self.assertIn("mine.png", again)
            self.assertIn("Bus bandwidth vs message size: no `starring bench` rows", page)

    def test_in_a_folder_of_other_files_only_the_reports_own_are_removed(self):
        # `--out .` beside the user's own throughput.png: a bench-only report removed it as a
        # plot it had not drawn this time. And write_whole's <file>.<host>.<pid>.tmp of a report killed
        # by SIGKILL stayed for good: removed where its process is gone, and only those (not
        # another host's, whose pid says nothing here: a folder on shared storage).
        gone = subprocess.Popen(["true"])
        gone.wait()  # a pid no process has now
        with tempfile.TemporaryDirectory(prefix="starring_report_test_") as tmp:
            shutil.copy(os.path.join(FIXTURE, "bench.jsonl"), tmp)
            with open(os.path.join(tmp, "throughput.png"), "w") as f:
                f.write("mine")
            left = [sr.tmp_name(n, gone.pid) for n in ("busbw.png", "report.html")]
            kept = [sr.tmp_name("summary.md"),  # a writer alive (this test)
                    sr.tmp_name("notes.txt", gone.pid),  # not a name the report writes
                    f"busbw.png.{sr.HOST_TAG}x.{gone.pid}.tmp"]  # another host's
            for name in left + kept:
                open(os.path.join(tmp, name), "w").close()
            proc = run_report(tmp, tmp)
            self.assertEqual(proc.returncode, 0, proc.stderr)
            with open(os.path.join(tmp, "throughput.png")) as f:
                self.assertEqual(f.read(), "mine")
            self.assertIn("busbw.png", os.listdir(tmp))
            self.assertEqual(sorted(p for p in os.listdir(tmp) if p.endswith(".tmp")),
                             sorted(kept))

    def test_the_report_knows_every_png_its_plots_write(self):
        import report
        saved = set()
        for name in os.listdir(os.path.dirname(REPORT)):
            if name.startswith("report") and name.endswith(".py"):
                with open(os.path.join(os.path.dirname(REPORT), name), encoding="utf-8") as f:
                    saved |= set(re.findall(r'_save\(fig, out_dir, "([a-z_]+\.png)"\)', f.read()))
        self.assertEqual(len(saved), 15)
        self.assertEqual(saved, set(report.PLOT_FILES))


class ReportFoldersThatFail(unittest.TestCase):
    """A report or results folder that cannot be made, written or read: one line naming it, a
    non-zero exit, no traceback."""

    def test_a_report_folder_that_cannot_be_made_is_one_line(self):
        with tempfile.TemporaryDirectory(prefix="starring_report_test_") as tmp:
            taken = os.path.join(tmp, "a-file")
            open(taken, "w").close()
            proc = run_report(FIXTURE, taken)  # was a FileExistsError traceback
            self.assertNotEqual(proc.returncode, 0)
            self.assertEqual(proc.stderr.strip().splitlines(),
                             [f"report.py: cannot create the report folder {taken}: File exists"])

    def test_a_report_folder_that_takes_no_files_is_one_line(self):
        # As a user (not root), report.py on a read-only copy of a results folder: a
        # PermissionError traceback from matplotlib's savefig of the first plot.
        drop = unprivileged(self)
        with tempfile.TemporaryDirectory(prefix="starring_report_test_") as tmp:
            open_to_all(tmp)
            out = os.path.join(tmp, "report")
            os.mkdir(out, 0o555)
            os.chmod(out, 0o555)
            mpl = os.path.join(tmp, "mpl")  # matplotlib's cache, where `nobody` has no home
            os.mkdir(mpl)
            os.chmod(mpl, 0o777)
            proc = subprocess.run([sys.executable, REPORT, FIXTURE, "--out", out],
                                  capture_output=True, text=True, timeout=300, preexec_fn=drop,
                                  env=dict(os.environ, MPLCONFIGDIR=mpl))
            self.assertEqual(proc.returncode, 1, proc.stderr)
            self.assertEqual(proc.stderr.strip().splitlines(),
                             [f"report.py: cannot write in the report folder {out}: "
                              "Permission denied"])
            self.assertEqual(os.listdir(out), [])
        # ... and a failure while it writes (a full disk; here a plot's name taken by a folder,
        # which fails for root too): one line naming the file, not an IsADirectoryError's trace
        with tempfile.TemporaryDirectory(prefix="starring_report_test_") as tmp:
            taken = os.path.join(tmp, "throughput.png")
            os.mkdir(taken)
            proc = run_report(FIXTURE, tmp)
            self.assertEqual(proc.returncode, 1, proc.stderr)
            self.assertEqual(proc.stderr.strip().splitlines(),
                             [f"report.py: cannot write the report in {tmp}: {taken}: "
                              "Is a directory"])

    def test_an_unreadable_results_file_is_one_line(self):
        with tempfile.TemporaryDirectory(prefix="starring_report_test_") as tmp:
            os.mkdir(os.path.join(tmp, "runs.jsonl"))  # was an IsADirectoryError traceback
            proc = run_report(tmp, os.path.join(tmp, "report"))
            self.assertNotEqual(proc.returncode, 0)
            self.assertEqual(proc.stderr.strip().splitlines(),
                             [f"report.py: cannot read {tmp}/runs.jsonl: Is a directory"])
        with tempfile.TemporaryDirectory(prefix="starring_report_test_") as tmp:
            with open(os.path.join(tmp, "bench.jsonl"), "wb") as f:  # bytes that are not UTF-8
                f.write(b"\xff\xfe garbage\n")
            records, bad = sr.read_jsonl(os.path.join(tmp, "bench.jsonl"))
            self.assertEqual((records, len(bad)), ([], 1))  # was a UnicodeDecodeError

    def test_a_folder_without_results_is_an_error(self):
        tmp = tempfile.mkdtemp(prefix="starring_report_test_")
        try:
            proc = run_report(tmp, os.path.join(tmp, "report"))
            self.assertEqual(proc.returncode, 2)  # bad input, as the other tools say it (was 1)
            self.assertIn("neither runs.jsonl nor bench.jsonl", proc.stderr)
            proc = run_report(os.path.join(tmp, "missing"), os.path.join(tmp, "report"))
            self.assertEqual(proc.returncode, 2)
            self.assertIn("no such folder", proc.stderr)
            open(os.path.join(tmp, "runs.jsonl"), "w").close()  # the file given for its folder
            proc = run_report(os.path.join(tmp, "runs.jsonl"), os.path.join(tmp, "report"))
            self.assertEqual(proc.returncode, 2)
            self.assertEqual(proc.stderr, f"report.py: {tmp}/runs.jsonl is a file, not a "
                             f"results folder (give the folder: scripts/report.py {tmp})\n")
        finally:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    unittest.main(verbosity=2)
