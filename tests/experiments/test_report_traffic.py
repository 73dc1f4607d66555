#!/usr/bin/env python3
"""Tests of the traffic plots (scripts/report_traffic.py) drawn from records made here or taken
from the committed fixture (tests/experiments/fixtures/results): the bus bandwidth plot's size
ticks, its series (a busy host's pass faded, --compress rows apart, W of np ranks) and captions,
and the bytes-per-rank plot's theory lines and the points on them. No `starring` binary needed;
the other plots: test_report_plots.py.
"""
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
from plot_capture import figures_of, line_points  # noqa: E402


class BusbwSizesAndLoad(unittest.TestCase):
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

    def test_a_bench_pass_on_a_busy_host_is_faded_and_said(self):
        # the quickstart's np 2 pass beside other processes on 1.46 of 2 CPUs (a 64 KiB ring
        # all-reduce 50 times slower than at np 4) was a solid line like any other
        import report_traffic as rt
        sizes = [2 ** k for k in range(16, 25, 2)]

        def rows(np_, other):
            return [{"bench": "allreduce", "backend": "ring", "np": np_, "workers": np_,
                     "size": s, "cores": 2, "oversubscribed": np_ > 2, "host_other_cpus": other,
                     "busbw_GBps": 1.0 + k} for k, s in enumerate(sizes)]
        figs = []
        with mock.patch.object(rt, "_save", lambda fig, out_dir, name: figs.append(fig) or name):
            fig = rt.busbw(rows(2, 1.46) + rows(1, 0.1), None)
        lines = {l.get_label(): l for l in figs[0].axes[0].get_lines()}
        self.assertEqual(lines["ring W=2 [busy]"].get_alpha(), rt.BUSY_ALPHA)
        self.assertIn(lines["ring W=1"].get_alpha(), (None, 1.0))
        self.assertIn("faded, [busy]: host busy (caption)", lines)
        self.assertIn("Faded lines, marked [busy] in the legend, are bench passes (np 2) during "
                      "which other processes kept 1.5 of the host's 2 CPUs busy", fig.caption)
        figs.clear()
        with mock.patch.object(rt, "_save", lambda fig, out_dir, name: figs.append(fig) or name):
            fig = rt.busbw(rows(2, 0.2), None)  # the background of a quiet host
        self.assertNotIn("Faded", fig.caption)
        self.assertEqual([l.get_label() for l in figs[0].axes[0].get_lines()
                          if "busy" in l.get_label()], [])


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

    def test_the_caption_says_their_busbw_counts_the_float32_data(self):
        # size, algbw and busbw of a --compress row count the float32 data, the wire half of it:
        # the fp16 line stood at twice the rate of its bytes with no word in the caption
        import report_traffic as rt
        rows = [{"bench": "allreduce", "backend": "ring", "np": 2, "workers": 2, "size": size,
                 "busbw_GBps": 2.0, "compress": c} for size in (1 << 20, 1 << 22)
                for c in ("fp16", None)]
        with mock.patch.object(rt, "_save", lambda fig, out_dir, name: name):
            fig = rt.busbw(rows, None)
        self.assertIn("Series marked fp16 (triangles, `bench --compress`)", fig.caption)
        self.assertIn("twice the rate of the bytes sent", fig.caption)
        with mock.patch.object(rt, "_save", lambda fig, out_dir, name: name):
            plain = rt.busbw([r for r in rows if not r["compress"]], None)
        self.assertNotIn("--compress", plain.caption)

    def test_the_caption_gives_each_push_pull_bus_factor(self):
        # "the rate through the busiest link (the servers')": co-located rows (every rank's
        # link, 2(W-1)/W as the ring's) and W < S (the worker's link) are not the servers'
        import report_traffic as rt
        rows = [{"bench": "pushpull", "backend": "ps", "np": 3, "workers": 2, "servers": 1,
                 "size": 1 << 20, "busbw_GBps": 2.0}]
        with mock.patch.object(rt, "_save", lambda fig, out_dir, name: name):
            fig = rt.busbw(rows, None)
        self.assertIn("algbw x W/S", fig.caption)
        self.assertIn("co-located every rank's, algbw x 2(W-1)/W", fig.caption)


class BusbwLegend(unittest.TestCase):
    ROW = {"bench": "allreduce", "backend": "ring", "np": 2, "workers": 2, "size": 1024,
           "count": 256, "type": "float", "time_us": 10.0, "algbw_GBps": 0.1,
           "busbw_GBps": 10.0, "wrong": 0, "cores": 2}

    def test_memcpy_is_of_the_jobs_that_did_not_time_share(self):
        # a job with more ranks than cores measures its memcpy time-shared (11 GB/s beside 34)
        import report_traffic as rt
        rows = [dict(self.ROW, memcpy_GBps=34.0, oversubscribed=False),
                dict(self.ROW, np=3, workers=3, memcpy_GBps=11.0, oversubscribed=True)]
        ax = figures_of(rt, rt.busbw, rows)[0].axes[0]
        self.assertEqual([l for l in ax.get_legend_handles_labels()[1] if "memcpy" in l],
                         ["memcpy 34.0 GB/s"])

    def test_an_op_on_w_of_n_ranks_is_labelled_with_w(self):
        import report_traffic as rt
        self.assertEqual(rt._bench_label(dict(self.ROW, backend="ring@2", np=3)),
                         "ring W=2 (of np=3)")


class BytesPerRank(unittest.TestCase):
    """The bytes theory in units of D (ring and co-located 2(N-1)/N, a dedicated-PS worker 1, a
    server W/S) and the points drawn on it: sent bytes dots, received bytes crosses."""

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
        ring = line_points(workers, "theory ring / co-located")
        for n, expect in ((1, 0.0), (2, 1.0), (4, 1.5)):
            self.assertAlmostEqual(ring[n], expect, msg=n)
        self.assertEqual(set(line_points(workers, "theory dedicated PS worker").values()), {1.0})
        for s in (1, 2):
            per_server = line_points(servers, f"theory server, S={s}")
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
        # dedicated-PS runs alone: no ring theory line (it was drawn with no ring run beside it)
        ps = [r for r in ok if sr.is_dedicated_ps(r)]
        ax = figures_of(rt, rt.bytes_per_rank, ps)[0].axes[0]
        labels = [l.get_label() for l in ax.get_lines()]
        self.assertIn("theory dedicated PS worker: 1", labels)
        self.assertFalse([l for l in labels if l.startswith("theory ring")], labels)

    @staticmethod
    def bytes_marks(run_id, axis, **per_model):
        """(marker, bytes per model) of the dots and crosses that the bytes-per-rank figure's
        `axis` draws for fixture run `run_id`, its bytes_per_step set to `per_model` x D."""
        import report_traffic as rt
        runs, _ = sr.read_jsonl(os.path.join(FIXTURE, "runs.jsonl"))
        run = copy.deepcopy(next(r for r in runs if r["run_id"] == run_id))
        d = run["model"]["bytes"]
        run["bytes_per_step"].update({k: v * d for k, v in per_model.items()})
        ax = figures_of(rt, rt.bytes_per_rank, [run])[0].axes[axis]
        return sorted((l.get_marker(), round(float(l.get_ydata()[0]), 6))
                      for l in ax.get_lines() if l.get_marker() in ("o", "x"))

    def test_the_opaque_backends_points_are_labelled_as_the_theory(self):
        # the quickstart's crossover mpi run sat on the 2(N-1)/N line in the legend as 'mpi',
        # a match that was the theory itself (only the caption said so)
        import report_traffic as rt
        runs, _ = sr.read_jsonl(os.path.join(FIXTURE, "runs.jsonl"))
        ring = copy.deepcopy(next(r for r in runs if r["run_id"] == "main-ring-w2"))
        mpi = dict(copy.deepcopy(ring), run_id="main-mpi-w2", variant="mpi", backend="mpi")
        ax = figures_of(rt, rt.bytes_per_rank, [ring, mpi])[0].axes[0]
        labels = ax.get_legend().get_texts()
        self.assertIn("mpi (the theory, not measured)", [t.get_text() for t in labels])
        self.assertIn("ring", [t.get_text() for t in labels])

    def test_the_workers_received_bytes_are_the_crosses(self):
        self.assertEqual(self.bytes_marks("main-ring-w2", 0, worker_sent=1.0, worker_recv=0.75),
                         [("o", 1.0), ("x", 0.75)])

    def test_the_servers_sent_bytes_are_the_crosses(self):
        self.assertEqual(self.bytes_marks("main-ps-1-w2", 1, server_recv=2.0, server_sent=1.5),
                         [("o", 2.0), ("x", 1.5)])


if __name__ == "__main__":
    unittest.main(verbosity=2)
