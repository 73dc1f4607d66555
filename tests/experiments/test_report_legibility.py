#!/usr/bin/env python3
"""What a reader of the report's plots sees, checked on figures drawn at the report's DPI from
the committed fixture (tests/experiments/fixtures/results) or records made from it: no legend
over the data, log axes labelled down to their lowest lines, time-shared runs marked as in every
wall-clock plot, captions that agree with the data and the summary table. Each case names the
run (2026-12-01's quickstart or bucket sweep) whose plot showed the fault. No `starring` binary
needed; the plots' series and lines: test_report_plots.py.
"""
import copy
import os
import sys
import unittest
from unittest import mock

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import test_report_plots as trp  # noqa: E402 (AxesStateTheirUnits.UNITS: the fixture's plots)
from plot_capture import figures_of  # noqa: E402
from test_report_plots import FIXTURE, sr  # noqa: E402


class NoLegendOverTheData(unittest.TestCase):
    def test_no_legend_covers_a_point_a_bar_or_a_label(self):
        # a legend placed 'best' still lands on data when no spot is free (staleness.png over a
        # 48 % bar, bucket.png over a 213 ms point, both on 2026-12-01's runs): every legend of
        # every fixture plot is checked against the points and bars under it (reference lines
        # such as the theory, ideal scaling or a bound may pass under a legend)
        import matplotlib.patches
        import matplotlib.pyplot as plt
        import matplotlib.transforms
        import report
        _, figs = trp.all_figures(*report.load(FIXTURE)[:3])
        reference = ("ideal", "theory", "y = x", "bound", "crossover", "memcpy", "T_compute",
                     "timeout")
        self.assertEqual(len(figs), len(trp.AxesStateTheirUnits.UNITS))
        for name, fig in figs.items():
            fig.set_dpi(report.rp.DPI)  # as _save writes it
            fig.tight_layout()
            fig.canvas.draw()
            for ax in fig.axes:
                legend = ax.get_legend()
                if legend is None:
                    continue
                box, area = legend.get_window_extent(), ax.get_window_extent()
                covered = [l.get_label() for l in ax.get_lines() if len(l.get_xydata())
                           and not any(k in l.get_label() for k in reference)
                           and any(box.contains(x, y) and area.contains(x, y)
                                   for x, y in ax.transData.transform(l.get_xydata()))]
                for p in ax.patches:
                    if isinstance(p, matplotlib.patches.Rectangle):
                        bar = matplotlib.transforms.Bbox.intersection(p.get_window_extent(), area)
                        if (bar is not None and bar.width > 0 and bar.height > 0
                                and bar.width < area.width / 2 and bar.overlaps(box)):
                            covered.append(f"a bar at {p.get_x():g}")
                covered += [repr(t.get_text()) for t in ax.texts  # the labels over bars
                            if t.get_text() and t.get_window_extent().overlaps(box)]
                self.assertEqual(covered, [], (name, ax.get_title()))
            plt.close(fig)


class LegendsOffTheData(unittest.TestCase):
    def test_the_ssp_legend_covers_no_bar(self):
        # the quickstart's straggler runs (2026-12-01): ps-ssp with --straggler 1:50 had 48 % of
        # its pushes at staleness 2, and the legend, placed 'best' inside the axes, hid that
        # bar's top
        import matplotlib.patches
        import report_plots as rp
        import report_studies as rs
        runs, _ = sr.read_jsonl(os.path.join(FIXTURE, "runs.jsonl"))
        ssp = [copy.deepcopy(r) for r in runs if r["status"] == "ok"
               and r.get("consistency") == "ssp" and r.get("staleness_hist")]
        hists = [{"0": 66, "1": 37, "2": 17}, {"0": 61, "1": 1, "2": 58},
                 {"0": 74, "1": 30, "2": 16}]
        runs = []
        for hist, straggler in zip(hists, ("", "1:50", "any:50")):
            r = copy.deepcopy(ssp[0])
            r.update(staleness_hist=hist, straggler=straggler, workers=2)
            runs.append(r)
        fig = figures_of(rs, rs.staleness, runs)[0]
        fig.set_dpi(rp.DPI)  # as _save writes it: 'best' moves with the text's size in pixels
        fig.tight_layout()
        fig.canvas.draw()
        ax = fig.axes[0]
        legend = ax.get_legend().get_window_extent()
        bars = [p.get_window_extent() for p in ax.patches  # the bars, not the gray region
                if isinstance(p, matplotlib.patches.Rectangle) and p.get_width() < 1]
        self.assertEqual(len(bars), 9)
        self.assertEqual([b for b in bars if b.overlaps(legend)], [])


class BucketTimeShared(unittest.TestCase):
    def test_time_shared_runs_are_hollow_and_the_legend_is_off_the_axes(self):
        # scripts/sweep.sh bucket (2026-12-01): the 4-worker panel (4 ranks on 2 cores) drew
        # filled markers like the 2-worker one, only the caption saying they time-shared; with
        # a legend entry for that, 'best' put the legend over the ring's 213 ms point
        import report_studies as rs
        runs, _ = sr.read_jsonl(os.path.join(FIXTURE, "runs.jsonl"))
        runs = [r for r in runs if r["status"] == "ok" and "bucket-mb" in r.get("grid_point", {})]
        four = [dict(copy.deepcopy(r), workers=4, np=4, oversubscribed=True) for r in runs]
        with mock.patch.object(rs, "_save", lambda fig, out_dir, name: figs.append(fig) or name):
            figs = []
            caption = rs.bucket(runs + four, None).caption
        self.assertIn("Runs with 4 ranks time-share this machine's 2 cores", caption)
        self.assertIn("Hollow markers are those runs.", caption)
        two_ax, four_ax = figs[0].axes
        for ax, hollow in ((two_ax, False), (four_ax, True)):
            drawn = [l for l in ax.get_lines() if len(l.get_xdata())]
            self.assertTrue(drawn)
            self.assertEqual({l.get_markerfacecolor() == "white" for l in drawn}, {hollow})
            labels = [l.get_label() for l in ax.get_lines()]
            self.assertEqual("hollow: more ranks than 2 cores" in labels, hollow)
            self.assertEqual(all(l.endswith("(4 ranks)") for l in labels
                                 if "overlap" in l), hollow)
            self.assertLess(ax.get_legend().get_bbox_to_anchor().y1,  # below the axes
                            ax.get_window_extent().y0)


class FaultsTimeShared(unittest.TestCase):
    def test_time_shared_runs_are_starred_and_the_legend_covers_no_bar_or_label(self):
        # scripts/sweep.sh faults (2026-12-01, 4 workers: 4 and 5 ranks on 2 cores): the legend,
        # inside the axes, covered ring's 9.7 s hang bar and its 'named / exit 1' label, and
        # only the caption said the runs time-shared
        import report_faults as rf
        import report_plots as rp
        runs, _ = sr.read_jsonl(os.path.join(FIXTURE, "runs.jsonl"))
        runs = [copy.deepcopy(r) for r in runs if r.get("fault")
                and r["fault"].get("injected")]
        for r in runs:
            r.update(workers=4, np=4 + r.get("num_servers", 0), oversubscribed=True)
            r["fault"].update(outcome="detected",
                              detect_s=9.7 if r["fault"]["kind"] == "hang" else 1.2)
        with mock.patch.object(rf, "_save", lambda fig, out_dir, name: figs.append(fig) or name):
            figs = []
            caption = rf.faults(runs, None).caption
        self.assertIn("Those runs are marked * (a dedicated-PS run has W + S ranks).", caption)
        fig = figs[0]
        fig.set_dpi(rp.DPI)
        fig.tight_layout()
        fig.canvas.draw()
        ax = fig.axes[0]
        ticks = [t.get_text() for t in ax.get_xticklabels()]
        self.assertTrue(ticks)
        self.assertTrue(all(t.endswith("W=4*") for t in ticks), ticks)
        self.assertIn("W=N*: more ranks than cores (time-shared)",
                      [t.get_text() for t in ax.get_legend().get_texts()])
        legend = ax.get_legend().get_window_extent()
        under = [p.get_x() for p in ax.patches if p.get_window_extent().overlaps(legend)]
        under += [t.get_text() for t in ax.texts if t.get_window_extent().overlaps(legend)]
        self.assertEqual(under, [])


class ConvergenceOneEvaluation(unittest.TestCase):
    def test_a_fraction_axis_stops_at_one_and_a_lone_point_is_explained(self):
        # scripts/sweep.sh scaling (2026-12-01: synthetic data, one epoch): every run's one
        # evaluation read 1.0; the accuracy axis ran from 0.96 to 1.04, one dot per backend and
        # no word of why there was no curve
        import report_convergence as rc
        runs, _ = sr.read_jsonl(os.path.join(FIXTURE, "runs.jsonl"))
        runs = [copy.deepcopy(r) for r in runs if r["status"] == "ok" and r.get("history")
                and r.get("sweep") == "main"]
        self.assertTrue(runs)
        with mock.patch.object(rc, "_save", lambda fig, out_dir, name: figs.append(fig) or name):
            figs = []
            caption = rc.convergence(runs, {}, None).caption  # two epochs each
            self.assertNotIn("evaluated once", caption)
            for r in runs:
                r["history"] = [dict(r["history"][-1], test_accuracy=1.0)]
            # two epochs each, evaluated once (--eval-each-epoch off): not 'one epoch or fewer'
            caption = rc.convergence(runs, {}, None).caption
            self.assertIn("Every run here was evaluated once, at its end, so the accuracy row "
                          "has one point per run", caption)
            for r in runs:
                r["epochs"] = 1
            caption = rc.convergence(runs, {}, None).caption
        self.assertIn("Every run here was evaluated once, at its end (one epoch or fewer), so "
                      "the accuracy row has one point per run", caption)
        accuracy_row = [ax for ax in figs[-1].axes if "accuracy" in ax.get_ylabel()]
        self.assertTrue(accuracy_row)
        for ax in accuracy_row:
            lo, hi = ax.get_ylim()
            self.assertGreaterEqual(hi, 1.0)  # the points at 1.0 stay in view
            self.assertLessEqual(hi, 1.01, ax.get_title())


class LogAxesLabelled(unittest.TestCase):
    def test_every_extrapolation_panel_has_labels_down_to_its_lowest_lines(self):
        # the fixture's panels span under a decade (22-140 ms): with only 2 and 5 of the minor
        # ticks labelled the top-left one read '50' and '100', nothing under 50, and the ring's
        # and T_compute's lines at 23-27 ms lay in the unlabelled lower half of the axis
        import math
        import report
        import report_model as rm
        import report_plots as rp
        runs, bench, _, _ = report.load(FIXTURE)
        fig = figures_of(rm, lambda r, out: rm.extrapolation(r, bench, out), runs)[0]
        fig.set_dpi(rp.DPI)
        fig.tight_layout()
        fig.canvas.draw()
        self.assertEqual(len(fig.axes), 4)
        for ax in fig.axes:
            lo, hi = sorted(ax.get_ylim())
            labelled = sorted({t.get_loc() for t in ax.yaxis.get_major_ticks()
                               + ax.yaxis.get_minor_ticks()
                               if t.label1.get_text() and lo <= t.get_loc() <= hi})
            self.assertGreaterEqual(len(labelled), 4, (ax.get_title(), labelled))
            for v in labelled:  # plain numbers, not '3 x 10^1'
                self.assertRegex(ax.yaxis.get_minor_formatter()(v) or
                                 ax.yaxis.get_major_formatter()(v), r"^[0-9.]+$")
            bottom = math.log10(labelled[0] / lo) / math.log10(hi / lo)
            self.assertLess(bottom, 0.25, (ax.get_title(), labelled, lo, hi))


class StragglerRatesAgainstTheTable(unittest.TestCase):
    def test_the_caption_gives_the_pace_of_workers_that_ran_ahead(self):
        # the quickstart (2026-12-01): ps-asp --straggler 1:50 kept '103%, 90,453 of 87,498'
        # on the plot (the workers' own rates summed), 2,504 samples/s in the summary table: the
        # bar is now the table's, and the caption says what the fast workers' pace was and why
        # it bought no throughput
        import report_studies as rs
        runs, _ = sr.read_jsonl(os.path.join(FIXTURE, "runs.jsonl"))
        pair = [copy.deepcopy(r) for r in runs if r["run_id"] in ("straggler-ps-asp-none",
                                                                   "straggler-ps-asp-1:50")]
        base, slow = sorted(pair, key=lambda r: bool(r["straggler"]))
        with mock.patch.object(rs, "_save", lambda fig, out_dir, name: name):
            self.assertNotIn("ran ahead", rs.straggler(pair, None).caption)
            workers = [r for r in slow["ranks"] if r["role"] == "worker"]
            for i, rank in enumerate(workers):  # worker 0 50x slower, the others at full pace
                rank.update(steps=60, compute_s=50.0 if i == 0 else 1.0, wait_s=0.0)
            slow["samples_per_s"] = 64 * 60 * len(workers) / 50.0
            caption = rs.straggler(pair, None).caption
        fast = 64 * 60 * (len(workers) - 1) + 64 * 60 / 50.0
        self.assertIn("the job's samples per second (the summary table's", caption)
        self.assertIn("Under SSP and ASP the faster workers ran ahead of the slowest", caption)
        self.assertIn(f"{fast:,.0f} samples/s for ps-asp 1:50 (the job: "
                      f"{slow['samples_per_s']:,.0f})", caption)

    def test_a_synchronous_run_is_not_said_to_run_ahead(self):
        # a synchronous run's summed rates can differ from the job's by over 10 % too (the
        # quickstart's mpi crossover run read 1.14x), and not because any worker ran ahead
        import report_studies as rs
        runs, _ = sr.read_jsonl(os.path.join(FIXTURE, "runs.jsonl"))
        pair = [copy.deepcopy(r) for r in runs if r["run_id"] in ("straggler-ring-none",
                                                                   "straggler-ring-1:50")]
        slow = next(r for r in pair if r["straggler"])
        workers = [r for r in slow["ranks"] if r["role"] == "worker"]
        self.assertTrue(workers)
        for rank in workers:
            rank.update(steps=60, compute_s=10.0, wait_s=0.0, untimed_steps=0)
        slow["samples_per_s"] = slow["batch"] * 60 * len(workers) / 10.0 / 1.3
        with mock.patch.object(rs, "_save", lambda fig, out_dir, name: name):
            caption = rs.straggler(pair, None).caption
        self.assertNotIn("ran ahead", caption)


class OverlapSerialControl(unittest.TestCase):
    def test_a_serial_control_off_zero_is_said_with_its_size(self):
        # the bucket sweep of 2026-12-01 (other processes on 1.0-1.5 of 2 CPUs): ring's serial
        # control read 23 % at 16M under a caption that said serial must stay near 0 %
        import report_overlap as ro
        bench, _ = sr.read_jsonl(os.path.join(FIXTURE, "bench.jsonl"))
        rows = [copy.deepcopy(b) for b in ro.overlap_rows(bench)]
        self.assertTrue(any(b["compute"] == "serial" for b in rows))
        with mock.patch.object(ro, "_save", lambda fig, out_dir, name: name):
            self.assertNotIn("serial control reached", ro.overlap(rows, None).caption)
            worst = next(b for b in rows if b["compute"] == "serial"
                         and b["backend"] == "ring" and b["size"] == 16 * 2**20)
            worst["overlap_pct"] = 23.0
            for b in rows:
                b["host_other_cpus"] = 1.33
            caption = ro.overlap(rows, None).caption
        self.assertIn("Here the serial control reached 23 % (ring W=2, 16M): the measure "
                      "misread by that much in this pass, so differences of that size between "
                      "backends or sizes are noise (other processes kept up to 1.3 of the host's "
                      "2 CPUs busy during it).", caption)

    def test_time_shared_jobs_are_hollow(self):
        # the overlap plot said in its caption only that some jobs time-shared the cores; the
        # busbw and bucket plots mark those points hollow
        import report_overlap as ro
        bench, _ = sr.read_jsonl(os.path.join(FIXTURE, "bench.jsonl"))
        rows = [copy.deepcopy(b) for b in ro.overlap_rows(bench)]
        four = [dict(copy.deepcopy(b), np=4, workers=4, cores=2, oversubscribed=True)
                for b in rows]
        figs = []
        with mock.patch.object(ro, "_save", lambda fig, out_dir, name: figs.append(fig) or name):
            self.assertNotIn("Hollow markers", ro.overlap(rows, None).caption)
            caption = ro.overlap(rows + four, None).caption
        self.assertIn("Runs with 4 ranks time-share this machine's 2 cores", caption)
        self.assertIn("Hollow markers are those jobs.", caption)
        for ax in figs[1].axes:
            drawn = [l for l in ax.get_lines() if len(l.get_xdata())]
            hollow = {l.get_label(): l.get_markerfacecolor() == "white" for l in drawn}
            self.assertTrue(hollow)
            self.assertEqual(hollow, {k: "W=4" in k for k in hollow})
            self.assertIn("hollow: more ranks than cores", [l.get_label() for l in ax.get_lines()])
        for ax in figs[0].axes:
            self.assertNotIn("hollow: more ranks than cores",
                             [l.get_label() for l in ax.get_lines()])
        # a panel with no time-shared job has no hollow legend entry
        figs.clear()
        busy = [b for b in four if b["compute"] == "busy"]
        with mock.patch.object(ro, "_save", lambda fig, out_dir, name: figs.append(fig) or name):
            ro.overlap(rows + busy, None)
        for ax in figs[0].axes:
            self.assertEqual("hollow: more ranks than cores" in
                             [l.get_label() for l in ax.get_lines()], "busy" in ax.get_title())


if __name__ == "__main__":
    unittest.main(verbosity=2)
