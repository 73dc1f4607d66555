#!/usr/bin/env python3
"""Tests of the cost model against measured training runs (scripts/cost_model_runs.py): host
load read from the runs and the bench rows, the predicted step time beside the measured one,
and the model inputs a run gives (compute time, bucket bytes). The formulas and the fit:
test_cost_model.py. No `starring` binary needed.
"""
import json
import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
SCRIPTS = os.path.join(REPO, "scripts")
sys.path.insert(0, SCRIPTS)
import cost_model as cm  # noqa: E402
import cost_model_runs as cmr  # noqa: E402
import starring_results as sr  # noqa: E402
from cost_model_rows import MIB, bench_rows  # noqa: E402


def busy(rows, other):
    """The rows of a sweep's bench pass while other processes kept `other` CPUs busy."""
    return [dict(r, host_other_cpus=other) for r in rows]


def ring_run(workers, step_s, run_id, host=None):
    model = {"widths": cm.PRESETS["default"], "params": 235146, "bytes": 4 * 235146}
    return {"status": "ok", "workers": workers, "np": workers, "backend": "ring", "model": model,
            "batch": 64, "bucket_mb": 25.0, "run_id": run_id, "host": host,
            "step_time": {"compute_s": 0.8 * step_s, "comm_s": 0.2 * step_s, "total_s": step_s}}


class HostLoad(unittest.TestCase):
    """A bench pass taken while other processes and its ranks outnumbered the cores, or one a
    measured run contradicts, is in doubt and used only when nothing else was measured. The
    quickstart on a loaded 2-core machine (other processes on 1.46 CPUs during the np 2 pass)
    fitted the ring 5.9 ms per message, marked it [used] and not in doubt, and mispredicted the
    ring's own 2-worker run by +1670%."""

    truth = cm.Consts(alpha=1e-5, beta=1e-9, gamma=0.0)

    def test_ranks_and_other_cpus_over_the_cores_is_a_busy_host(self):
        row = {"np": 2, "cores": 2}
        for other, np_, want in ((1.46, 2, True), (0.2, 2, False), (0.3, 2, True),
                                 (1.2, 1, False), (1.3, 1, True), (1.0, 3, True),
                                 (0.1, 3, False), (None, 2, False)):
            self.assertIs(sr.host_busy(dict(row, np=np_, host_other_cpus=other)), want,
                          (other, np_))
        self.assertFalse(sr.host_busy({"np": 2, "host_other_cpus": 1.5}))  # cores unknown

    def test_a_pass_on_a_busy_host_is_in_doubt_and_a_clean_one_is_preferred(self):
        loaded = busy(bench_rows("ring", 4, 0, self.truth, 0, cores=4), 1.46)
        for r in loaded:
            r["time_us"] *= 50 if r["size"] < MIB else 1  # the small sizes waited for a CPU
        quiet = busy(bench_rows("ring", 2, 0, self.truth, 0, cores=4), 0.1)
        fits = cm.calibrate(loaded + quiet, gamma=0.0)
        by_w = {f.workers: f for f in fits}
        self.assertEqual(by_w[4].host_busy, 1.46)
        self.assertIsNone(by_w[2].host_busy)
        why = cm.doubts(by_w[4])
        self.assertTrue(why[0].startswith("bench on a busy host (other processes kept 1.5 CPUs "
                                          "busy beside its 4 ranks on 4 cores"), why)
        self.assertEqual(cm.doubts(by_w[2]), [])
        # the largest W on the cores was the reference; a clean pass now comes first
        self.assertIs(cm.reference(fits)["ring"], by_w[2])
        self.assertEqual(cm.series_doubts(cm.reference(fits)), {})
        # nothing else measured: the busy pass is used, and in doubt
        ref = cm.reference(cm.calibrate(loaded, gamma=0.0))
        self.assertIn("ring", cm.series_doubts(ref))
        self.assertIn("ring", cm.series_doubts(ref, bandwidth_gbps=25))  # alpha still its
        self.assertEqual(cm.series_doubts(ref, alpha_us=5, bandwidth_gbps=25), {})

    def test_a_fit_a_run_contradicts_is_in_doubt_and_passed_over(self):
        # the np 2 pass timed 5 ms per message; the 2-worker run's whole step took 1 ms
        slow = cm.Consts(alpha=5e-3, beta=1e-9, gamma=0.0)
        np2 = bench_rows("ring", 2, 0, slow, 0, cores=2)
        np3 = bench_rows("ring", 2, 0, self.truth, 0, np_=3, cores=2)
        runs = [ring_run(2, 1e-3, "main-002-ring-w2"), ring_run(1, 0.8e-3, "main-001-ring-w1")]
        obs = cmr.observed(runs)
        fits = cm.calibrate(np2 + np3, gamma=0.0, observed=obs)
        f2 = next(f for f in fits if f.ranks == 2)
        ratio, run_id = f2.contradicted
        self.assertEqual(run_id, "main-002-ring-w2")
        self.assertAlmostEqual(ratio, cm.step_comm("ring", [4 * 235146], 2, 0, slow) / 1e-3)
        self.assertIn("contradicted by run main-002-ring-w2", " ".join(cm.doubts(f2)))
        ref = cm.reference(fits)["ring"]
        self.assertEqual((ref.ranks, ref.contradicted), (3, None))  # the np 3 pass, not np 2
        # ... time-shared, in place of the core-per-rank pass: said, not silent
        self.assertEqual(cm.used_caveats(ref), [
            "time-shared (3 ranks on 2 cores), used in place of the core-per-rank fit ring W=2 "
            "np=2 (contradicted by run main-002-ring-w2)"])
        # without the runs the np 2 pass is the reference, as before
        self.assertEqual(cm.reference(cm.calibrate(np2 + np3, gamma=0.0))["ring"].ranks, 2)
        # a run of another host, or of another W, says nothing of this pass
        for other in ([ring_run(2, 1e-3, "x", host="other")], [ring_run(4, 1e-3, "y")]):
            f = cm.calibrate([dict(r, host="vm") for r in np2], gamma=0.0,
                             observed=cmr.observed(other))[0]
            self.assertIsNone(f.contradicted)
        # a run near the prediction (comm within 3x of its step) does not contradict it
        near = cm.step_comm("ring", [4 * 235146], 2, 0, slow) / 2.5
        f = cm.calibrate(np2, gamma=0.0, observed=cmr.observed([ring_run(2, near, "z")]))[0]
        self.assertIsNone(f.contradicted)
        # stragglers and ASP/SSP runs are not compared: the model has no term for them
        self.assertEqual(cmr.observed([dict(runs[0], straggler="1:50"),
                                       dict(runs[0], consistency="asp")]), [])

    def test_the_check_says_when_its_constants_are_in_doubt(self):
        import cost_model_cli as cli
        rows = busy(bench_rows("ring", 2, 0, self.truth, 0, cores=2), 1.46)
        runs = [ring_run(1, 1e-3, "w1"), ring_run(2, 1.02e-3, "w2")]
        with tempfile.TemporaryDirectory(prefix="starring_cost_model_test_") as tmp:
            for name, recs in (("bench.jsonl", rows), ("runs.jsonl", runs)):
                with open(os.path.join(tmp, name), "w", encoding="utf-8") as f:
                    f.writelines(json.dumps(r) + "\n" for r in recs)
            p = subprocess.run([sys.executable, os.path.join(SCRIPTS, "cost_model.py"), tmp,
                                "--models", "default", "--workers", "64"],
                               capture_output=True, text=True, timeout=60)
        self.assertEqual(p.returncode, 0, p.stderr)
        fit_row = next(l for l in p.stdout.splitlines() if l.startswith("ring "))
        self.assertIn("bench on a busy host", fit_row)
        self.assertIn("[used]", fit_row)  # the only pass: used, but in doubt
        w2 = next(l for l in p.stdout.splitlines() if l.startswith("w2 "))
        self.assertIn("constants in doubt", w2)
        bounds = next(l for l in p.stdout.splitlines() if l.startswith("ranks <= cores"))
        self.assertIn("; it was predicted from constants in doubt", bounds)
        # counted against the runs of the sentence ('1 of it' read for 1 of 3)
        good = [{"in_doubt": True}, {"in_doubt": False}, {"in_doubt": False}]
        self.assertIn("; 1 of them was predicted", cmr.doubt_clause(good))
        self.assertIn("; all of them were predicted", cmr.doubt_clause(good[:1] * 2))
        self.assertEqual(cmr.doubt_clause(good[1:]), "")
        # none within its bounds: there is no agreement to discount (the quickstart's main
        # --quick folder read '0 lie within ...; all of them were predicted from constants in
        # doubt ..., so this agreement is not evidence for the model')
        self.assertIn("so this agreement is not evidence for the model",
                      cmr.doubt_clause([dict(g, within=True) for g in good]))
        off = cmr.doubt_clause([dict(g, within=False) for g in good])
        self.assertNotIn("agreement", off)
        self.assertTrue(off.endswith("so the misses test those constants as much as the model"),
                        off)
        self.assertIn("ring ms (samples/s) [fit in doubt]", p.stdout)
        self.assertIn("not ranked (fit in doubt): ring: bench on a busy host", p.stdout)
        self.assertEqual(cli.fit_note(cm.calibrate(rows, gamma=0.0)[0], {}).split(" (")[0],
                         "bench on a busy host")


class Prediction(unittest.TestCase):
    def test_a_run_is_predicted_from_compute_plus_bucketed_communication(self):
        c = cm.Consts(alpha=1e-5, beta=1e-9, gamma=0.0, source="x")
        fit = cm.Fit("ring", 2, 0, c, 0.0, [1, 2], False, 2)
        widths = cm.PRESETS["default"]
        model = {"widths": widths, "params": 235146, "bytes": 4 * 235146}
        one = {"status": "ok", "workers": 1, "np": 1, "backend": "ring", "model": model,
               "batch": 64, "step_time": {"compute_s": 0.002, "total_s": 0.0021}}
        two = dict(one, workers=2, np=2, step_time={"compute_s": 0.002, "total_s": 0.003},
                   bucket_mb=25.0, compress="none", run_id="r2")
        gpu = dict(one, device="cuda", step_time={"compute_s": 0.0003, "total_s": 0.0003})
        computes = cmr.compute_times([one, two, gpu])
        self.assertEqual(computes[(235146, 64, "cpu")][0], 0.002)
        self.assertEqual(computes[(235146, 64, "cuda")][0], 0.0003)  # kept apart from the CPU's
        p = cmr.predict_run(two, {"ring": fit}, computes)
        comm = 2 * 1e-5 + 4 * 235146 * 1e-9  # 2(N-1) alpha + 2(N-1)/N D beta, N = 2
        self.assertAlmostEqual(p["comm"], comm)
        self.assertAlmostEqual(p["upper"], 0.002 + comm)
        self.assertAlmostEqual(p["lower"], 0.002)
        self.assertAlmostEqual(p["err"], (0.002 + comm - 0.003) / 0.003)
        self.assertAlmostEqual(p["own_compute_err"], (0.002 + comm - 0.003) / 0.003)
        self.assertTrue(p["expected"])
        # the run's own compute (here slower than one worker's) replaces the 1-worker time
        slow = cmr.predict_run(dict(two, step_time={"compute_s": 0.0025, "total_s": 0.003}),
                               {"ring": fit}, computes)
        self.assertAlmostEqual(slow["own_compute_err"], (0.0025 + comm - 0.003) / 0.003)
        # fp16 on the wire halves D; an oversubscribed run is marked
        half = cmr.predict_run(dict(two, compress="fp16", oversubscribed=True, cores=2),
                               {"ring": fit}, computes)
        self.assertAlmostEqual(half["comm"], 2 * 1e-5 + 2 * 235146 * 1e-9)
        self.assertFalse(half["expected"])

    def test_compute_of_an_unmeasured_model_scales_with_parameters(self):
        t, how = cmr.compute_for(2000, 64, {(1000, 64, "cpu"): (0.01, "measured")})
        self.assertAlmostEqual(t, 0.02)
        self.assertIn("estimated", how)
        self.assertIsNone(cmr.compute_for(2000, 32, {(1000, 64, "cpu"): (0.01, "measured")}))
        self.assertIsNone(cmr.compute_for(2000, 64, {(1000, 64, "cpu"): (0.01, "measured")},
                                          "cuda"))
        # no device named (the extrapolations): the CPU's, else the GPU's, said so
        both = {(1000, 64, "cpu"): (0.01, "cpu run"), (1000, 64, "cuda"): (0.001, "gpu run")}
        self.assertEqual(cmr.compute_for(1000, 64, both), (0.01, "cpu run"))
        self.assertEqual(cmr.compute_for(1000, 64, {(1000, 64, "cuda"): (0.001, "gpu run")}),
                         (0.001, "gpu run, on cuda"))
        self.assertIsNone(cmr.compute_for(1000, 64, {}))

    def test_extrapolation_throughput(self):
        c = cm.Consts(alpha=0.0, beta=1e-9, gamma=0.0)
        ext = cm.extrapolate(cm.PRESETS["default"], 0.001, lambda k: c, [2, 256])
        self.assertEqual(set(ext), {"ring", "ps S=1", "ps S=W/2", "ps co-located"})
        w, up, lo, comm, rate = ext["ring"][1]
        self.assertEqual(w, 256)
        self.assertAlmostEqual(comm, 2 * 255 / 256 * 4 * 235146 * 1e-9)
        self.assertAlmostEqual(rate, 256 * 64 / up)
        self.assertAlmostEqual(lo, max(0.001, comm))


class ModelInputs(unittest.TestCase):
    """The figures the predictions are built from: gamma, the reference fit, T_compute, the
    series' servers, the bounds test."""

    def test_gamma_is_of_the_median_memcpy(self):
        rows = [{"memcpy_GBps": x} for x in (60.0, 2.0, 6.0)]
        self.assertAlmostEqual(cm.gamma_from_bench(rows), 1.5 / 6e9, delta=1e-6 * 1.5 / 6e9)
        self.assertEqual(cm.gamma_from_bench([{"memcpy_GBps": 0}]), 0.0)
        # an even count: the mean of the two middle figures (the upper one alone was 6 here)
        rows = [{"memcpy_GBps": x} for x in (60.0, 2.0, 6.0, 4.0)]
        self.assertAlmostEqual(cm.gamma_from_bench(rows), 1.5 / 5e9, delta=1e-6 * 1.5 / 5e9)

    def test_gamma_leaves_out_time_shared_memcpy_where_others_exist(self):
        # The quickstart's folder: the 2-rank bench measured memcpy at 4.62 GB/s, the 3-, 4-
        # and 5-rank ones on 2 cores at 2.14-2.90 GB/s (time-shared); the median over every
        # row gave 1/gamma 1.91 GB/s where the busbw plot's memcpy line, which leaves those out,
        # read 4.6 GB/s (1/gamma 3.08)
        rows = ([{"memcpy_GBps": 4.62, "oversubscribed": False}] * 10
                + [{"memcpy_GBps": x, "oversubscribed": True} for x in (2.14, 2.90, 2.84)] * 10)
        self.assertAlmostEqual(cm.gamma_from_bench(rows), 1.5 / 4.62e9, delta=1e-15)
        # every job time-shared: those are all there is
        self.assertAlmostEqual(cm.gamma_from_bench(rows[10:]), 1.5 / 2.84e9, delta=1e-15)

    def test_the_median_of_an_even_count_is_the_mean_of_the_middle_two(self):
        self.assertEqual(cm.median([3.0, 1.0, 4.0, 2.0]), 2.5)
        self.assertEqual(cm.median([2.0, 1.0, 3.0]), 2.0)
        self.assertIsNone(cm.median([]))
        self.assertEqual(cm.median_abs([-0.4, 0.1, 0.2, -0.3]), 0.25)
        self.assertEqual(cm.median_abs([]), 0.0)

    def test_among_time_shared_jobs_the_fewest_ranks_are_the_reference(self):
        truth = cm.Consts(alpha=1e-5, beta=1e-9, gamma=0.0)
        rows = (bench_rows("ring", 4, 0, truth, 0, cores=2)
                + bench_rows("ring", 2, 0, truth, 0, np_=3, cores=2))
        ref = cm.reference(cm.calibrate(rows, gamma=0.0))["ring"]
        self.assertEqual((ref.workers, ref.ranks, ref.oversubscribed), (2, 3, True))

    def test_the_half_series_has_w_over_2_servers(self):
        c = cm.Consts(alpha=1e-5, beta=1e-9, gamma=0.0)
        widths = cm.PRESETS["wide"]
        ext = cm.extrapolate(widths, 0.001, lambda k: c, [1, 8])
        sizes = cm.buckets(widths)
        for name, servers in (("ps S=1", (1, 1)), ("ps S=W/2", (1, 4))):
            for (w, _, _, comm, _), s in zip(ext[name], servers):
                self.assertAlmostEqual(comm, cm.step_comm("ps", sizes, w, s, c), msg=(name, w))

    def test_t_compute_is_the_median_of_plain_bsp_one_worker_runs(self):
        model = {"widths": [784, 16, 10], "params": 12730, "bytes": 4 * 12730}
        run = lambda s, **kw: dict({"status": "ok", "workers": 1, "np": 1,  # noqa: E731
                                    "backend": "ring", "model": model, "batch": 64,
                                    "step_time": {"compute_s": s, "total_s": s}}, **kw)
        runs = [run(0.001), run(0.002), run(0.009),  # mean 0.004, median 0.002
                run(0.05, straggler="0:50"), run(0.03, backend="ps", consistency="asp"),
                run(0.04, status="failed"), run(0.5, workers=2, np=2)]
        t, how = cmr.compute_times(runs)[(12730, 64, "cpu")]
        self.assertEqual((t, how), (0.002, "median of 3 1-worker run(s)"))
        # an even count: the mean of the middle two (it was the upper one, 0.009)
        t, how = cmr.compute_times(runs + [run(0.011)])[(12730, 64, "cpu")]
        self.assertAlmostEqual(t, 0.0055)
        self.assertEqual(how, "median of 4 1-worker run(s)")

    def test_one_worker_with_a_dedicated_server_communicates(self):
        c = cm.Consts(alpha=1e-5, beta=1e-9, gamma=0.0, source="x")
        fit = cm.Fit("ps", 1, 1, c, 0.0, [1, 2], False, 2)
        model = {"widths": cm.PRESETS["default"], "params": 235146, "bytes": 4 * 235146}
        rec = {"status": "ok", "workers": 1, "np": 2, "num_servers": 1, "backend": "ps",
               "servers": 1, "model": model, "batch": 64, "bucket_mb": 25.0,
               "step_time": {"compute_s": 0.002, "total_s": 0.004}}
        p = cmr.predict_run(rec, {"ps": fit}, {(235146, 64, "cpu"): (0.002, "m")})
        self.assertAlmostEqual(p["comm"], cm.step_comm("ps", [4 * 235146], 1, 1, c))
        self.assertGreater(p["comm"], 0.0)
        # and W = 2 with S = 2: the run's own servers
        fit2 = cm.Fit("ps", 2, 2, c, 0.0, [1, 2], False, 4)
        p = cmr.predict_run(dict(rec, workers=2, np=4, num_servers=2, servers=2), {"ps": fit2},
                            {(235146, 64, "cpu"): (0.002, "m")})
        self.assertAlmostEqual(p["comm"], cm.step_comm("ps", [4 * 235146], 2, 2, c))

    def test_in_bounds_allows_ten_percent_either_side(self):
        c = cm.Consts(alpha=1e-5, beta=1e-9, gamma=0.0, source="x")
        fit = cm.Fit("ring", 2, 0, c, 0.0, [1, 2], False, 2)
        model = {"widths": cm.PRESETS["default"], "params": 235146, "bytes": 4 * 235146}
        computes = {(235146, 64, "cpu"): (0.002, "m")}
        rec = {"status": "ok", "workers": 2, "np": 2, "backend": "ring", "model": model,
               "batch": 64, "bucket_mb": 25.0, "step_time": {"compute_s": 0.002}}
        upper = cmr.predict_run(dict(rec, step_time={"total_s": 1.0}), {"ring": fit},
                                computes)["upper"]
        for measured, within in ((1.05 * upper, True), (1.15 * upper, False),
                                 (0.002 * 0.95, True), (0.002 * 0.85, False)):
            p = cmr.predict_run(dict(rec, step_time={"compute_s": 0.002, "total_s": measured}),
                                {"ring": fit}, computes)
            self.assertIs(p["within"], within, measured)


if __name__ == "__main__":
    unittest.main(verbosity=2)
