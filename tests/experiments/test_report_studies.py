#!/usr/bin/env python3
"""Tests of the studies' figures and captions (scripts/report_studies.py) on records made here:
the crossover's verdict and share, the straggler study's labels and the runs it keeps, and the
studies' captions and bounds. No `starring` binary needed; the report's other plots:
test_report_plots.py.
"""
import copy
import os
import sys
import unittest
from unittest import mock

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
FIXTURE = os.path.join(HERE, "fixtures", "results")
sys.path.insert(0, os.path.join(REPO, "scripts"))
import starring_results as sr  # noqa: E402
from plot_capture import figures_of  # noqa: E402


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


class StragglerKept(unittest.TestCase):
    def test_the_share_kept_is_the_jobs_rate(self):
        # every worker trains a fixed 1/W of the epoch: under ASP the fast workers run ahead at
        # their own pace, then wait for the slowest, and the job ends with it. The bar is the
        # job's rate (samples_per_s); the workers' own rates summed read 51 % kept here (and 103 %
        # for the quickstart's ps-asp 1:50, whose job ran at 2,504 samples/s).
        import report_studies as rs
        runs, _ = sr.read_jsonl(os.path.join(FIXTURE, "runs.jsonl"))
        pair = [copy.deepcopy(r) for r in runs if r["run_id"] in ("straggler-ps-asp-none",
                                                                   "straggler-ps-asp-1:50")]
        base, slow = sorted(pair, key=lambda r: bool(r["straggler"]))
        for r in pair:  # 64 x 60 samples per worker in 1 s; worker 0 takes 50 s with the straggler
            workers = [k for k in r["ranks"] if k["role"] == "worker"]
            for i, rank in enumerate(workers):
                rank.update(steps=60, untimed_steps=0, compute_s=50.0 if r is slow and i == 0
                            else 1.0, wait_s=0.0)
            r["samples_per_s"] = 64 * 60 * len(workers) / (50.0 if r is slow else 1.0)
        self.assertAlmostEqual(sum(sr.worker_rates(slow)) / sum(sr.worker_rates(base)),
                               (len(workers) - 1 + 1 / 50) / len(workers))
        ax = figures_of(rs, rs.straggler, pair)[0].axes[0]
        self.assertEqual([round(p.get_height(), 6) for p in ax.patches], [2.0])
        self.assertEqual([t.get_text() for t in ax.texts][0],
                         f"2%\n{slow['samples_per_s']:,.0f}\nof {base['samples_per_s']:,.0f}")

    def test_a_synchronous_share_is_the_jobs_rate_too(self):
        import report_studies as rs
        runs, _ = sr.read_jsonl(os.path.join(FIXTURE, "runs.jsonl"))
        pair = [copy.deepcopy(r) for r in runs if r["run_id"] in ("straggler-ring-none",
                                                                   "straggler-ring-1:50")]
        for r, rate in zip(pair, (15360.0, 3840.0)):
            r["samples_per_s"] = rate
        ax = figures_of(rs, rs.straggler, pair)[0].axes[0]
        self.assertEqual([round(p.get_height(), 6) for p in ax.patches], [25.0])
        self.assertEqual([t.get_text() for t in ax.texts][0], "25%\n3,840\nof 15,360")

    def test_a_run_without_a_job_rate_gets_no_share_not_the_summed_paces(self):
        # rate() fell back to the workers' summed paces when samples_per_s was 0 or absent,
        # silently drawing the retired measure
        import report_studies as rs
        runs, _ = sr.read_jsonl(os.path.join(FIXTURE, "runs.jsonl"))
        pair = [copy.deepcopy(r) for r in runs if r["run_id"] in ("straggler-ring-none",
                                                                   "straggler-ring-1:50")]
        base, slow = sorted(pair, key=lambda r: bool(r["straggler"]))
        base["samples_per_s"] = 4000.0
        for k in slow["ranks"]:  # paces the fallback would have summed
            if k["role"] == "worker":
                k.update(steps=60, untimed_steps=0, compute_s=1.0, wait_s=0.0)
        for missing in (0.0, None):
            if missing is None:
                slow.pop("samples_per_s", None)
            else:
                slow["samples_per_s"] = missing
            self.assertGreater(sum(sr.worker_rates(slow)), 0)
            ax = figures_of(rs, rs.straggler, pair)[0].axes[0]
            self.assertEqual([round(p.get_height(), 6) for p in ax.patches], [0.0])
            self.assertEqual([t.get_text() for t in ax.texts][0],
                             "no share:\nno rate\n(samples_per_s)\nrecorded")
            with mock.patch.object(rs, "_save", lambda fig, out_dir, name: name):
                caption = rs.straggler(pair, None).caption
            self.assertIn("No job rate (samples_per_s) recorded for a run of ring W=4 1:50: no "
                          "share drawn.", caption)

    def test_a_share_above_100_is_said_to_be_the_hosts_load_on_single_runs(self):
        # the quickstart's ps-asp 1:50 on 3 ranks time-sharing 2 busy cores kept 307% when the
        # bar was the workers' summed paces. The bar is now the job's rate, which ends with the
        # straggler: above 100% the two single runs met different host load; the straggler
        # lending its sleeping CPU is at most a lesser part, on time-shared cores
        import report_studies as rs
        runs, _ = sr.read_jsonl(os.path.join(FIXTURE, "runs.jsonl"))
        pair = [copy.deepcopy(r) for r in runs if r["run_id"] in ("straggler-ring-none",
                                                                   "straggler-ring-1:50")]
        base, slow = sorted(pair, key=lambda r: bool(r["straggler"]))

        def caption():
            with mock.patch.object(rs, "_save", lambda fig, out_dir, name: name):
                return rs.straggler(pair, None).caption

        base["samples_per_s"], slow["samples_per_s"] = 4000.0, 1000.0
        self.assertNotIn("Above 100%", caption())
        self.assertIn("makes worker RANK sleep MS milliseconds every step", caption())
        slow["samples_per_s"] = 8000.0  # twice the job's rate without the straggler
        self.assertIn(f"Above 100% ({sr.backend_label(slow)} 1:50: 200%) is no gain from the "
                      "straggler: the job ends with the slowest worker, so the two runs met "
                      "different load on the host (each is a single run, not repeated)",
                      caption())
        self.assertNotIn("it sleeps, so", caption())
        quiet = not any(r.get("oversubscribed") or sr.host_busy(r) for r in pair)
        self.assertEqual("also gives its CPU" not in caption(), quiet)
        for r in pair:
            r["oversubscribed"] = True
        self.assertIn("; on these time-shared cores the sleeping straggler also gives its CPU to "
                      "the other ranks.", caption())
        for r in pair:
            r["oversubscribed"] = False
        self.assertNotIn("A rise (", caption())
        slow["test_accuracy"] = base["test_accuracy"] + 0.07
        self.assertNotIn("A rise (", caption())  # the fixture's pair is ring's: no such spread
        for r in pair:
            r.update(backend="ps", consistency="ssp")
        self.assertIn(f"A rise ({sr.backend_label(slow)} 1:50: +7.0 pt) is no gain from the "
                      "straggler", caption())


class CrossoverShare(unittest.TestCase):
    def test_the_share_is_communication_over_communication_plus_compute(self):
        # the step's total is compute + wait; communication overlaps it (the trainer's
        # convention), so comm / total is not the share the 50% line is read against
        import report_studies as rs
        runs, _ = sr.read_jsonl(os.path.join(FIXTURE, "runs.jsonl"))
        runs = [r for r in runs if r["status"] == "ok" and "hidden" in r.get("grid_point", {})]
        ax = figures_of(rs, rs.crossover, runs)[0].axes[0]
        drawn = {(l.get_label(), x): y for l in ax.get_lines() if "W=" in l.get_label()
                 for x, y in zip(l.get_xdata(), l.get_ydata())}
        want = {}
        for r in runs:
            st = r["step_time"]
            name = f"{sr.backend_label(r)} W={r['workers']} batch {r['batch']}" + (
                f" ({r['np']} ranks)" if r.get("oversubscribed") else "")
            want[(name, r["model"]["params"])] = 100 * st["comm_s"] / (st["comm_s"]
                                                                       + st["compute_s"])
        self.assertEqual(set(drawn), set(want))
        for k, v in want.items():
            self.assertAlmostEqual(drawn[k], v, msg=k)


class StudyCaptionsAndBounds(unittest.TestCase):
    def test_the_bucket_caption_gives_the_model_in_mib(self):
        import report_studies as rs
        runs, _ = sr.read_jsonl(os.path.join(FIXTURE, "runs.jsonl"))
        runs = [r for r in runs if r["status"] == "ok" and "bucket-mb" in r.get("grid_point", {})]
        mib = max(r["model"]["bytes"] for r in runs) / 2**20
        with mock.patch.object(rs, "_save", lambda fig, out_dir, name: name):
            fig = rs.bucket(runs, None)
        self.assertIn(f"(the model is {mib:.0f} MiB;", fig.caption)

    def test_the_ssp_bound_line_sits_between_the_bound_and_the_next_step(self):
        # a bar at staleness s is centred on s: the bound --staleness b is drawn at b + 0.5,
        # so the bars up to b are inside it and the gray region starts after them
        import report_studies as rs
        runs, _ = sr.read_jsonl(os.path.join(FIXTURE, "runs.jsonl"))
        runs = [r for r in runs if r["status"] == "ok" and r.get("consistency") == "ssp"
                and r.get("staleness_hist")]
        ax = figures_of(rs, rs.staleness, runs)[0].axes[0]
        bound = [l for l in ax.get_lines() if l.get_label().startswith("bound --staleness")]
        self.assertEqual([(l.get_label(), list(l.get_xdata())) for l in bound],
                         [("bound --staleness 2", [2.5, 2.5])])


class StragglerWithoutItsBaseline(unittest.TestCase):
    def test_a_straggler_run_whose_partner_failed_is_said_not_left_blank(self):
        # ring's run without the straggler failed: its slot was an empty bar (0 % kept) with no
        # label, and the caption said nothing of it
        import report_studies as rs
        runs, _ = sr.read_jsonl(os.path.join(FIXTURE, "runs.jsonl"))
        study = [r for r in runs if r.get("sweep") == "straggler" and r["status"] == "ok"
                 and r["run_id"] != "straggler-ring-none"]
        ax = figures_of(rs, rs.straggler, study)[0].axes[0]
        texts = [t.get_text() for t in ax.texts]
        self.assertIn("no share:\nno successful\nrun without\nthe straggler", texts)
        with mock.patch.object(rs, "_save", lambda fig, out_dir, name: name):
            caption = rs.straggler(study, None).caption
        self.assertIn("No successful run without the straggler to compare with (see the runs "
                      "that did not succeed): ring W=4 1:50; only their accuracy", caption)
        with mock.patch.object(rs, "_save", lambda fig, out_dir, name: name):
            paired = rs.straggler([r for r in runs if r.get("sweep") == "straggler"], None)
        self.assertNotIn("No successful run without", paired.caption)



class StudiesSource(unittest.TestCase):
    def test_no_line_is_over_100_columns(self):
        # the straggler caption had a line of 101 columns, the staleness caption one of 111
        with open(os.path.join(REPO, "scripts", "report_studies.py"), encoding="utf-8") as f:
            long = [i for i, line in enumerate(f, 1) if len(line.rstrip("\n")) > 100]
        self.assertEqual(long, [])


if __name__ == "__main__":
    unittest.main(verbosity=2)
