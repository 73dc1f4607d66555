#!/usr/bin/env python3
"""Tests of the report generator on the committed fixture (tests/experiments/fixtures/results,
written by make_fixture.py): the files, captions, tables and page of the whole fixture's report,
a full disk under it, and repeated runs. No `starring` binary needed. Partial, broken or
unwritable folders: test_report_inputs.py; the figures' numbers and the table's cells computed
in-process: test_report_numbers.py; the result-format checks of scripts/starring_results.py:
test_results_format.py.
"""
import copy
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

ALL_PLOTS = ["throughput.png", "efficiency.png", "breakdown.png", "bytes_per_rank.png",
             "busbw.png", "overlap.png", "convergence.png", "straggler.png", "staleness.png", "crossover.png",
             "bucket.png", "cost_model_check.png", "cost_model_scaling.png", "faults.png"]


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
        # a bench pass that failed is recorded as one line without rows: the report said
        # nothing of it, and the busbw plot lacked its series without a word
        self.assertIn("FAILED: bench pass main-bench-x-np8 (np 8): failed (exit 1)\n",
                      self.proc.stdout)
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
        # runs have 4-5 ranks, its crossover's ps-1 3, its hung server fault 3); staleness too:
        # counted in steps, but set by the workers' pace (its ssp/asp runs: 5 ranks on 2 cores,
        # captioned without a word of it)
        for name in ("throughput", "efficiency", "breakdown", "convergence", "busbw",
                     "straggler", "staleness", "crossover", "faults"):
            self.assertIn(name, warned)
        self.assertNotIn("bytes_per_rank", warned)  # bytes do not depend on the cores
        self.assertNotIn("bucket", warned)  # its runs have 2 ranks on 2 cores

    def test_the_convergence_caption_names_the_models_it_does_not_draw(self):
        # convergence.png draws the smallest model's runs; the fixture's wide MLP runs (W=1, 2,
        # with histories) had their loss and accuracy on no plot, and no caption said so
        with open(os.path.join(self.out, "report.html"), encoding="utf-8") as f:
            page = f.read()
        caption = html.unescape(re.search(r'<figure id="convergence">.*?<figcaption>(.*?)'
                                          r"</figcaption>", page, re.S).group(1))
        self.assertTrue(caption.startswith("784-256-128-10 MLP (0.24M params): "), caption)
        self.assertIn(" Runs of the other models are not drawn: wide MLP (20.04M params), 2 "
                      "runs; the summary table gives their test accuracy.", caption)

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
        self.assertIn("- bench pass main-bench-x-np8 (np 8): failed (exit 1)\n", failures)
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


class ReportOnAFullDisk(unittest.TestCase):
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

    def test_rows_of_a_pass_made_again_with_other_args_are_no_repeats(self):
        # [bench a] with `-n 5`, then with `-n 20` into the same folder: at the sizes both
        # measured, their rows were pooled as repeats into one median (by busbw, the -n 5 row's
        # here); the latest pass's rows are kept there, and the rest said
        rows = [b for b in self.bench if b.get("bench") == "allreduce" and "size" in b
                and b["backend"] == "ring" and b["np"] == 2]
        sizes = sorted(b["size"] for b in rows)
        first = [dict(b, bench_id="x-bench-a-np2", bench_args="-n 5",
                      busbw_GBps=b["busbw_GBps"] * 2) for b in rows]
        later = [dict(b, bench_id="x-bench-a-np2", bench_args="-n 20") for b in rows
                 if b["size"] != sizes[0]]  # the smallest size: measured by -n 5 only
        got = sr.collapse_bench_repeats(first + later)
        self.assertEqual(sorted(b["size"] for b in got), sizes)
        self.assertEqual({b["size"]: b["bench_args"] for b in got},
                         {s: "-n 5" if s == sizes[0] else "-n 20" for s in sizes})
        self.assertFalse(any("repeat_busbw_GBps" in b for b in got))
        import report
        with tempfile.TemporaryDirectory(prefix="starring_report_rep_") as tmp:
            with open(os.path.join(tmp, "bench.jsonl"), "w", encoding="utf-8") as f:
                f.write("".join(json.dumps(b) + "\n" for b in first + later))
            problems = report.load(tmp)[3]
        self.assertIn(f"bench.jsonl: {len(later)} rows of x-bench-a-np2 with args '-n 5' left "
                      "out: a later pass of it, of other args, measured those sizes", problems)

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



class ReportSource(unittest.TestCase):
    def test_each_report_module_is_at_most_500_lines(self):
        # report.py had grown to 501 lines; the table's notes went to report_notes.py, which
        # report.py imports under the names the tests use (report.load_note, ...)
        import glob
        scripts = os.path.dirname(REPORT)
        for path in sorted(glob.glob(os.path.join(scripts, "report*.py"))):
            with open(path, encoding="utf-8") as f:
                self.assertLessEqual(sum(1 for _ in f), 500, os.path.basename(path))


if __name__ == "__main__":
    unittest.main(verbosity=2)
