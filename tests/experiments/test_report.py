#!/usr/bin/env python3
"""Tests of the report generator on the committed fixture (tests/experiments/fixtures/results,
written by make_fixture.py). No `starring` binary needed. The result-format checks of
scripts/starring_results.py: test_results_format.py.
"""
import copy
import html
import json
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
FIXTURE = os.path.join(HERE, "fixtures", "results")
REPORT = os.path.join(REPO, "scripts", "report.py")
sys.path.insert(0, os.path.join(REPO, "scripts"))
import starring_results as sr  # noqa: E402
from unprivileged import open_to_all, unprivileged  # noqa: E402

ALL_PLOTS = ["throughput.png", "efficiency.png", "breakdown.png", "bytes_per_rank.png",
             "busbw.png", "overlap.png", "convergence.png", "straggler.png", "staleness.png", "crossover.png",
             "bucket.png", "cost_model_check.png", "cost_model_scaling.png", "faults.png"]


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


_fixture_report = {}


def fixture_report():
    """report.py on the whole fixture, made once for the cases that only read it: (process, the
    report folder). Removed by tearDownModule."""
    if not _fixture_report:
        tmp = tempfile.mkdtemp(prefix="starring_report_test_")
        out = os.path.join(tmp, "report")
        _fixture_report.update(tmp=tmp, out=out, proc=run_report(FIXTURE, out))
    return _fixture_report["proc"], _fixture_report["out"]


def tearDownModule():
    if _fixture_report:
        shutil.rmtree(_fixture_report["tmp"], ignore_errors=True)


def report_page_of(tmp, keep):
    """The fixture's runs for which keep(run) holds, reported from `tmp`: (process, page text)."""
    fixture_runs_in(tmp, keep)
    proc = run_report(tmp, os.path.join(tmp, "report"))
    page = ""
    if proc.returncode == 0:
        with open(os.path.join(tmp, "report", "report.html"), encoding="utf-8") as f:
            page = html.unescape(re.sub(r"<[^>]+>", " ", f.read()))
    return proc, page


class ReportOnFixture(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.proc, cls.out = fixture_report()
        cls.tmp = tempfile.mkdtemp(prefix="starring_report_test_")

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def test_exits_zero_and_prints_the_table_and_path(self):
        self.assertEqual(self.proc.returncode, 0, self.proc.stderr)
        self.assertIn("samples/s", self.proc.stdout)
        self.assertIn(os.path.join(self.out, "report.html"), self.proc.stdout)
        self.assertIn("FAILED: main-ps-1-w8", self.proc.stdout)
        self.assertIn("TIMEOUT: main-ps-1-w16", self.proc.stdout)
        # a skipped run was never launched: the reason, not a log its record names but no job
        # wrote (the sweep printed 'SKIPPED: ... (log runs/<id>/log.txt)' over an empty folder)
        self.assertIn("SKIPPED: main-nccl-w2 (variant requires a GPU and none was found)\n",
                      self.proc.stdout)
        self.assertNotIn("main-nccl-w2/log.txt", self.proc.stdout)
        self.assertIn("straggler", self.proc.stdout)  # every sweep's runs in the table

    def test_the_terminal_table_can_keep_to_one_sweep(self):
        # the main sweep's runs beside two other sweeps' (without the bench rows and metrics
        # files, whose plots this case does not read)
        results = os.path.join(self.tmp, "three-sweeps")
        os.mkdir(results)
        fixture_runs_in(results, lambda r: r.get("sweep") in ("main", "straggler", "crossover"),
                        metrics=False)
        out = os.path.join(self.tmp, "one-sweep")
        p = subprocess.run([sys.executable, REPORT, results, "--out", out, "--table-sweep",
                            "main"], capture_output=True, text=True, timeout=300)
        self.assertEqual(p.returncode, 0, p.stderr)
        table = [l for l in p.stdout.splitlines() if "MLP" in l]
        self.assertTrue(table, p.stdout)
        self.assertFalse([l for l in table if "straggler" in l or "crossover" in l], p.stdout)
        with open(os.path.join(out, "summary.md"), encoding="utf-8") as f:
            self.assertIn("crossover", f.read())  # the page and summary keep every run

    def test_every_plot_exists_is_a_png_and_is_referenced(self):
        with open(os.path.join(self.out, "report.html"), encoding="utf-8") as f:
            page = f.read()
        pngs = sorted(p for p in os.listdir(self.out) if p.endswith(".png"))
        self.assertEqual(pngs, sorted(ALL_PLOTS))  # the fixture has data for every plot
        for png in pngs:
            path = os.path.join(self.out, png)
            with open(path, "rb") as f:
                self.assertEqual(f.read(8), b"\x89PNG\r\n\x1a\n", png)
            self.assertGreater(os.path.getsize(path), 5000, png)
            self.assertIn(f'alt="{png}"', page)
            self.assertIn(f'href="{png}"', page)
        # self-contained: every image is embedded, none is loaded from a file
        self.assertEqual(len(re.findall(r'<img src="data:image/png;base64,', page)), len(pngs))
        self.assertEqual(re.findall(r'<img src="(?!data:)', page), [])

    def test_every_plot_has_a_caption_and_wall_clock_plots_warn_of_oversubscription(self):
        with open(os.path.join(self.out, "report.html"), encoding="utf-8") as f:
            page = f.read()
        captions = re.findall(r"<figure id=\"(\w+)\">.*?<figcaption>(.*?)</figcaption>", page, re.S)
        self.assertEqual(len(captions), len(ALL_PLOTS))
        warned = {name for name, cap in captions if "time-share this machine" in cap}
        # every wall-clock plot with a run of more ranks than cores (the fixture's straggler
        # runs have 4-5 ranks, its crossover's ps-1 3, its hung server fault 3)
        for name in ("throughput", "efficiency", "breakdown", "convergence", "busbw",
                     "straggler", "crossover", "faults"):
            self.assertIn(name, warned)
        self.assertNotIn("bytes_per_rank", warned)  # bytes do not depend on the cores
        self.assertNotIn("bucket", warned)  # its runs have 2 ranks on 2 cores

    def test_summary_has_one_row_per_successful_run_and_lists_failures(self):
        runs, _ = sr.read_jsonl(os.path.join(FIXTURE, "runs.jsonl"))
        ok = [r for r in runs if r["status"] == "ok"]
        with open(os.path.join(self.out, "summary.md"), encoding="utf-8") as f:
            text = f.read()
        runs_part = text.split("## Cost model")[0]  # the cost model's tables come after
        table = [l for l in runs_part.splitlines() if l.startswith("| ") and "samples/s" not in l]
        self.assertEqual(len(table), len(ok))
        self.assertIn("`main-ps-1-w8`: failed", text)
        self.assertIn("`main-ps-1-w16`: timeout", text)
        self.assertIn("- `main-nccl-w2`: skipped (exit 0): variant requires a GPU and none was "
                      "found\n", text)  # no log: it was never launched
        # the fixture has ASP/SSP runs: the table says why their samples/s and step ms differ
        self.assertIn("Under ASP and SSP the workers run at their own pace", text)
        # runs that failed because a fault was injected on purpose are results, not failures,
        # unless the job hung: they go to the faults table
        failures = text.split("## Runs that did not succeed")[1].split("##")[0]
        self.assertNotIn("faults-ring-kill", failures)
        self.assertIn("`faults-ps-1-server-hang`: timeout", failures)
        faults = text.split("## Faults")[1].split("##")[0]
        rows = [l for l in faults.splitlines() if l.startswith("| ") and "backend" not in l]
        self.assertEqual([l.split(" | ")[6] for l in rows],
                         ["detected", "detected", "detected, rank not named", "hung"])
        # the fixture's bytes are the theory, so every deviation is 0%
        self.assertEqual(re.findall(r"\(([-+][0-9.]+%)\)", text), [])

    def test_summary_cells_are_the_records_figures_in_the_headers_order(self):
        # main-ps-1-w2: 2 workers and 1 server on 3 ranks (2 cores); the step's four times
        # differ, so a column out of place shows
        runs, _ = sr.read_jsonl(os.path.join(FIXTURE, "runs.jsonl"))
        rec = next(r for r in runs if r["run_id"] == "main-ps-1-w2")
        with open(os.path.join(self.out, "summary.md"), encoding="utf-8") as f:
            lines = f.read().split("## Cost model")[0].splitlines()
        header = next(l for l in lines if l.startswith("| backend"))
        rows = [l for l in lines if l.startswith("| ps-1 | 784-256-128-10 MLP | 2 |")]
        self.assertEqual(len(rows), 1, lines)
        cells = dict(zip(header.strip("| ").split(" | "), rows[0].strip("| ").split(" | ")))
        st = rec["step_time"]
        self.assertEqual(cells["workers"], "2")
        self.assertEqual(cells["servers"], "1")
        self.assertEqual(cells["samples/s"], f"{rec['samples_per_s']:,.0f}*")
        self.assertEqual(cells["step ms (total / compute / comm / wait)"],
                         " / ".join(f"{1e3 * st[k]:.2f}" for k in sr.STEP_TIME_FIELDS))
        self.assertEqual(cells["busiest worker MB sent/step: measured / theory (dev)"],
                         "0.941 / 0.941 (0%)")  # D
        self.assertEqual(cells["busiest server MB recv/step: measured / theory (dev)"],
                         "1.88 / 1.88 (0%)")  # W x D / S
        self.assertEqual(cells["test acc"], f"{rec['test_accuracy']:.4f}")

    def test_the_step_ms_parts_are_said_not_to_add_up(self):
        # the table's step ms read "total / compute / comm / wait" with nothing saying that comm
        # overlaps the rest and that total holds the loop's work between steps (other): a ps run
        # read 2.48 / 0.71 / 1.39 / 1.51, neither sum equal to its total
        note = "In step ms, total is the training thread's step: compute + wait + other"
        with open(os.path.join(self.out, "summary.md"), encoding="utf-8") as f:
            self.assertIn(note, f.read())
        with open(os.path.join(self.out, "report.html"), encoding="utf-8") as f:
            self.assertIn(note, html.unescape(f.read()))

    def test_time_shared_runs_are_starred_and_the_star_is_said_everywhere(self):
        # the table's * after samples/s (more ranks than cores) and the sentence saying what it
        # means: in the terminal, in summary.md and on the page
        note = "* more ranks (workers + dedicated servers) on a host than the CPUs they may use"
        starred = re.findall(r"\b[0-9,]+\*", self.proc.stdout)
        self.assertTrue(starred, self.proc.stdout)
        self.assertIn("\n" + note, self.proc.stdout)
        with open(os.path.join(self.out, "summary.md"), encoding="utf-8") as f:
            text = f.read()
        self.assertIn("| 5,076* |", text)  # main-ring-w4: 4 ranks on 2 cores
        self.assertIn(note[2:], text)
        with open(os.path.join(self.out, "report.html"), encoding="utf-8") as f:
            self.assertIn(note[2:], html.unescape(f.read()))

    def test_the_page_holds_the_summary_table(self):
        with open(os.path.join(self.out, "summary.md"), encoding="utf-8") as f:
            md = [[c for c in l.strip("| \n").split(" | ")]
                  for l in f.read().split("## Cost model")[0].splitlines()
                  if l.startswith("| ") and "samples/s" not in l]
        with open(os.path.join(self.out, "report.html"), encoding="utf-8") as f:
            page = f.read()
        table = page.split("<h2>Summary</h2>")[1].split("</table>")[0]
        self.assertIn("<th>busiest server MB recv/step: measured / theory (dev)</th>", table)
        rows = [[html.unescape(c) for c in re.findall(r"<td>(.*?)</td>", row)]
                for row in re.findall(r"<tr>(.*?)</tr>", table) if "<td>" in row]
        self.assertEqual(rows, md)
        runs, _ = sr.read_jsonl(os.path.join(FIXTURE, "runs.jsonl"))
        self.assertIn(f"{len(runs)} train runs ({sum(r['status'] == 'ok' for r in runs)} ok)",
                      page)


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
            self.assertIn("runs.jsonl record 7: not a JSON object", proc.stderr)
            with open(os.path.join(tmp, "report", "summary.md"), encoding="utf-8") as f:
                table = [line for line in f if line.startswith("| ring ")]
            self.assertEqual(len(table), 3)  # the three good runs
            with open(os.path.join(tmp, "report", "report.html"), encoding="utf-8") as f:
                self.assertIn("bench.jsonl record 1: not a JSON object", f.read())

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

    def test_a_bench_without_parameter_server_rows_still_gives_the_cost_model(self):
        # the report's cost model scaling plot (report_model.extrapolation, as make_figures calls
        # it) on the fixture's runs and its ring rows alone, in this process: the other plots
        # of a whole report, drawn by the other cases, say nothing here
        import report
        import report_model as rm
        import report_plots as rp
        runs, _ = sr.read_jsonl(os.path.join(FIXTURE, "runs.jsonl"))
        bench, _ = sr.read_jsonl(os.path.join(FIXTURE, "bench.jsonl"))
        ring = sr.collapse_bench_repeats([b for b in bench if b.get("backend") == "ring"])
        self.assertNotEqual(len(ring), len(bench))
        with tempfile.TemporaryDirectory(prefix="starring_report_test_") as tmp:
            fig = rm.extrapolation(report.shown_runs(runs), ring, tmp)
            self.assertIsInstance(fig, rp.Figure, fig)
            self.assertTrue(os.path.exists(os.path.join(tmp, "cost_model_scaling.png")))

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

    def test_a_full_disk_is_one_line_and_keeps_the_earlier_report(self):
        # A file-size limit stands in for a full disk (EFBIG where ENOSPC would come): a
        # traceback, and the earlier report's first plot cut to the limit (0 bytes on a full
        # tmpfs), before write_whole.
        def full_disk():
            import resource
            import signal
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
            resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))

        with tempfile.TemporaryDirectory(prefix="starring_report_test_") as tmp:
            out = os.path.join(tmp, "report")
            proc, made = fixture_report()  # the earlier report: the whole fixture's
            self.assertEqual(proc.returncode, 0, proc.stderr)
            shutil.copytree(made, out)

            def files():
                found = {}
                for name in sorted(os.listdir(out)):
                    with open(os.path.join(out, name), "rb") as f:
                        found[name] = f.read()
                return found

            before = files()
            proc = subprocess.run([sys.executable, REPORT, FIXTURE, "--out", out],
                                  capture_output=True, text=True, timeout=300,
                                  preexec_fn=full_disk)
            self.assertNotEqual(proc.returncode, 0)
            lines = proc.stderr.strip().splitlines()
            self.assertEqual(len(lines), 1, proc.stderr)
            self.assertRegex(lines[0], rf"^report.py: cannot write the report in {re.escape(out)}: "
                             rf"{re.escape(out)}/[a-z_]+\.(png|md|html): File too large$")
            self.assertEqual(files(), before)  # every file whole, the earlier ones kept

    def test_a_folder_without_results_is_an_error(self):
        tmp = tempfile.mkdtemp(prefix="starring_report_test_")
        try:
            proc = run_report(tmp, os.path.join(tmp, "report"))
            self.assertEqual(proc.returncode, 2)  # bad input, as the other tools say it (was 1)
            self.assertIn("neither runs.jsonl nor bench.jsonl", proc.stderr)
            proc = run_report(os.path.join(tmp, "missing"), os.path.join(tmp, "report"))
            self.assertEqual(proc.returncode, 2)
            self.assertIn("no such folder", proc.stderr)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)


class RepeatedRuns(unittest.TestCase):
    """A configuration run several times (sweep.sh --repeat) is shown as its median run, with
    the spread of the others, in the table and the plots; other configurations are untouched."""

    def setUp(self):
        self.runs, _ = sr.read_jsonl(os.path.join(FIXTURE, "runs.jsonl"))
        self.bench, _ = sr.read_jsonl(os.path.join(FIXTURE, "bench.jsonl"))
        self.base = next(r for r in self.runs if r["status"] == "ok" and r["workers"] == 2)

    def repeats(self, rates):
        out = []
        for i, rate in enumerate(rates, 1):
            r = copy.deepcopy(self.base)
            r.update(run_id=f"{self.base['run_id']}-r{i}", repeat=i, repeats=len(rates),
                     samples_per_s=rate)
            out.append(r)
        return out

    def test_the_median_run_carries_every_repeat(self):
        others = [r for r in self.runs if r is not self.base]
        got = sr.collapse_repeats(self.repeats([300.0, 100.0, 200.0]) + others)
        mine = [r for r in got if r.get("variant") == self.base["variant"]
                and r["workers"] == 2 and r.get("sweep") == self.base["sweep"]
                and r["status"] == "ok" and r["config"] == self.base["config"]
                and r.get("grid_point") == self.base.get("grid_point")]
        self.assertEqual(len(mine), 1)
        self.assertEqual(mine[0]["samples_per_s"], 200.0)
        self.assertEqual(mine[0]["run_id"], self.base["run_id"] + "-r3")  # a real run
        self.assertEqual(mine[0]["repeat_samples_per_s"], [100.0, 200.0, 300.0])
        self.assertEqual(len(got), len(others) + 1)
        self.assertNotIn("repeat_samples_per_s", sr.collapse_repeats([self.base])[0])
        # an even count takes the lower median
        two = sr.collapse_repeats(self.repeats([5.0, 7.0]))
        self.assertEqual([r["samples_per_s"] for r in two], [5.0])

    def test_bench_rows_of_repeated_passes_collapse_per_size(self):
        rows = [b for b in self.bench if b.get("bench") == "allreduce" and "size" in b]
        twice = []
        for rep, scale in ((1, 1.0), (2, 2.0), (3, 0.5)):
            for b in rows:
                c = dict(b, repeat=rep, bench_id=f"x-bench-a-np2-r{rep}")
                c["busbw_GBps"] = b["busbw_GBps"] * scale
                twice.append(c)
        got = [b for b in sr.collapse_bench_repeats(twice) if b.get("bench") == "allreduce"]
        self.assertEqual(len(got), len(rows))
        for b, orig in zip(got, rows):
            self.assertAlmostEqual(b["busbw_GBps"], orig["busbw_GBps"])
            self.assertEqual(len(b["repeat_busbw_GBps"]), 3)

    def test_report_shows_the_range_and_says_so(self):
        with tempfile.TemporaryDirectory(prefix="starring_report_rep_") as tmp:
            shutil.copytree(FIXTURE, os.path.join(tmp, "results"))
            path = os.path.join(tmp, "results", "runs.jsonl")
            with open(path, "a", encoding="utf-8") as f:
                for r in self.repeats([self.base["samples_per_s"] * 0.5,
                                       self.base["samples_per_s"] * 1.5])[1:]:
                    f.write(json.dumps(r) + "\n")
            p = run_report(os.path.join(tmp, "results"), os.path.join(tmp, "out"))
            self.assertEqual(p.returncode, 0, p.stderr)
            self.assertIn("2 runs]", p.stdout)
            with open(os.path.join(tmp, "out", "report.html"), encoding="utf-8") as f:
                page = f.read()
            self.assertIn("Points run 2 times show the median run", page)
            for plot in ALL_PLOTS:
                self.assertIn(f'alt="{plot}"', page)


class ScalingYardstickAndColors(unittest.TestCase):
    def test_efficiency_measures_every_backend_against_the_fastest_smallest_run(self):
        # Each backend's own 1-worker run was its baseline: a co-located PS whose W=1 run was
        # slow (34k samples/s beside ring's 71k) showed its W=2 point at 181% of linear.
        # The efficiency plot (as make_figures draws it) in this process; its caption is the
        # page's (ReportOnFixture checks that every plot's caption is on the page).
        import report
        import report_scaling as rsc
        runs, _ = sr.read_jsonl(os.path.join(FIXTURE, "runs.jsonl"))
        for r in runs:
            if r.get("run_id") == "main-ps-colocated-w1":
                r["samples_per_s"] /= 2
        with tempfile.TemporaryDirectory(prefix="starring_report_eff_") as tmp:
            fig = rsc.efficiency(report.shown_runs(runs), tmp)
            self.assertIsInstance(fig, rsc.Figure, fig)
            self.assertTrue(os.path.exists(os.path.join(tmp, fig.file)))
        verdict = fig.caption.split("Here, percent of linear")[1]
        self.assertIn("ring at W=1, 2,577 samples/s per worker", fig.caption)
        self.assertIn("784-256-128-10 MLP W=2: ring 99%, ps-colocated 99%, ps-1 66%*", verdict)
        self.assertLessEqual(max(int(v) for v in re.findall(r" (\d+)%", verdict)), 100)

    def test_the_verdict_names_the_points_the_plot_draws(self):
        # Two sweeps in one folder (main and scaling both run ring at W=1, 2 on the default
        # MLP): the plot draws each backend's last run per worker count, the caption listed
        # every run ('W=2: ring 90%, ring 75%').
        import report_scaling as rsc

        def run(w, rate, sweep):
            return {"variant": "ring", "workers": w, "samples_per_s": rate, "sweep": sweep,
                    "model": {"params": 1000, "widths": [1]}, "config": {"preset": "default"},
                    "grid_point": {}}

        runs = [run(1, 100, "main"), run(2, 180, "main"), run(1, 100, "scaling"),
                run(2, 150, "scaling")]
        self.assertEqual(rsc._scaling_verdict(rsc._scaling_facets(runs)),
                         " Here, percent of linear (fastest first): default MLP W=2: ring 75%.")
        # Above linear at equal per-worker work: said to be the baseline's slowness (a loaded
        # 2-core machine's quickstart read ring 127% at W=2, with no word on why)
        above = rsc._scaling_verdict(rsc._scaling_facets([run(1, 100, "main"),
                                                          run(2, 254, "main")]))
        self.assertTrue(above.startswith(" Here, percent of linear (fastest first): default MLP "
                                         "W=2: ring 127%. Above 100% is not superlinear"), above)

    def test_a_backend_has_one_color_in_every_figure(self):
        import report_plots as rp  # matplotlib: imported here, as test_cost_model does
        self.assertEqual(rp.bench_color({"backend": "ps", "servers": 1}), rp.color_of("ps-1"))
        self.assertEqual(rp.bench_color({"backend": "ps", "servers": 2}),
                         rp.color_of("ps-half"))
        self.assertEqual(rp.bench_color({"backend": "ring@2"}), rp.color_of("ring"))
        # the order plots meet labels in no longer changes them
        first = {b: rp.color_of(b) for b in ("ring", "ps-1", "ps-colocated", "mpi")}
        rp.color_of("someone's own label")
        self.assertEqual(first, {b: rp.color_of(b) for b in first})
        self.assertEqual(len(set(rp.BACKEND_COLOR[b] for b in
                                 ("ring", "mpi", "nccl", "ps-1", "ps-half", "ps-colocated",
                                  "ps-bsp", "ps-ssp", "ps-asp"))), 9)


class BytesCaption(unittest.TestCase):
    def test_the_caption_states_the_largest_deviation_it_measured(self):
        # Counts 0.012% off were captioned 'Every measured count equals the theory (all
        # within 0.05%)': now the bound is the largest deviation, rounded up, and where it is.
        import report_traffic as rt

        def run(sent, workers=2):
            return {"backend": "ring", "variant": "ring", "workers": workers,
                    "model": {"bytes": 1000},
                    "bytes_per_step": {"worker_sent": sent, "worker_recv": 2000 * (workers - 1) / workers,
                                       "server_recv": 0, "server_sent": 0}}

        self.assertEqual(rt._deviation_note([run(1000), run(1500.05, 4)]),
                         " Every measured count matches the theory within 0.0034% (all 4; "
                         "largest: worker sent, ring W=4).")
        self.assertEqual(rt._deviation_note([run(1000.12)]),
                         " Every measured count matches the theory within 0.012% (all 2; "
                         "largest: worker sent, ring W=2).")
        self.assertEqual(rt._deviation_note([run(1000)]),
                         " Every measured count equals the theory (all 2).")
        self.assertEqual(rt._deviation_note([run(1000), run(1503, 4)]),
                         " Largest deviation from theory: +0.2% (worker sent, ring W=4).")

    def test_unbalanced_servers_show_their_busiest(self):
        # --ps-partition tensor, 2 workers, 2 servers: one server takes nearly everything. The
        # summary's mean over servers is the theory W x D/S exactly, so the table and caption
        # read '(0%)'; the busiest server is what a user must see.
        import report_traffic as rt
        rec = {"backend": "ps", "variant": "ps-tensor", "workers": 2, "num_servers": 2,
               "servers": "2", "model": {"bytes": 1000}, "step_time": {}, "test_accuracy": 0.5,
               "bytes_per_step": {"worker_sent": 1000, "worker_recv": 1000,
                                  "server_recv": 1000, "server_sent": 1000,
                                  "server_recv_busiest": 1996, "server_sent_busiest": 1996,
                                  "server_busiest_rank": 3}}
        self.assertEqual(sr.busiest(rec, "server_recv"), 1996)
        self.assertIn("+99.6% (server received, ps-tensor W=2)", rt._deviation_note([rec]))
        old = dict(rec, bytes_per_step={k: v for k, v in rec["bytes_per_step"].items()
                                        if "busiest" not in k})  # a record from before
        self.assertEqual(sr.busiest(old, "server_recv"), 1000)

    def test_tensor_partitioned_runs_are_said_to_be_unbalanced_by_design(self):
        # a sweep with --ps-partition tensor beside balanced runs was captioned only 'Largest
        # deviation from theory: +99.7% (server received, ps-tensor W=2)': not why, and the
        # balanced runs' agreement was hidden behind it
        import report_traffic as rt
        ring = {"backend": "ring", "variant": "ring", "workers": 2, "model": {"bytes": 1000},
                "bytes_per_step": {"worker_sent": 1000.1, "worker_recv": 1000,
                                   "server_recv": 0, "server_sent": 0}}
        tensor = {"backend": "ps", "variant": "ps-tensor", "workers": 2, "num_servers": 2,
                  "servers": "2", "model": {"bytes": 1000},
                  "config": {"backend": "ps", "servers": "2", "ps-partition": "tensor"},
                  "bytes_per_step": {"worker_sent": 1000, "worker_recv": 1000,
                                     "server_recv": 1000, "server_sent": 1000,
                                     "server_recv_busiest": 1997, "server_sent_busiest": 1996}}
        note = rt._deviation_note([ring, tensor])
        self.assertIn("Every measured count matches the theory within 0.01% (all 2; largest: "
                      "worker sent, ring W=2).", note)
        self.assertIn("Runs with --ps-partition tensor place whole tensors on the servers, so "
                      "their shards are unbalanced by design", note)
        self.assertIn("+99.7% off it (server received, ps-tensor W=2)", note)
        self.assertNotIn("Largest deviation", note)

    def test_unbalanced_colocated_workers_show_their_busiest(self):
        # --servers colocated --ps-partition tensor, np 4 (the default MLP): the mean over
        # workers is the theory 2(N-1)/N x D, '(0%)', while rank 1 moved 81% more
        import report
        import report_traffic as rt
        runs, _ = sr.read_jsonl(os.path.join(FIXTURE, "runs.jsonl"))
        rec = copy.deepcopy(next(r for r in runs if r.get("run_id") == "main-ps-colocated-w4"))
        rec["bytes_per_step"].update(worker_sent_busiest=2556584, worker_recv_busiest=2556648,
                                     worker_busiest_rank=1)
        self.assertEqual(sr.busiest(rec, "worker_sent"), 2556584)
        self.assertIn("+81.2% (worker received, ps-colocated W=4)", rt._deviation_note([rec]))
        row = report.table_rows([rec])[0]
        self.assertEqual(row[report.HEADER.index(
            "busiest worker MB sent/step: measured / theory (dev)")], "2.56 / 1.41 (+81.2%)")
        old = dict(rec, bytes_per_step={k: v for k, v in rec["bytes_per_step"].items()
                                        if "busiest" not in k})  # a record from before
        self.assertEqual(sr.busiest(old, "worker_sent"), 1410876)


class TableCells(unittest.TestCase):
    def test_megabytes_keep_three_digits(self):
        import report  # noqa: E402 - matplotlib, as the report needs
        self.assertEqual([report._mb(x) for x in (8.0026e6, 5.33508e6, 0.0, 160.24e6, 940584)],
                         ["8.00", "5.34", "0", "160", "0.941"])  # "8 / 8" read as rounded

    def test_no_terminal_column_is_wider_than_its_cells(self):
        # the one-line header ('busiest worker MB sent/step meas/theory (dev)', 45 characters
        # over cells of 18) made the main job's table 158 characters wide: every row wrapped in
        # a 120-column terminal
        import report  # noqa: E402
        runs, _ = sr.read_jsonl(os.path.join(FIXTURE, "runs.jsonl"))
        rows = report.table_rows([r for r in runs if r.get("sweep") == "main"])
        lines = report.text_table(rows).splitlines()
        header, body = lines[:3], [l for l in lines[3:] if "MLP" in l]
        self.assertEqual(len(body), len(rows))
        self.assertIn("busiest worker", header[0])
        self.assertIn("MB sent/step", header[1])
        self.assertLessEqual(max(len(l) for l in header), max(len(l) for l in body))
        # the cells are 'measured / theory (deviation)': the header says so, in that order
        # (its second line read 'MB sent/step (theory)', naming the deviation the theory)
        col = header[2].index("meas/theory (dev)")
        self.assertRegex(body[0][col:], r"^[0-9.]+ / [0-9.]+ \((0|[+-][0-9.]+)%\)")


class ConvergenceClock(unittest.TestCase):
    def test_older_metrics_files_are_put_on_the_training_clock(self):
        import report_convergence as rc
        # Before 6673712 a step line's time_s counted the evaluations before it; the eval line's
        # did not. Step 3 came 2.0 s after the eval at 1.0 and took 0.5 s: 1.5 s of evaluation.
        lines = [{"step": 1, "loss": 2.0, "time_s": 0.5, "compute_s": 0.4, "wait_s": 0.1},
                 {"step": 2, "loss": 1.5, "time_s": 1.0, "compute_s": 0.4, "wait_s": 0.1},
                 {"event": "eval", "epoch": 1, "test_accuracy": 0.8, "time_s": 1.0},
                 {"step": 3, "loss": 1.2, "time_s": 3.0, "compute_s": 0.3, "wait_s": 0.2},
                 {"step": 4, "loss": 1.0, "time_s": 3.5, "compute_s": 0.3, "wait_s": 0.2},
                 {"event": "eval", "epoch": 2, "test_accuracy": 0.9, "time_s": 2.0}]
        old = rc.training_clock({"job": {"legs": 1}}, lines)
        self.assertEqual([m["time_s"] for m in old], [0.5, 1.0, 1.0, 1.5, 2.0, 2.0])
        self.assertEqual(rc.training_clock({}, lines)[3]["time_s"], 1.5)  # no job: older still
        new = {"job": {"legs": 1, "leg_train_s": [2.0]}}  # recorded on the training clock
        self.assertIs(rc.training_clock(new, lines), lines)

    def test_the_loss_drawn_is_every_workers_mean_where_recorded(self):
        import report_convergence as rc
        self.assertEqual(rc.step_loss({"loss": 2.0, "global_loss": 1.5}), 1.5)
        self.assertEqual(rc.step_loss({"loss": 2.0}), 2.0)  # older runs, --metrics-loss worker0
        # a worker's loss not a number: a gap in the curve, not worker 0's finite loss
        self.assertTrue(math.isnan(rc.step_loss({"loss": 2.0, "global_loss": None})))


if __name__ == "__main__":
    unittest.main(verbosity=2)
