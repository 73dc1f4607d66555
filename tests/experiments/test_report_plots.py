#!/usr/bin/env python3
"""Tests of the report's plots and captions drawn from records made here or taken from the
committed fixture (tests/experiments/fixtures/results): the axes' ticks, labels and units,
labels over bars, series of their own, the crossover's verdict, the theory and ideal lines and
the points on them. No `starring` binary needed; the traffic plots (busbw, bytes per rank):
test_report_traffic.py; the studies' figures (scripts/report_studies.py): test_report_studies.py;
the report on the whole fixture: test_report.py.
"""
import contextlib
import copy
import os
import sys
import types
import unittest
from unittest import mock

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
FIXTURE = os.path.join(HERE, "fixtures", "results")
sys.path.insert(0, os.path.join(REPO, "scripts"))
import starring_results as sr  # noqa: E402
from plot_capture import figures_of, line_points  # noqa: E402


def all_figures(runs, bench, metrics):
    """report.make_figures' result and its figures by file name, caught at every plot module's
    _save instead of written (no PNG)."""
    import report
    figs = {}

    def keep(fig, out_dir, name):
        figs[name] = fig
        return name

    # every plot module report.py imports: each has _save from report_plots under its own name
    modules = [m for m in vars(report).values()
               if isinstance(m, types.ModuleType) and hasattr(m, "_save")]
    with contextlib.ExitStack() as stack:
        for module in modules:
            stack.enter_context(mock.patch.object(module, "_save", keep))
        made = report.make_figures(runs, bench, metrics, None)
    return made, figs

class BreakdownOther(unittest.TestCase):
    def test_the_caption_says_what_the_grey_segment_is_when_one_is_drawn(self):
        # a co-located PS run's step read 2.43 ms = compute 0.65 + wait 1.30: the plot drew the
        # 0.48 ms left over as a grey 'other' segment that neither caption nor legend explained
        import report_scaling as rsc
        runs, _ = sr.read_jsonl(os.path.join(FIXTURE, "runs.jsonl"))
        runs = [copy.deepcopy(r) for r in runs if r["status"] == "ok" and r.get("step_time")]
        for r in runs:  # total = compute + wait exactly: no grey segment
            st = r["step_time"]
            st["total_s"] = st["compute_s"] + st["wait_s"]
        with mock.patch.object(rsc, "_save", lambda fig, out_dir, name: name):
            self.assertNotIn("Grey (other)", rsc.breakdown(runs, None).caption)
            for r in runs:
                r["step_time"]["total_s"] *= 1.25
            self.assertIn("Grey (other): the rest of the training thread's step",
                          rsc.breakdown(runs, None).caption)


    def test_the_caption_says_where_the_optimizer_and_comm_are_counted(self):
        # "computing (forward, backward, optimizer where it runs on the worker)": the ring, mpi
        # and nccl apply it after each bucket's all-reduce, outside the training thread's compute
        # (0.05 ms a step, 2 ring workers) and outside comm_s; the PS's comm_s is a step's
        # push-to-last-reply window, the ring's its all-reduce calls: not the same measure
        import report_scaling as rsc
        runs, _ = sr.read_jsonl(os.path.join(FIXTURE, "runs.jsonl"))
        runs = [r for r in runs if r["status"] == "ok" and r.get("step_time")]
        with mock.patch.object(rsc, "_save", lambda fig, out_dir, name: name):
            caption = rsc.breakdown(runs, None).caption
        self.assertNotIn("optimizer where it runs on the worker", caption)
        self.assertIn("ranks[].extra.optimizer_s", caption)
        self.assertIn("from its first push to its last reply", caption)


class SizeAxis(unittest.TestCase):
    def test_bucket_plot_is_ticked_at_the_bucket_sizes_run(self):
        # the quick bucket sweep (1, 16, 512 MiB) was labelled 2, 8, 32, 128, 512
        import report_studies as rs
        runs, _ = sr.read_jsonl(os.path.join(FIXTURE, "runs.jsonl"))
        study = [r for r in runs if r.get("sweep") == "bucket" and r["status"] == "ok"]
        sizes = sorted({r["bucket_mb"] for r in study})
        self.assertGreaterEqual(len(sizes), 3)
        figs = figures_of(rs, rs.bucket, study)
        self.assertEqual(list(figs[0].axes[0].get_xticks()), sizes)


class TheLinesThePlotsAreReadAgainst(unittest.TestCase):
    """The lines a reader compares the measurements with: the ideal linear scaling of the
    throughput plot and the 100% of the efficiency plot, and the bars and series drawn beside
    them (the bytes theory: test_report_traffic.py)."""

    @staticmethod
    def scaling_runs():
        def run(variant, w, rate):
            return {"variant": variant, "workers": w, "samples_per_s": rate, "sweep": "s",
                    "model": {"params": 1000, "widths": [1]}, "config": {"preset": "default"},
                    "grid_point": {}}
        return [run("ring", 1, 100.0), run("ring", 2, 180.0), run("ring", 4, 300.0),
                run("ps-1", 1, 80.0), run("ps-1", 2, 150.0), run("ps-1", 4, 200.0)]

    def test_throughput_draws_ideal_linear_scaling_of_the_fastest_smallest_run(self):
        import report_scaling as rsc
        ax = figures_of(rsc, rsc.throughput, self.scaling_runs())[0].axes[0]
        self.assertEqual(line_points(ax, "ideal linear from ring W=1"),
                         {1: 100.0, 2: 200.0, 4: 400.0})
        self.assertEqual(line_points(ax, "ps-1"), {1: 80.0, 2: 150.0, 4: 200.0})

    def test_efficiency_is_throughput_over_w_times_the_yardstick(self):
        import report_scaling as rsc
        ax = figures_of(rsc, rsc.efficiency, self.scaling_runs())[0].axes[0]
        self.assertEqual(line_points(ax, "ring"), {1: 100.0, 2: 90.0, 4: 75.0})
        self.assertEqual(line_points(ax, "ps-1"), {1: 80.0, 2: 75.0, 4: 50.0})
        self.assertEqual(set(line_points(ax, "ideal: W x ring W=1").values()), {100.0})

    def test_two_sweeps_with_one_backend_are_two_series_each_named(self):
        # `--out` one folder for two sweeps (or one sweep over a knob no study plot takes):
        # their ring W=2 runs shared one series, the last drawn and the other dropped, while
        # the other's 1-worker run still set the yardstick ("ring 50%" for a run at 100%)
        import report_scaling as rsc
        import report_plots as rp
        runs = self.scaling_runs()
        mine = [dict(r, sweep="mine", samples_per_s=r["samples_per_s"] / 2) for r in runs]
        fig = figures_of(rsc, rsc.throughput, runs + mine)[0]
        ax = fig.axes[0]
        self.assertEqual(line_points(ax, "ring (s)"), {1: 100.0, 2: 180.0, 4: 300.0})
        self.assertEqual(line_points(ax, "ring (mine)"), {1: 50.0, 2: 90.0, 4: 150.0})
        self.assertEqual(line_points(ax, "ideal linear from ring (s) W=1")[4], 400.0)
        with mock.patch.object(rsc, "_save", lambda fig, out_dir, name: name):
            caption = rsc.throughput(runs + mine, None).caption
        self.assertIn("W=2: ring (s) 90%, ps-1 (s) 75%, ring (mine) 45%, ps-1 (mine) 38%",
                      caption)
        # ... and a knob that is not a study's: the settings that differ name the series
        accum = [dict(r, config={"preset": "default", "accum": "4"}) for r in runs]
        names = set(rp.series_labels(runs + accum).values())
        self.assertEqual(names, {"ring (accum=-)", "ring (accum=4)", "ps-1 (accum=-)",
                                 "ps-1 (accum=4)"})
        self.assertEqual(set(rp.series_labels(runs).values()), {"ring", "ps-1"})
        # the step-time breakdown's bars: two "ring W=2" told apart
        steps = {"total_s": 0.01, "compute_s": 0.008, "comm_s": 0.001, "wait_s": 0.002}
        both = [dict(r, step_time=steps) for r in runs + mine]
        ticks = [t.get_text() for t in
                 figures_of(rsc, rsc.breakdown, both)[0].axes[0].get_xticklabels()]
        self.assertEqual(len(set(ticks)), len(both), ticks)
        self.assertIn("ring (mine)\nW=2", ticks)

    def test_breakdown_bars_are_compute_wait_on_it_and_communication_beside(self):
        import report_scaling as rsc
        runs, _ = sr.read_jsonl(os.path.join(FIXTURE, "runs.jsonl"))
        main = [r for r in runs if r.get("sweep") == "main" and r["status"] == "ok"
                and r["model"]["params"] < 1e6]
        ax = figures_of(rsc, rsc.breakdown, main)[0].axes[0]
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


class RunsThatDidNotSucceed(unittest.TestCase):
    def test_the_scaling_plots_name_the_configurations_they_leave_out(self):
        # the fixture's ps-1 W=8 failed and W=16 timed out: its line ended at W=4 with no word
        # of them; with only W=1 succeeding the plot read "no backend was run at more than one
        # worker count" beside a failed W=2 run
        runs, _ = sr.read_jsonl(os.path.join(FIXTURE, "runs.jsonl"))
        main = [r for r in runs if r.get("sweep") == "main" and "wide" not in r["run_id"]]
        made = {f.title: f for f in all_figures(main, [], {})[0]}
        for title in ("Throughput vs workers", "Scaling efficiency", "Step-time breakdown"):
            self.assertIn(" Not drawn, as they did not succeed: ps-1 W=8 (failed), ps-1 W=16 "
                          "(timeout), nccl W=2 (skipped) (see Runs that did not succeed).",
                          made[title].caption, title)
        failed = dict(next(r for r in main if r["run_id"] == "main-ps-1-w8"), variant="ring",
                      workers=2, run_id="main-ring-w2")
        alone = [r for r in main if r["run_id"] == "main-ring-w1"] + [failed]
        made = {f.title: f for f in all_figures(alone, [], {})[0]}
        self.assertEqual(made["Throughput vs workers"].reason,
                         "no backend ran successfully at more than one worker count (Not drawn, "
                         "as they did not succeed: ring W=2 (failed) (see Runs that did not "
                         "succeed).)")


    def test_the_busbw_caption_names_the_bench_passes_that_failed(self):
        bench, _ = sr.read_jsonl(os.path.join(FIXTURE, "bench.jsonl"))
        made = {f.title: f for f in all_figures([], bench, {})[0]}
        self.assertIn(" Not drawn, as they did not succeed: bench pass main-bench-x-np8 (np 8): "
                      "failed (exit 1) (see Runs that did not succeed).",
                      made["Bus bandwidth vs message size"].caption)


    def test_a_configuration_that_succeeded_in_another_round_is_not_called_undrawn(self):
        # ring W=8 failed in round 1 and succeeded in round 2 (or in the sweep made again into
        # the folder): the captions said "Not drawn, as they did not succeed: ring W=8", beside
        # its drawn point; so did the busbw caption for a pass that failed in round 1 only
        import report
        base = {"sweep": "s", "variant": "ring", "workers": 8, "config": {"backend": "ring"},
                "grid_point": {}, "backend": "ring", "np": 8}
        runs = [dict(base, run_id="s-001-ring-w8-r1", status="failed", repeat=1),
                dict(base, run_id="s-001-ring-w8-r2", status="ok", repeat=2),
                dict(base, run_id="s-001-ring-w8-r3", status="timeout", repeat=3),
                dict(base, variant="ps-1", run_id="s-002-ps-1-w8-r1", status="failed")]
        self.assertEqual(report.not_drawn_note(runs),
                         " Not drawn, as they did not succeed: ps-1 W=8 (failed). Drawn from "
                         "the runs that succeeded: ring W=8 (2 of 3 runs failed or timed out) "
                         "(see Runs that did not succeed).")
        self.assertEqual(report.not_drawn_note(runs[:2]),
                         " Drawn from the runs that succeeded: ring W=8 (1 of 2 runs failed) "
                         "(see Runs that did not succeed).")
        row = {"sweep": "s", "bench_id": "s-bench-ar-np8-r2", "np": 8, "bench": "allreduce",
               "busbw_GBps": 1.0, "repeat": 2, "date": "2026-12-02T07:00:00Z"}
        bench = [{"sweep": "s", "bench_id": "s-bench-ar-np8-r1", "np": 8, "status": "failed",
                  "exit_code": 1, "repeat": 1, "date": "2026-12-02T06:00:00Z"},
                 dict(row, size=1024), dict(row, size=2048),
                 {"sweep": "s", "bench_id": "s-bench-ar-np4-r1", "np": 4, "status": "timeout",
                  "exit_code": 124, "repeat": 1, "date": "2026-12-02T06:00:00Z"}]
        self.assertEqual(report.passes_note(bench),
                         " Not drawn, as they did not succeed: bench pass s-bench-ar-np4-r1 "
                         "(np 4): timeout (exit 124). Drawn from the passes that succeeded: "
                         "bench pass s-bench-ar-np8 (np 8: 1 of 2 passes failed) (see Runs that "
                         "did not succeed).")


class StalenessAndBucketPlots(unittest.TestCase):
    def test_the_asp_curve_is_cumulative(self):
        import report_studies as rs
        runs, _ = sr.read_jsonl(os.path.join(FIXTURE, "runs.jsonl"))
        runs = [r for r in runs if r["status"] == "ok" and r.get("consistency") == "asp"
                and r.get("staleness_hist")]
        ax = figures_of(rs, rs.staleness, runs)[0].axes[0]
        self.assertIn("ASP", ax.get_title())
        for line, r in zip(ax.get_lines(), sorted(runs, key=rs._staleness_label)):
            hist = {int(k): v for k, v in r["staleness_hist"].items()}
            total, acc, want = sum(hist.values()), 0, []
            for k in sorted(hist):
                acc += hist[k]
                want.append(100 * acc / total)
            self.assertEqual([round(y, 6) for y in line.get_ydata()], [round(y, 6) for y in want])
            self.assertAlmostEqual(line.get_ydata()[-1], 100.0)

    def test_the_bucket_plot_draws_overlap_on_solid(self):
        # the caption: "with overlap on (solid) ... with overlap off (dashed)"
        import report_studies as rs
        runs, _ = sr.read_jsonl(os.path.join(FIXTURE, "runs.jsonl"))
        runs = [r for r in runs if r["status"] == "ok" and "bucket-mb" in r.get("grid_point", {})]
        off = [dict(copy.deepcopy(r), overlap=False) for r in runs]
        fig = figures_of(rs, rs.bucket, runs + off)[0]
        styles = {l.get_label().rsplit(", ", 1)[1]: l.get_linestyle()
                  for ax in fig.axes for l in ax.get_lines()}
        self.assertEqual(styles, {"overlap on": "-", "overlap off": "--"})


class SmallHelpers(unittest.TestCase):
    def test_the_moving_average_starts_on_the_first_value(self):
        import report_convergence as rc
        self.assertEqual(rc._smooth([4.0, 4.0, 4.0, 1.0], 3), [4.0, 4.0, 4.0, 3.0])

    def test_the_time_sharing_note_names_the_machines_cores(self):
        # bench rows of older folders lack `cores` (0): the note gives the host's count
        import report_plots as rp
        note = rp.oversub_note([{"np": 3, "cores": 2, "oversubscribed": True},
                                {"np": 2, "cores": 0, "oversubscribed": False}])
        self.assertIn("Runs with 3 ranks time-share this machine's 2 cores", note)

    def test_the_wall_clock_captions_name_runs_made_on_a_busy_host(self):
        # the quickstart beside another build (1.0-1.6 of 2 CPUs busy, 2026-12-02): ring W=2 at
        # 125% of linear, 2-rank runs not hollow, and no caption but busbw's said the host was
        # busy; a run with little other load (0.1 CPUs) or none recorded is not counted
        import report_plots as rp
        runs, _ = sr.read_jsonl(os.path.join(FIXTURE, "runs.jsonl"))
        main = [dict(r) for r in runs if r.get("sweep") == "main" and r.get("status") == "ok"
                and "wide" not in r["run_id"]]
        for r in main:
            r.pop("host_other_cpus", None)
            r["cores"] = 2
        loads = [1.43, 1.2, 0.1]
        for r, load in zip(main, loads):
            r["host_other_cpus"] = load
        busy = sum(1 for r, load in zip(main, loads) if load > 0.25 and load + r["np"] > 2.25)
        self.assertEqual(busy, 2)
        made = {f.title: f for f in all_figures(main, [], {})[0] if hasattr(f, "caption")}
        for title in ("Throughput vs workers", "Scaling efficiency", "Step-time breakdown",
                      "Loss and accuracy vs wall time"):
            self.assertIn(f" {busy} of these ", made[title].caption, title)
            self.assertIn("CPUs busy, so that the job's ranks and that load outnumbered the "
                          "cores", made[title].caption, title)
        quiet = [dict(r, host_other_cpus=0.1) for r in main]
        self.assertEqual(rp.busy_runs_note(quiet), "")
        self.assertIn("All 2 runs ran while other processes kept 1.5 of the host's 2 CPUs",
                      rp.busy_runs_note([dict(r, host_other_cpus=1.5) for r in main[:2]]))
        one = rp.busy_runs_note([dict(main[0], host_other_cpus=1.5)])  # not 'All 1 runs'
        self.assertIn(" The run ran while other processes kept 1.5 of the host's 2 CPUs", one)
        self.assertNotIn("All 1", one)
        self.assertIn("its wall-clock figures include waiting for a CPU, not only the backend's "
                      "work; rerun it on a quiet machine.", one)

    def test_synchronous_runs_that_end_apart_are_said_to(self):
        # the quickstart's W=4: ring 0.8880, both PS layouts 0.8862, under a caption saying the
        # synchronous curves differ in speed, not in shape
        import report_convergence as rc
        import report_plots as rp
        runs, _ = sr.read_jsonl(os.path.join(FIXTURE, "runs.jsonl"))
        main = [dict(r, test_accuracy=0.88) for r in runs if r.get("sweep") == "main"
                and r.get("status") == "ok" and "wide" not in r["run_id"]]
        names = rp.series_labels(main)
        self.assertEqual(rc._same_steps_note(main, names), "")
        ring4 = next(r for r in main if r["variant"] == "ring" and r["workers"] == 4)
        ring4["test_accuracy"] = 0.8818
        note = rc._same_steps_note(main, names)
        self.assertIn("still end apart here (W=4: ", note)
        self.assertIn("ring 0.8818", note)
        self.assertNotIn("W=2", note)
        self.assertNotIn("more than that usually gives", note)
        ring4["test_accuracy"] = 0.86
        self.assertIn("more than that usually gives", rc._same_steps_note(main, names))
        made = {f.title: f for f in all_figures(main, [], {})[0] if hasattr(f, "caption")}
        self.assertIn("still end apart here", made["Loss and accuracy vs wall time"].caption)

    def test_runs_with_other_settings_or_one_backend_are_not_blamed_on_the_summation(self):
        # a second ring W=2 run from another sweep (other dataset, lr, epochs) ended at 0.8755
        # beside 0.8800 and was captioned as the backends adding in different orders
        import report_convergence as rc
        import report_plots as rp
        runs, _ = sr.read_jsonl(os.path.join(FIXTURE, "runs.jsonl"))
        main = [dict(r, test_accuracy=0.88) for r in runs if r.get("sweep") == "main"
                and r.get("status") == "ok" and "wide" not in r["run_id"]]
        ring2 = next(r for r in main if r["variant"] == "ring" and r["workers"] == 2)
        other = dict(ring2, sweep="other", run_id="other-ring-w2", dataset="mnist", lr=0.1,
                     epochs=3, test_accuracy=0.8755)
        both = main + [other]
        note = rc._same_steps_note(both, rp.series_labels(both))
        self.assertNotIn("different orders", note)
        self.assertIn("different settings", note)
        self.assertIn("W=2: ps-1 0.8800, ps-colocated 0.8800, ring (main) 0.8800, ring (other) "
                      "0.8755 (dataset, epochs, lr differ).", note)
        # two ring runs alone, same settings: no backends to blame
        again = dict(ring2, sweep="again", run_id="again-ring-w2", test_accuracy=0.8755)
        rings = [ring2, again]
        self.assertEqual(rc._same_steps_note(rings, rp.series_labels(rings)), "")


class FaultsTableAndBars(unittest.TestCase):
    @staticmethod
    def fault_runs():
        runs, _ = sr.read_jsonl(os.path.join(FIXTURE, "runs.jsonl"))
        return [r for r in runs if r.get("fault")]

    def test_the_table_says_which_rank_was_hit_and_its_error(self):
        import report_faults as rf
        runs = self.fault_runs()
        rows = {r[0] + " " + r[2]: dict(zip(rf.HEADER, r)) for r in rf.rows(runs)}
        # ps-1-server: 2 workers (ranks 0, 1) and the server, rank 2 = np - servers
        self.assertEqual(rows["ps-1-server hang:2:30"]["hits"], "server")
        self.assertEqual(rows["ring kill:1:30"]["hits"], "worker")
        # the first `starring: error:` line, before mpirun's verdict wherever that came first
        ring = copy.deepcopy(next(r for r in runs if r["run_id"] == "faults-ring-hang"))
        ring["fault"]["errors"].insert(0, "mpirun: job stopped: rank 0 exited improperly")
        self.assertTrue(rf.rows([ring])[0][-1].startswith("starring: error: rank 0: timeout"))

    def test_bars_only_for_faults_that_fired_and_none_under_the_floor(self):
        import report_faults as rf
        runs = self.fault_runs()
        quick = copy.deepcopy(next(r for r in runs if r["run_id"] == "faults-ring-kill"))
        quick.update(run_id="faults-ring-kill-quick", variant="ring-quick")
        quick["fault"]["detect_s"] = 0.03  # on a log axis from 0.1 s: drawn at 0.1 s
        never = copy.deepcopy(next(r for r in runs if r["run_id"] == "faults-mpi-hang"))
        never.update(run_id="faults-mpi-never", variant="mpi-never")
        never["fault"].update(injected=False, detect_s=None, outcome="not injected")
        ax = figures_of(rf, rf.faults, runs + [quick, never])[0].axes[0]
        self.assertEqual(sorted(round(p.get_height(), 3) for p in ax.patches),
                         [0.1, 1.0, 8.0, 8.0, 119.0])
        self.assertNotIn("mpi-never", " ".join(t.get_text() for t in ax.get_xticklabels()))

    def test_a_fault_run_several_times_is_one_bar_that_counts_every_run(self):
        # `scripts/sweep.sh faults --repeat 3` (or the sweep again into the folder): the plot
        # drew the first run of each backend and fault and left the others out, a hang in the
        # second round hidden behind the first round's "named", under "Each bar is one run"
        import report_faults as rf
        kill = next(r for r in self.fault_runs() if r["run_id"] == "faults-ring-kill")
        again = []
        for i, (detect, outcome, code) in enumerate(((3.0, "detected", 137),
                                                      (119.0, "hung", 124))):
            r = copy.deepcopy(kill)
            r.update(run_id=f"faults-ring-kill-{i + 2}", exit_code=code)
            r["fault"].update(detect_s=detect, outcome=outcome)
            again.append(r)
        fig = figures_of(rf, rf.faults, [kill] + again)[0]
        ax = fig.axes[0]
        self.assertEqual([round(p.get_height(), 3) for p in ax.patches], [3.0])  # the median
        whisker = [c for c in ax.collections if len(c.get_segments()) == 1]
        self.assertEqual(len(whisker), 1)
        self.assertEqual(sorted(whisker[0].get_segments()[0][:, 1].tolist()), [1.0, 119.0])
        label = [t.get_text() for t in ax.texts]
        self.assertEqual(label, ["named 2/3, HUNG 1/3\nexit 124, 137"])
        with mock.patch.object(rf, "_save", lambda fig, out_dir, name: name):
            caption = rf.faults([kill] + again, None).caption
        self.assertIn("Runs of one backend and fault made several times", caption)


class OverlapLabels(unittest.TestCase):
    def test_an_op_on_w_of_n_ranks_is_labelled_with_w(self):
        import report_overlap as ro
        self.assertEqual(ro._label({"backend": "ring@2", "np": 3, "workers": 2}),
                         "ring W=2 (of np=3)")
        self.assertEqual(ro._label({"backend": "ps", "np": 3, "workers": 2, "servers": 1,
                                    "sync_overlap": False}), "ps W=2 S=1 --overlap off")


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
        made, figs = all_figures(*report.load(FIXTURE)[:3])
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
