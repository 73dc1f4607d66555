#!/usr/bin/env python3
"""Tests of the report's plots and captions drawn from records made here or taken from the
committed fixture (tests/experiments/fixtures/results): the axes' ticks, labels and units,
labels over bars, series of their own, the crossover's verdict, the theory and ideal lines and
the points on them. No `starring` binary needed; the report on the whole fixture: test_report.py.
"""
import contextlib
import copy
import os
import re
import sys
import unittest
from unittest import mock

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
FIXTURE = os.path.join(HERE, "fixtures", "results")
sys.path.insert(0, os.path.join(REPO, "scripts"))
import starring_results as sr  # noqa: E402


def figures_of(module, draw, runs):
    """The figures draw(runs, None) makes, caught at module._save instead of written."""
    figs = []
    with mock.patch.object(module, "_save", lambda fig, out_dir, name: figs.append(fig) or name):
        draw(runs, None)
    return figs


class CrossoverVerdict(unittest.TestCase):
    def test_each_backend_named_once_with_the_batch_when_batches_differ(self):
        # experiments/sweeps/crossover.ini runs batch 16 and 128 at every width: the caption
        # listed a backend once per batch ('mpi, mpi, ring, ring communicate longer') and named
        # the fastest run without its batch (a batch-128 run beside batch-16 ones).
        import report_studies as rs  # matplotlib, as the report needs

        def run(variant, batch, params, rate, comm, compute):
            return {"variant": variant, "workers": 4, "batch": batch, "model": {"params": params},
                    "samples_per_s": rate, "step_time": {"comm_s": comm, "compute_s": compute}}

        runs = [run(v, b, p, rate * (8 if b == 128 else 1), comm, 1.0)
                for v, rate in (("ring", 1000.0), ("mpi", 900.0))
                for b in (16, 128) for p, comm in ((26506, 2.0), (5824522, 0.5))]
        text = rs._crossover_verdict(runs)
        self.assertIn("at 0.027M parameters ring batch 128 is fastest (8,000 samples/s) and "
                      "mpi batch 16, mpi batch 128, ring batch 16, ring batch 128 communicate "
                      "longer than they compute", text)
        self.assertIn("every backend computes longer than it communicates", text)
        # One batch: the names alone, each once.
        one = rs._crossover_verdict([r for r in runs if r["batch"] == 16] * 2)
        self.assertIn("ring is fastest (1,000 samples/s) and mpi, ring communicate", one)


class BreakdownOther(unittest.TestCase):
    def test_the_caption_says_what_the_grey_segment_is_when_one_is_drawn(self):
        # a co-located PS run's step read 2.43 ms = compute 0.65 + wait 1.30: the plot drew the
        # 0.48 ms left over as a grey 'other' segment that neither caption nor legend explained
        import report_plots as rp
        runs, _ = sr.read_jsonl(os.path.join(FIXTURE, "runs.jsonl"))
        runs = [copy.deepcopy(r) for r in runs if r["status"] == "ok" and r.get("step_time")]
        for r in runs:  # total = compute + wait exactly: no grey segment
            st = r["step_time"]
            st["total_s"] = st["compute_s"] + st["wait_s"]
        with mock.patch.object(rp, "_save", lambda fig, out_dir, name: name):
            self.assertNotIn("Grey (other)", rp.breakdown(runs, None).caption)
            for r in runs:
                r["step_time"]["total_s"] *= 1.25
            self.assertIn("Grey (other): the rest of the training thread's step",
                          rp.breakdown(runs, None).caption)


class StragglerLabels(unittest.TestCase):
    def test_an_accuracy_fall_is_labelled_above_both_bars(self):
        # '-0.6 pt' sat on the colored bar, lower than the gray one beside it, and ran into it
        import report_studies as rs
        runs, _ = sr.read_jsonl(os.path.join(FIXTURE, "runs.jsonl"))
        study = [copy.deepcopy(r) for r in runs
                 if r.get("sweep") == "straggler" and r["status"] == "ok"]
        slow = [r for r in study if r.get("straggler")]
        self.assertTrue(slow)
        for r in slow:
            r["test_accuracy"] -= 0.05  # every straggler run falls 5 points
        figs = figures_of(rs, rs.straggler, study)
        ax = figs[0].axes[1]
        tops = {}
        for bar in ax.patches:
            pair = round(bar.get_x() + bar.get_width() / 2)
            tops[pair] = max(tops.get(pair, 0.0), bar.get_height())
        labels = [a for a in ax.texts if a.get_text().endswith(" pt")]
        self.assertEqual(len(labels), len(slow))
        for a in labels:
            x, y = a.xy
            self.assertTrue(a.get_text().startswith("-"), a.get_text())  # a fall
            self.assertAlmostEqual(x, round(x))  # over the pair, not over one bar
            self.assertGreaterEqual(y, tops[round(x)])


class SizeAxis(unittest.TestCase):
    def test_busbw_is_ticked_at_the_sizes_measured(self):
        # a -f 4 bench (64K..16M) was labelled 128K, 512K, 2M, 8M: between its points
        import report_traffic as rt
        sizes = [2 ** k for k in range(16, 25, 2)]
        rows = [{"bench": "allreduce", "backend": "ring", "np": 2, "workers": 2, "size": s,
                 "busbw_GBps": 1.0 + k} for k, s in enumerate(sizes)]
        figs = figures_of(rt, rt.busbw, rows)
        ax = figs[0].axes[0]
        self.assertEqual(list(ax.get_xticks()), sizes)
        self.assertEqual([rt._size_label(s) for s in sizes], ["64K", "256K", "1M", "4M", "16M"])
        many = [2 ** k for k in range(10, 31)]  # 21 sizes: every 3rd, from the first
        rt.size_axis(ax, many)
        self.assertEqual(list(ax.get_xticks()), many[::3])

    def test_bucket_plot_is_ticked_at_the_bucket_sizes_run(self):
        # the quick bucket sweep (1, 16, 512 MiB) was labelled 2, 8, 32, 128, 512
        import report_studies as rs
        runs, _ = sr.read_jsonl(os.path.join(FIXTURE, "runs.jsonl"))
        study = [r for r in runs if r.get("sweep") == "bucket" and r["status"] == "ok"]
        sizes = sorted({r["bucket_mb"] for r in study})
        self.assertGreaterEqual(len(sizes), 3)
        figs = figures_of(rs, rs.bucket, study)
        self.assertEqual(list(figs[0].axes[0].get_xticks()), sizes)


class CompressedBenchRows(unittest.TestCase):
    def test_are_a_series_of_their_own_and_not_calibration(self):
        # `bench --compress fp16` rows: half the wire bytes under the same backend name; they
        # were drawn as one series with the float32 rows and fitted into the ring's cost model
        import report_traffic as rt
        import cost_model as cm
        rows = [{"bench": "allreduce", "backend": "ring", "np": 2, "workers": 2, "servers": 0,
                 "size": size, "time_us": size / 1e3, "wrong": 0, "memcpy_GBps": 20.0,
                 "compress": "fp16"} for size in (1 << 20, 1 << 22)]
        self.assertEqual(rt._bench_label(rows[0]), "ring fp16 W=2")
        self.assertEqual(rt._bench_label(dict(rows[0], compress=None)), "ring W=2")
        self.assertEqual(cm.calibrate(rows), [])
        self.assertEqual(len(cm.calibrate([dict(r, compress=None) for r in rows])), 1)
        self.assertEqual(len(sr.collapse_bench_repeats(rows + [dict(rows[0], compress=None)])),
                         3)


class TheLinesThePlotsAreReadAgainst(unittest.TestCase):
    """The lines a reader compares the measurements with: the bytes theory in units of D (ring
    and co-located 2(N-1)/N, a dedicated-PS worker 1, a server W/S), the ideal linear scaling
    of the throughput plot and the 100% of the efficiency plot, and the points drawn on them."""

    @staticmethod
    def line(ax, label_start):
        lines = [l for l in ax.get_lines() if l.get_label().startswith(label_start)]
        assert len(lines) == 1, [l.get_label() for l in ax.get_lines()]
        return dict(zip((round(x, 6) for x in lines[0].get_xdata()), lines[0].get_ydata()))

    def test_bytes_theory_lines_and_the_servers_points(self):
        import report_traffic as rt
        runs, _ = sr.read_jsonl(os.path.join(FIXTURE, "runs.jsonl"))
        ok = [r for r in runs if r["status"] == "ok" and sr.table_ready(r)]
        # the fixture's dedicated servers are all S = 1: one run with two (W x D/2 each)
        half = copy.deepcopy(next(r for r in ok if r["run_id"] == "main-ps-1-w4"))
        d = half["model"]["bytes"]
        half.update(run_id="main-ps-half-w4", variant="ps-half", num_servers=2, servers="2")
        half["bytes_per_step"].update(server_recv=2 * d, server_sent=2 * d)
        fig = figures_of(rt, rt.bytes_per_rank, ok + [half])[0]
        workers, servers = fig.axes[0], fig.axes[1]
        ring = self.line(workers, "theory ring / co-located")
        for n, expect in ((1, 0.0), (2, 1.0), (4, 1.5)):
            self.assertAlmostEqual(ring[n], expect, msg=n)
        self.assertEqual(set(self.line(workers, "theory dedicated PS worker").values()), {1.0})
        for s in (1, 2):
            per_server = self.line(servers, f"theory server, S={s}")
            for n in (1, 2, 4):
                self.assertAlmostEqual(per_server[n], n / s, msg=(s, n))
        # the servers move the theory, W x D/S: each received-bytes point (o) of the server
        # panel sits at W/S, whatever the other ranks moved
        dots = [(x, y, int(re.search(r"\(S=(\d+)\)", l.get_label()).group(1)))
                for l in servers.get_lines() if l.get_marker() == "o"
                for x, y in zip(l.get_xdata(), l.get_ydata())]
        self.assertGreaterEqual(len(dots), 5)
        self.assertIn((4, 2), {(round(x), s) for x, _, s in dots})
        for x, y, s in dots:
            self.assertAlmostEqual(y, round(x) / s, msg=(x, y, s))

    @staticmethod
    def scaling_runs():
        def run(variant, w, rate):
            return {"variant": variant, "workers": w, "samples_per_s": rate, "sweep": "s",
                    "model": {"params": 1000, "widths": [1]}, "config": {"preset": "default"},
                    "grid_point": {}}
        return [run("ring", 1, 100.0), run("ring", 2, 180.0), run("ring", 4, 300.0),
                run("ps-1", 1, 80.0), run("ps-1", 2, 150.0), run("ps-1", 4, 200.0)]

    def test_throughput_draws_ideal_linear_scaling_of_the_fastest_smallest_run(self):
        import report_plots as rp
        ax = figures_of(rp, rp.throughput, self.scaling_runs())[0].axes[0]
        self.assertEqual(self.line(ax, "ideal linear from ring W=1"),
                         {1: 100.0, 2: 200.0, 4: 400.0})
        self.assertEqual(self.line(ax, "ps-1"), {1: 80.0, 2: 150.0, 4: 200.0})

    def test_efficiency_is_throughput_over_w_times_the_yardstick(self):
        import report_plots as rp
        ax = figures_of(rp, rp.efficiency, self.scaling_runs())[0].axes[0]
        self.assertEqual(self.line(ax, "ring"), {1: 100.0, 2: 90.0, 4: 75.0})
        self.assertEqual(self.line(ax, "ps-1"), {1: 80.0, 2: 75.0, 4: 50.0})
        self.assertEqual(set(self.line(ax, "ideal: W x ring W=1").values()), {100.0})

    def test_breakdown_bars_are_compute_wait_on_it_and_communication_beside(self):
        import report_plots as rp
        runs, _ = sr.read_jsonl(os.path.join(FIXTURE, "runs.jsonl"))
        main = [r for r in runs if r.get("sweep") == "main" and r["status"] == "ok"
                and r["model"]["params"] < 1e6]
        ax = figures_of(rp, rp.breakdown, main)[0].axes[0]
        order = {}
        for r in main:
            order.setdefault(sr.backend_label(r), len(order))
        steps = [r["step_time"] for r in sorted(main, key=lambda r: (
            order[sr.backend_label(r)], r["workers"]))]
        wide = [p for p in ax.patches if abs(p.get_width() - 0.34) < 1e-9]
        narrow = [p for p in ax.patches if abs(p.get_width() - 0.2) < 1e-9]
        n = len(steps)
        self.assertEqual(len(narrow), n)
        for i, st in enumerate(steps):
            compute, wait = wide[i], wide[n + i]
            self.assertAlmostEqual(compute.get_height(), 1e3 * st["compute_s"])
            self.assertAlmostEqual(compute.get_y(), 0.0)
            self.assertAlmostEqual(wait.get_height(), 1e3 * st["wait_s"])
            self.assertAlmostEqual(wait.get_y(), 1e3 * st["compute_s"])
            self.assertAlmostEqual(narrow[i].get_height(), 1e3 * st["comm_s"])


class AxesStateTheirUnits(unittest.TestCase):
    # every axis of every plot the fixture draws: what its label must name (its unit, or what a
    # number on it counts); "" for an axis of categories (backend and workers under the bars)
    UNITS = {
        "throughput.png": [("workers", "samples/s")] * 2,
        "efficiency.png": [("workers", "% of linear")] * 2,
        "breakdown.png": [("", "ms")] * 2,
        "bytes_per_rank.png": [("workers", "/ D")] * 2,
        "busbw.png": [("bytes", "GB/s")] * 2,
        "overlap.png": [("bytes", "%")] * 3,
        "convergence.png": [("seconds", "moving average")] * 3 + [("seconds", "fraction")] * 3,
        "straggler.png": [("", "%")] * 2,
        "staleness.png": [("steps", "%")] * 2,
        "crossover.png": [("count", "%"), ("count", "samples/s")],
        "bucket.png": [("MiB", "ms")],
        "faults.png": [("backend, workers", "seconds")],
        "cost_model_check.png": [("ms", "ms")],
        "cost_model_scaling.png": [("workers", "ms")] * 4,
    }

    def test_every_axis_of_every_plot_names_its_unit(self):
        import matplotlib.pyplot as plt
        import report
        runs, bench, metrics, _ = report.load(FIXTURE)
        figs = {}

        def keep(fig, out_dir, name):
            figs[name] = fig
            return name

        with contextlib.ExitStack() as stack:  # every module's _save: the figures, no PNG
            for module in (report.rp, report.rt, report.rs, report.rf, report.rrec, report.ro,
                           report.rm):
                stack.enter_context(mock.patch.object(module, "_save", keep))
            made = report.make_figures(runs, bench, metrics, None)
        drawn = [f.file for f in made if isinstance(f, report.rp.Figure)]
        self.assertEqual(sorted(drawn), sorted(self.UNITS))
        self.assertEqual(sorted(figs), sorted(drawn))
        for name, fig in figs.items():
            axes = [ax for ax in fig.axes if ax.get_visible()]
            self.assertEqual(len(axes), len(self.UNITS[name]), name)
            for ax, (x, y) in zip(axes, self.UNITS[name]):
                self.assertIn(x, ax.get_xlabel(), name)
                self.assertIn(y, ax.get_ylabel(), name)
            plt.close(fig)


if __name__ == "__main__":
    unittest.main(verbosity=2)
