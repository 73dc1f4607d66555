#!/usr/bin/env python3
"""Tests of the cost model's CLI (scripts/cost_model.py, cost_model_cli.py): the figures it
prints against the library computing them, and the CLI and the report section
(scripts/report_model.py) on the committed fixture (tests/experiments/fixtures/results). The
formulas and the fit: test_cost_model.py. No `starring` binary needed.
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest
from unittest import mock

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
FIXTURE = os.path.join(HERE, "fixtures", "results")
SCRIPTS = os.path.join(REPO, "scripts")
sys.path.insert(0, SCRIPTS)
import cost_model as cm  # noqa: E402
import cost_model_runs as cmr  # noqa: E402
from cost_model_rows import MIB, bench_rows, quick_rows  # noqa: E402


class CliFigures(unittest.TestCase):
    """The numbers cost_model.py prints, against the library computing them: the options' units
    (--gamma-gbps GB/s, --ps-chunk-mb MiB), the model's size, the bounds count, the tables'
    columns and the crossover sentence. A folder of exact-model bench rows and three runs, one of
    them 3x slower than predicted."""

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="starring_cost_model_cli_")
        truth = cm.Consts(alpha=23e-6, beta=1 / 3.1e9, gamma=1.5 / 6e9)
        bench = (bench_rows("ring", 2, 0, truth, 6.0, cores=4)
                 + bench_rows("ps", 2, 1, truth, 6.0, cores=4))
        widths = cm.PRESETS["default"]
        model = {"widths": widths, "params": 235146, "bytes": 4 * 235146}
        comm = cm.comm_time("ring", 4 * 235146, 2, 0, truth)

        def run(run_id, w, total, **kw):
            return dict({"run_id": run_id, "status": "ok", "workers": w, "np": w,
                         "backend": "ring", "model": model, "batch": 64, "bucket_mb": 25.0,
                         "step_time": {"compute_s": 0.002, "total_s": total,
                                       "comm_s": comm}}, **kw)
        cls.runs = [run("one", 1, 0.002), run("fits", 2, 0.002 + comm),
                    run("slow", 2, 3 * (0.002 + comm)),
                    run("slowed", 2, 0.05, straggler="1:50"),
                    run("diverged", 2, 0.01, status="failed")]  # add_run.py keeps its figures
        cls.bench = bench
        for name, rows in (("runs.jsonl", cls.runs), ("bench.jsonl", bench)):
            with open(os.path.join(cls.tmp, name), "w", encoding="utf-8") as f:
                f.writelines(json.dumps(r) + "\n" for r in rows)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def cli(self, *args):
        import contextlib
        import io
        import cost_model_cli as cli
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            self.assertEqual(cli.main([self.tmp, *args]), 0)
        return out.getvalue()

    def test_options_in_their_units_and_the_extrapolation_they_give(self):
        import cost_model_cli as cli
        out = self.cli("--gamma-gbps", "3", "--ps-chunk-mb", "1", "--workers", "2,64",
                       "--models", "wide", "--compute-ms", "wide=5")
        self.assertIn("reduction 1/gamma 3 GB/s", out)
        widths = cm.PRESETS["wide"]
        params = 784 * 4096 + 4096 + 4096 * 4096 + 4096 + 4096 * 10 + 10
        self.assertIn(f"wide MLP 784-4096-4096-10 ({params:,} params, "
                      f"{4 * params / 1e6:.3g} MB)", out)
        ref = cm.model_reference(self.bench, widths, 1 / 3e9, cm.MIB)
        ext = cm.extrapolate(widths, 5e-3, lambda k: cm.network_consts(ref, k), [2, 64], 64,
                             cm.BUCKET_MB, cm.MIB)
        self.assertIn(cli.text(*cli.extrapolation_table("wide", ext, 64,
                                                        cm.series_doubts(ref))), out)

    def test_fit_sizes_auto_refits_near_the_buckets_and_all_does_not(self):
        # per-byte cost 4x higher from 16 MiB on (a cache boundary): auto fits 1/beta on the
        # sizes near the wide MLP's 64 MiB bucket, all on every size
        import cost_model_cli as cli
        small, large = cm.Consts(20e-6, 1 / 20e9, 0.0), cm.Consts(20e-6, 1 / 5e9, 0.0)
        rows = bench_rows("ring", 2, 0, small, 0) + bench_rows("ps", 2, 1, small, 0)
        for r in rows:
            if r["size"] >= 16 * MIB:
                kind = "ps" if r["backend"] == "ps" else "ring"
                r["time_us"] = 1e6 * cm.comm_time(kind, r["size"], 2, r["servers"] or 0, large)
        tmp = tempfile.mkdtemp(prefix="starring_cost_model_cli_")
        try:
            with open(os.path.join(tmp, "bench.jsonl"), "w", encoding="utf-8") as f:
                f.writelines(json.dumps(r) + "\n" for r in rows)
            widths = cm.PRESETS["wide"]
            for opt, windowed in (("auto", True), ("all", False)):
                import contextlib
                import io
                out = io.StringIO()
                with contextlib.redirect_stdout(out):
                    cli.main([tmp, "--fit-sizes", opt, "--models", "wide", "--workers", "2,8",
                              "--compute-ms", "wide=5", "--gamma-gbps", "1000"])
                ref = cm.model_reference(rows, widths, 1e-12, windowed=windowed)
                ext = cm.extrapolate(widths, 5e-3, lambda k: cm.network_consts(ref, k), [2, 8])
                self.assertIn(cli.text(*cli.extrapolation_table("wide", ext, 64,
                                                                cm.series_doubts(ref))),
                              out.getvalue(), opt)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    def test_hidden_widths_make_an_mlp_of_784_inputs_and_10_outputs(self):
        out = self.cli("--models", "512-256", "--workers", "2", "--compute-ms", "512-256=1")
        params = 784 * 512 + 512 + 512 * 256 + 256 + 256 * 10 + 10
        self.assertIn(f"512-256 MLP 784-512-256-10 ({params:,} params", out)

    def test_the_bounds_line_counts_the_runs_within(self):
        out = self.cli("--workers", "2")
        self.assertIn("ranks <= cores, W > 1: 1/2 within [overlap, no overlap] +-10%", out)

    def test_tables_columns(self):
        import cost_model_cli as cli
        f = cm.Fit("ring", 2, 0, cm.Consts(1e-5, 1 / 3e9, 1 / 2e9), 0.1, [1024, 4096], False,
                   2, [0.0, 0.1])
        row = dict(zip(*(lambda h, r: (h, r[0]))(*cli.fits_table([f], {}))))
        self.assertEqual((row["1/beta (GB/s)"], row["1/gamma (GB/s)"]), ("3", "2"))
        p = {"run_id": "r", "label": "ring", "workers": 2, "np": 2, "consts": None,
             "measured": 0.004, "lower": 0.002, "upper": 0.003, "comm": 0.001,
             "measured_comm": 0.0025, "err": -0.25, "own_compute_err": -0.2, "within": False,
             "notes": []}
        head, rows = cli.check_table([p])
        self.assertEqual(dict(zip(head, rows[0]))["comm ms pred. / meas."], "1.000 / 2.500")
        # a fit with beta clamped at 0 predicts with alpha alone: its constants are shown as the
        # calibration table shows them, not '-' (the quickstart's ring runs read '-', as if no
        # constants were used, beside a predicted comm of 2.724 ms: 2 x 1.24 ms of alpha)
        col = "constants: alpha us, 1/beta GB/s"
        _, rows = cli.check_table([dict(p, consts=cm.Consts(1.24e-3, 0.0, 1 / 1.91e9))])
        self.assertEqual(dict(zip(head, rows[0]))[col], "1.24e+03, inf")
        _, rows = cli.check_table([p])  # no constants (a 1-worker run): none shown
        self.assertEqual(dict(zip(head, rows[0]))[col], "-")
        # series within 0.5% of the fastest share the name
        ext = {"a": [(2, 1.000, 0, 0, 0)], "b": [(2, 1.004, 0, 0, 0)], "c": [(2, 1.2, 0, 0, 0)]}
        self.assertEqual(cli._fastest(ext, 0), "a = b")

    def test_crossover_sentence_is_against_one_server(self):
        import cost_model_cli as cli
        c = cm.Consts(alpha=1e-5, beta=1e-9, gamma=0.0)
        widths, workers = cm.PRESETS["wide"], [2, 4, 8, 16]
        sizes = cm.buckets(widths)
        beats = [w for w in workers if cm.step_comm("ring", sizes, w, 0, c)
                 < cm.step_comm("ps", sizes, w, 1, c)]
        self.assertTrue(beats)
        self.assertEqual(cli.crossover_lines(widths, lambda k: c, workers)[0],
                         "ring communicates faster than PS with 1 server at W = "
                         + ", ".join(map(str, beats)))

    def test_the_check_plot_and_caption(self):
        import report_model as rm
        figs = []
        with mock.patch.object(rm, "_save", lambda fig, d, name: figs.append(fig) or name):
            fig = rm.predicted_vs_measured(self.runs, self.bench, None)
        self.assertIn("Of the 2 runs with W > 1 that fit on the cores, 1 lies within", fig.caption)
        self.assertIn("1 runs with an injected straggler", fig.caption)
        self.assertNotIn("Not predicted", fig.caption)  # the failed run is no measurement
        # circles at the no-overlap prediction of each run drawn, the straggler's left off
        circles = sorted((round(l.get_xdata()[0], 6), round(l.get_ydata()[0], 6))
                         for l in figs[0].axes[0].get_lines()
                         if l.get_marker() == "o" and len(l.get_xdata()) == 1)
        preds = {p["run_id"]: p for p in cmr.check_runs(self.runs, self.bench,
                                                        cmr.compute_times(self.runs, self.bench))}
        self.assertEqual(circles, sorted((round(1e3 * p["measured"], 6), round(1e3 * p["upper"], 6))
                                         for k, p in preds.items() if k != "slowed"))
        # the 1-worker run took its compute time alone: its scatter is the compute's noise
        self.assertIn("1-worker runs set T_compute, so their scatter is the run-to-run noise",
                      fig.caption)

    def test_a_one_worker_step_beyond_its_compute_is_not_called_noise(self):
        # The quickstart's ps-colocated W=1 run: compute 2.37 ms, step 4.50 ms (2.09 ms waiting
        # on its own shard's push, update and pull) against 2.10 predicted; the caption said
        # the 1-worker runs' scatter was the compute time's run-to-run noise.
        import report_model as rm
        one = dict(self.runs[0], run_id="coloc-one", backend="ps", servers="colocated",
                   variant="ps-colocated",
                   step_time={"compute_s": 0.00237, "total_s": 0.0045, "comm_s": 0.0015})
        with mock.patch.object(rm, "_save", lambda fig, d, name: name):
            fig = rm.predicted_vs_measured(self.runs + [one], self.bench, None)
        self.assertNotIn("scatter is the run-to-run noise", fig.caption)
        self.assertIn("but ps-colocated W=1 (4.5 ms against 2.19 predicted) spent over a quarter "
                      "more than that prediction: not compute noise", fig.caption)


    def test_the_scaling_plot_draws_milliseconds(self):
        import report_model as rm
        figs = []
        with mock.patch.object(rm, "_save", lambda fig, d, name: figs.append(fig) or name):
            rm.extrapolation(self.runs, self.bench, None)
        ax = figs[0].axes[0]  # top row (calibrated constants), default model
        self.assertEqual(ax.get_ylabel(), "step time (ms, log scale)")
        widths = cm.PRESETS["default"]
        ref = cm.model_reference(self.bench, widths)
        ext = cm.extrapolate(widths, 0.002, lambda k: cm.network_consts(ref, k), rm.WORKERS)
        ring = [l for l in ax.get_lines() if l.get_label().startswith("ring")][0]
        for got, want in zip(ring.get_ydata(), [1e3 * p[1] for p in ext["ring"]]):
            self.assertAlmostEqual(got, want)
class OnTheFixture(unittest.TestCase):
    def run_cli(self, *args):
        return subprocess.run([sys.executable, os.path.join(SCRIPTS, "cost_model.py"), FIXTURE,
                               *args], capture_output=True, text=True, timeout=60)

    def test_cli_prints_fits_check_and_extrapolation(self):
        p = self.run_cli()
        self.assertEqual(p.returncode, 0, p.stderr)
        for text in ("# Calibration", "ring ", "# Predicted vs measured", "main-ring-w2",
                     "oversubscribed (4 ranks on 2 cores)", "# Extrapolation: default",
                     "# Extrapolation: wide", "servers PS needs to match the ring"):
            self.assertIn(text, p.stdout)

    def test_cli_with_a_given_network(self):
        p = self.run_cli("--alpha-us", "5", "--bandwidth-gbps", "100", "--workers", "64,256",
                         "--models", "default", "--compute-ms", "default=3")
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("given network", p.stdout)
        self.assertIn("T_compute 3 ms (given)", p.stdout)
        self.assertIn("1/beta 12.5 GB/s", p.stdout)
        rows = [l.split()[0] for l in p.stdout.splitlines() if l[:3] in ("64 ", "256")]
        self.assertEqual(rows, ["64", "256"])

    def test_cli_bad_values_are_one_usage_error(self):
        # each once ended in a traceback (ValueError, ZeroDivisionError) or printed nonsense
        # with exit 0 (--workers 0, a missing folder)
        for args, says in ((["--workers", "0"], "--workers"), (["--workers", "2,,4"], "--workers"),
                           (["--bandwidth-gbps", "0"], "--bandwidth-gbps"),
                           (["--ps-chunk-mb", "0"], "--ps-chunk-mb"),
                           (["--models", "x"], "'x'"), (["--compute-ms", "-1"], "MODEL=MS")):
            p = self.run_cli(*args)
            self.assertEqual(p.returncode, 2, p.stderr)
            self.assertIn(says, p.stderr)
            self.assertNotIn("Traceback", p.stderr)
        p = subprocess.run([sys.executable, os.path.join(SCRIPTS, "cost_model.py"),
                            FIXTURE + "-missing"], capture_output=True, text=True, timeout=60)
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertIn("no such folder", p.stderr)

    def test_cli_on_a_folder_without_results_or_with_a_corrupt_line(self):
        # A folder with neither runs.jsonl nor bench.jsonl (not a results folder) printed
        # "(no usable bench rows)" with exit 0, and a line that does not parse was dropped
        # without a word (report.py warns of both).
        with tempfile.TemporaryDirectory(prefix="starring_cost_model_test_") as tmp:
            cli = [sys.executable, os.path.join(SCRIPTS, "cost_model.py"), tmp]
            p = subprocess.run(cli, capture_output=True, text=True, timeout=60)
            self.assertEqual(p.returncode, 2, p.stdout + p.stderr)
            self.assertIn("neither runs.jsonl nor bench.jsonl", p.stderr)
            shutil.copy(os.path.join(FIXTURE, "bench.jsonl"), tmp)
            shutil.copy(os.path.join(FIXTURE, "runs.jsonl"), tmp)
            with open(os.path.join(tmp, "bench.jsonl"), "a", encoding="utf-8") as f:
                f.write('{"bench": "allreduce", "backe')  # a writer killed mid-line
            p = subprocess.run(cli, capture_output=True, text=True, timeout=60)
            self.assertEqual(p.returncode, 0, p.stderr)
            self.assertIn("warning: ", p.stderr)
            self.assertIn("bench.jsonl:", p.stderr)
            self.assertNotIn("Traceback", p.stderr)

    def test_report_has_the_cost_model_section(self):
        tmp = tempfile.mkdtemp(prefix="starring_cost_model_test_")
        try:
            out = os.path.join(tmp, "report")
            p = subprocess.run([sys.executable, os.path.join(SCRIPTS, "report.py"), FIXTURE,
                                "--out", out, "--quiet"], capture_output=True, text=True,
                               timeout=120)
            self.assertEqual(p.returncode, 0, p.stderr)
            with open(os.path.join(out, "report.html"), encoding="utf-8") as f:
                page = f.read()
            for png in ("cost_model_check.png", "cost_model_scaling.png"):
                with open(os.path.join(out, png), "rb") as f:
                    self.assertEqual(f.read(8), b"\x89PNG\r\n\x1a\n")
                self.assertIn(f'alt="{png}"', page)
            self.assertIn("<h2>Cost model</h2>", page)
            self.assertIn("alpha", page)
            with open(os.path.join(out, "summary.md"), encoding="utf-8") as f:
                summary = f.read()
            self.assertIn("## Cost model", summary)
            self.assertIn("| ring | 2 | - | 2 |", summary)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    def test_report_says_which_fits_it_does_not_rank(self):
        import report_model as rm
        with open(os.path.join(FIXTURE, "runs.jsonl"), encoding="utf-8") as f:
            runs = [json.loads(line) for line in f if line.strip()]
        text = "\n".join(rm.summary_lines(runs, quick_rows()))
        table = text[text.index("Extrapolated step time"):]
        self.assertIn("Marked [fit in doubt], drawn but not ranked in the 'fastest' column: "
                      "ps co-located: alpha fitted 0", table)
        self.assertIn("| fastest (trusted fits) |", table)
        rows = [l for l in table.splitlines() if l.startswith("| 256 |")]
        self.assertEqual(len(rows), 1)
        self.assertNotIn("| ps co-located |", rows[0])
        tmp = tempfile.mkdtemp(prefix="starring_cost_model_test_")
        try:
            fig = rm.extrapolation(runs, quick_rows(), tmp)
            self.assertIsInstance(fig, rm.Figure)
            self.assertIn("not ranked: ps co-located: alpha fitted 0", fig.caption)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    def test_report_skips_without_bench_rows(self):
        import report_model as rm  # matplotlib: imported here so the tests above do not need it
        runs = [{"status": "ok"}]
        self.assertIsInstance(rm.predicted_vs_measured(runs, [], "/nonexistent"), rm.Skipped)
        self.assertIsInstance(rm.extrapolation(runs, [], "/nonexistent"), rm.Skipped)
        self.assertEqual(rm.summary_lines(runs, []), [])
        self.assertEqual(rm.html_section(runs, []), "")


if __name__ == "__main__":
    unittest.main(verbosity=2)
