#!/usr/bin/env python3
"""The recovery part of the report (scripts/report_recovery.py) on a results folder this test
writes (records of a recovery sweep, every figure a closed-form function of the configuration,
two repeats), and the driver's helpers behind it (scripts/sweep_recovery.py). No binary needed.
"""
import copy
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
REPORT = os.path.join(REPO, "scripts", "report.py")
sys.path.insert(0, os.path.join(REPO, "scripts"))
sys.path.insert(0, HERE)
import make_fixture  # noqa: E402
import report_recovery  # noqa: E402
import starring_results as sr  # noqa: E402
import sweep as driver  # noqa: E402
import sweep_recovery as rcv  # noqa: E402

FAULT_STEP = 300
BASE_S = {"ring": 2.0, "ps-1": 3.0}  # a baseline's wall time; the repeat adds 0.5 s


def record(variant, fault, every, repeat):
    """One recovery-sweep record as the driver writes it."""
    backend, servers = ("ring", "-") if variant == "ring" else ("ps", "1")
    grid = {"workers": "2", "fault": fault or "-", "checkpoint-every": str(every or "-")}
    run_id = f"recovery-{variant}-{grid['fault']}-{grid['checkpoint-every']}-r{repeat}"
    rec, _ = make_fixture.summary("recovery", run_id, variant, 2, backend, servers, grid=grid)
    rec["config"].update({k: v for k, v in grid.items() if k != "workers" and v != "-"})
    role = "fault" if fault else ("checkpoints" if every else "baseline")
    n_ck = 0 if not every and not fault else (1 if not every else 400 // every)
    ck_s = 0.004 * n_ck
    total = BASE_S[variant] + 0.5 * (repeat - 1) + ck_s
    legs = [{"exit_code": 0, "status": "ok", "elapsed_s": total, "start_unix": 1.0e9,
             "command": "c", "log_file": f"runs/{run_id}/log.txt"}]
    rv = {"role": role, "legs": legs, "checkpoint_every": every, "startup_s": 0.3,
          "checkpoints_total": n_ck, "checkpoint_s_total": ck_s}
    if fault:
        resumed = (FAULT_STEP - 1) // every * every if every else 0
        lost = FAULT_STEP - resumed
        legs[0].update(exit_code=137, status="failed", elapsed_s=1.0 + FAULT_STEP * 0.005)
        legs.append({"exit_code": 0, "status": "ok", "elapsed_s": total - FAULT_STEP * 0.005
                     + lost * 0.005, "start_unix": 1.0e9 + 2, "command": "c --resume auto",
                     "log_file": f"runs/{run_id}/log.resume.txt"})
        rv.update(fault={"spec": fault, "outcome": "detected"}, fault_step=FAULT_STEP,
                  detect_s=1.0, resumed_at_step=resumed, steps_lost=lost)
    rv["total_s"] = round(sum(leg["elapsed_s"] for leg in legs), 3)
    if role != "baseline":
        base = BASE_S[variant] + 0.5 * (repeat - 1)
        rv.update(baseline_run_id="b", baseline_s=base, extra_s=rv["total_s"] - base,
                  accuracy_delta=0.0, test_loss_delta=0.0, same_result=True)
    rec.update(recovery=rv, repeat=repeat, repeats=2, elapsed_s=rv["total_s"],
               checkpoints=n_ck, checkpoint_s={"worker0": ck_s, "others_max": ck_s})
    return rec


def records():
    out = []
    for repeat in (1, 2):
        for variant in ("ring", "ps-1"):
            for fault in (None, "kill:1:300"):
                for every in (None, 25, 100):
                    out.append(record(variant, fault, every, repeat))
    return out


def write(folder, recs):
    os.makedirs(folder, exist_ok=True)
    for r in recs:
        sr.append_jsonl(os.path.join(folder, "runs.jsonl"), r)


class RecoveryReport(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="starring_recovery_report_")
        cls.recs = records()
        write(os.path.join(cls.tmp, "results"), cls.recs)
        cls.out = os.path.join(cls.tmp, "report")
        cls.proc = subprocess.run([sys.executable, REPORT, os.path.join(cls.tmp, "results"),
                                   "--out", cls.out, "--quiet"], capture_output=True, text=True,
                                  timeout=300)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def test_the_fixture_records_are_well_formed(self):
        for r in self.recs:
            self.assertEqual(sr.check_record(r, r["run_id"]), [])

    def test_the_plot_is_drawn_with_units_and_a_caption(self):
        self.assertEqual(self.proc.returncode, 0, self.proc.stderr)
        with open(os.path.join(self.out, "recovery.png"), "rb") as f:
            self.assertEqual(f.read(8), b"\x89PNG\r\n\x1a\n")
        with open(os.path.join(self.out, "report.html"), encoding="utf-8") as f:
            page = f.read()
        self.assertIn('<figure id="recovery">', page)
        self.assertIn("time to finish with one fault vs checkpoint interval", page)
        # ps-1 has 3 ranks on the fixture's 2 cores: the caption says they time-share
        self.assertIn("Runs with 3 ranks time-share this machine&#x27;s 2 cores", page)
        self.assertIn("<h2>Recovery</h2>", page)

    def test_summary_has_one_row_per_configuration_with_the_median_repeat(self):
        with open(os.path.join(self.out, "summary.md"), encoding="utf-8") as f:
            text = f.read()
        self.assertIn("- `recovery.png`: Recovery", text)
        table = text.split("## Recovery")[1].split("##")[0]
        rows = [[c.strip() for c in line.strip("|").split("|")] for line in table.splitlines()
                if line.startswith("| ") and not line.startswith("| backend")]
        self.assertIn("Runs with 3 ranks time-share this machine's 2 cores", table)
        self.assertEqual(len(rows), 12)  # 2 backends x (baseline, 2 intervals, 3 faulted)
        by = {(r[0], r[2], r[3]): dict(zip(report_recovery.HEADER, r)) for r in rows}
        ring_fault = by[("ring", "kill:1:300", "25")]
        # the lower median of two repeats is the first (0.5 s faster); the range shows both
        self.assertEqual(ring_fault["steps lost"], "25")
        total = 1.0 + 2.0 + 0.004 * 16 + 25 * 0.005
        self.assertEqual(ring_fault["total s"], f"{total:.2f} [{total:.2f}..{total + 0.5:.2f}]")
        self.assertEqual(ring_fault["baseline s"], "2.00")
        self.assertEqual(ring_fault["time lost / overhead s"], f"{total - 2.0:+.2f}")
        self.assertEqual(ring_fault["same as baseline"], "yes")
        self.assertEqual(by[("ps-1", "kill:1:300", "none")]["steps lost"], "300")
        self.assertEqual(by[("ring", "-", "100")]["checkpoints"], "4")
        self.assertEqual(by[("ring", "-", "-")]["baseline s"], "-")

    def test_the_summary_names_the_ranks_killed(self):
        # A variant that kills the PS server (recovery.ini's ps-1-server, rank 2) is in the
        # table: the text said 'runs in which worker 1 was killed' of every faulted run.
        server = record("ps-1", "kill:2:300", 100, 1)
        server["variant"] = "ps-1-server"
        text = "\n".join(report_recovery.summary_lines(self.recs + [server]))
        self.assertNotIn("worker 1 was killed", text)
        self.assertIn("one rank was killed (SIGKILL; kill:RANK:STEP here: kill:1:300, "
                      "kill:2:300)", text)

    def test_the_checkpoint_share_is_of_the_baseline_with_the_same_workers(self):
        # ring run at W=4 and W=2: the overhead panel took each backend's baseline from its
        # first group, the W=4 baseline (8 s) for the W=2 bars (baseline 2 s).
        import matplotlib.pyplot as plt

        def at4(rec, total, ck_s):
            rec = copy.deepcopy(rec)
            rec["workers"] = 4
            rec["recovery"].update(total_s=total, checkpoint_s_total=ck_s)
            return rec

        base2, ck2 = record("ring", None, None, 1), record("ring", None, 100, 1)
        runs = [at4(base2, 8.0, 0.0), base2, ck2, at4(ck2, 8.032, 0.032)]
        g = report_recovery.groups(runs)
        fig, ax = plt.subplots()
        try:
            report_recovery._overhead_panel(ax, g, ["ring"], [100, report_recovery.NONE])
            shares = sorted(a.get_text() for a in ax.texts)
            labels = ax.get_legend_handles_labels()[1]
        finally:
            plt.close(fig)
        self.assertEqual(shares, ["4\n0.4%", "4\n0.8%"])  # 0.032 s of 8 s, 0.016 s of 2 s
        self.assertEqual(labels, ["ring W=2", "ring W=4"])

    def test_the_fault_panel_draws_each_worker_count_against_its_own_baseline(self):
        # ring at W=2 and W=4: the panel took the backend's first baseline for both counts and
        # drew the W=2 and W=4 faulted runs as one line.
        import matplotlib.pyplot as plt

        def at4(rec, total):
            rec = copy.deepcopy(rec)
            rec["workers"] = 4
            rec["recovery"]["total_s"] = total
            return rec

        base2 = record("ring", None, None, 1)
        fault2 = next(r for r in self.recs if r["recovery"]["role"] == "fault"
                      and r["backend"] == "ring")
        runs = [base2, fault2, at4(base2, 8.0), at4(fault2, 9.5)]
        g = report_recovery.groups(runs)
        _, pos = report_recovery._xticks(g)
        fig, ax = plt.subplots()
        try:
            report_recovery._fault_panel(ax, g, ["ring"], pos)
            labels = ax.get_legend_handles_labels()[1]
            levels = sorted(line.get_ydata()[0] for line in ax.get_lines()
                            if len(set(line.get_ydata())) == 1 and len(line.get_ydata()) == 2)
        finally:
            plt.close(fig)
        self.assertEqual(sorted(labels), ["ring W=2: killed, resumed",
                                          "ring W=2: no fault, no checkpoints",
                                          "ring W=4: killed, resumed",
                                          "ring W=4: no fault, no checkpoints"])
        self.assertEqual(levels, sorted([base2["recovery"]["total_s"], 8.0]))

    def test_a_folder_without_a_resumed_run_says_why(self):
        with tempfile.TemporaryDirectory(prefix="starring_recovery_report_") as tmp:
            write(os.path.join(tmp, "results"),
                  [r for r in self.recs if r["recovery"]["role"] != "fault"])
            proc = subprocess.run([sys.executable, REPORT, os.path.join(tmp, "results"),
                                   "--out", os.path.join(tmp, "report"), "--quiet"],
                                  capture_output=True, text=True, timeout=300)
            self.assertEqual(proc.returncode, 0, proc.stderr)
            self.assertFalse(os.path.exists(os.path.join(tmp, "report", "recovery.png")))
            with open(os.path.join(tmp, "report", "report.html"), encoding="utf-8") as f:
                self.assertIn("Recovery: no resumed run after a fault", f.read())


class RecoveryCells(unittest.TestCase):
    """Each cell of the recovery table and each label of the plot from the field it names, on
    records whose fields all differ (the fixture above gives several of them one value)."""

    def test_each_column_reads_its_own_field(self):
        base = record("ring", None, None, 1)
        fault = record("ring", "kill:1:300", 25, 1)
        rv = fault["recovery"]
        # the first leg wrote 11 checkpoints (0.044 s), the second 5 (0.020 s): worker 0's
        # figures over both legs are the recovery object's, the summary's are the last leg's
        rv.update(checkpoints_total=16, checkpoint_s_total=0.064, baseline_s=99.0)
        fault["checkpoint_s"] = {"worker0": 0.020, "others_max": 0.031}
        row = dict(zip(report_recovery.HEADER, [
            r for r in report_recovery.rows([base, fault]) if r[2] == "kill:1:300"][0]))
        self.assertEqual(row["checkpoints"], "16")
        self.assertEqual(row["in them s (worker 0)"], "0.064")
        self.assertEqual(row["others waited s"], "0.031")
        self.assertEqual(row["start to 1st step s"], "0.30")  # not the fault's detect_s (1.0)
        # time lost: against the median baseline in the 'baseline s' column, not a field of
        # the run (the baseline it was compared with when it ran)
        self.assertEqual(row["baseline s"], "2.00")
        self.assertEqual(row["time lost / overhead s"], f"{rv['total_s'] - 2.0:+.2f}")

    def test_failed_runs_are_not_in_the_table(self):
        # a recovery run that failed (its second leg too) carries a recovery object with the
        # legs' time: it is no measurement of recovery
        base = record("ring", None, None, 1)
        fault = record("ring", "kill:1:300", 25, 1)
        failed = copy.deepcopy(fault)
        failed.update(status="failed", exit_code=1, log_tail="x")
        failed["recovery"]["total_s"] = 60.0
        rows = report_recovery.rows([base, fault, failed, copy.deepcopy(failed)])
        faulted = [r for r in rows if r[2] == "kill:1:300"]
        self.assertEqual(len(faulted), 1)
        total = f"{fault['recovery']['total_s']:.2f}"
        self.assertEqual(dict(zip(report_recovery.HEADER, faulted[0]))["total s"], total)

    def test_the_checkpoint_share_is_of_the_baseline_not_of_the_run(self):
        import matplotlib.pyplot as plt
        base, ck = record("ring", None, None, 1), record("ring", None, 100, 1)
        ck["recovery"].update(total_s=3.0, checkpoint_s_total=1.0)  # 1 s of a 2 s baseline
        fig, ax = plt.subplots()
        try:
            report_recovery._overhead_panel(ax, report_recovery.groups([base, ck]), ["ring"],
                                            [100])
            labels = [a.get_text() for a in ax.texts]
        finally:
            plt.close(fig)
        self.assertEqual(labels, ["4\n50.0%"])

    def test_steps_lost_go_on_the_tick_only_when_every_backend_lost_as_many(self):
        import matplotlib.pyplot as plt
        recs = [record(v, f, 25, 1) for v in ("ring", "ps-1") for f in (None, "kill:1:300")]
        recs += [record(v, None, None, 1) for v in ("ring", "ps-1")]
        ps_fault = [r for r in recs if r["variant"] == "ps-1"
                    and r["recovery"]["role"] == "fault"][0]
        ps_fault["recovery"]["steps_lost"] = 7
        g = report_recovery.groups(recs)
        self.assertIsNone(report_recovery._steps_lost(g, 25))
        _, pos = report_recovery._xticks(g)
        fig, ax = plt.subplots()
        try:
            report_recovery._fault_panel(ax, g, ["ps-1", "ring"], pos)
            notes = sorted(a.get_text() for a in ax.texts)
        finally:
            plt.close(fig)
        self.assertEqual(notes, ["25 lost", "7 lost"])  # on the points, one per backend


class DriverHelpers(unittest.TestCase):
    def test_the_shipped_sweep_runs_each_baseline_first(self):
        for quick, intervals, step in ((False, ["50", "200", "800"], 1500),
                                       (True, ["25", "100"], 300)):
            sweep, train, grid, variants, _ = driver.load_sweep(
                os.path.join(REPO, "experiments", "sweeps", "recovery.ini"), quick)
            self.assertTrue(rcv.enabled(sweep))
            self.assertEqual(sweep["repeats"], "1" if quick else "3")
            runs = driver.expand_runs(train, grid, variants)
            self.assertEqual(sorted({r["variant"] for r in runs}),
                             ["ps-1", "ps-1-server", "ps-colocated", "ring"])
            # the server rank (2: after workers 0 and 1) dies, with and without checkpoints
            self.assertEqual([(r["flags"]["fault"], r["flags"].get("checkpoint-every"))
                              for r in runs if r["variant"] == "ps-1-server"],
                             [(f"kill:2:{step}", "100")] if quick else
                             [(f"kill:2:{step}", None), (f"kill:2:{step}", "200")])
            for v in ("ring", "ps-1", "ps-colocated"):
                mine = [r["flags"] for r in runs if r["variant"] == v]
                self.assertEqual(rcv.role_of(mine[0]), "baseline")
                self.assertEqual([f.get("checkpoint-every") for f in mine
                                  if rcv.role_of(f) == "checkpoints"], intervals)
                faulted = [f for f in mine if rcv.role_of(f) == "fault"]
                self.assertEqual([f.get("checkpoint-every") for f in faulted],
                                 [None] + intervals)
                self.assertTrue(all(f["fault"] == f"kill:1:{step}" for f in faulted))
                # the fault step is reached: 1872 steps in the full sweep (4 epochs)
                self.assertTrue(all(int(f.get("max-steps", 1872)) > step for f in faulted))

    def test_dry_run_says_which_runs_get_a_checkpoint_folder_and_a_second_leg(self):
        proc = subprocess.run([sys.executable, os.path.join(REPO, "scripts", "sweep.py"),
                               "recovery", "--quick", "--dry-run"], capture_output=True,
                              text=True, timeout=60)
        self.assertEqual(proc.returncode, 0, proc.stderr)
        lines = [line for line in proc.stdout.splitlines() if " W=2 " in line]
        self.assertEqual(len(lines), 19)
        self.assertEqual(sum(line.endswith("[baseline]") for line in lines), 3)
        self.assertEqual(sum(line.endswith("plus --resume auto]") for line in lines), 10)

    def test_the_second_leg_drops_the_fault_and_resumes(self):
        argv = ["starring", "train", "--fault", "kill:1:30", "--checkpoint-every", "10",
                "--fault=hang:1:3", "--checkpoint-dir", "d"]
        self.assertEqual(rcv.second_leg_argv(argv),
                         ["starring", "train", "--checkpoint-every", "10", "--checkpoint-dir",
                          "d", "--resume", "auto"])

    def test_roles_and_checkpoint_folders(self):
        self.assertEqual(rcv.role_of({"backend": "ring"}), "baseline")
        self.assertEqual(rcv.checkpoint_args({"backend": "ring"}, "r"), [])
        self.assertEqual(rcv.role_of({"checkpoint-every": "10"}), "checkpoints")
        self.assertEqual(rcv.role_of({"fault": "kill:1:3", "checkpoint-every": "10"}), "fault")
        self.assertEqual(rcv.checkpoint_args({"fault": "kill:1:3"}, "r"),
                         ["--checkpoint-dir", os.path.join("r", "ckpt")])
        self.assertEqual(rcv.check_runs([{"variant": "v", "flags": {"resume": "auto"}}]),
                         ["sweep: variant v: 'resume' is set by the sweep driver in a recovery "
                          "sweep (OUT/runs/<id>/ckpt; the second leg adds --resume auto)"])

    def test_the_baseline_is_the_same_configuration_and_repeat(self):
        with tempfile.TemporaryDirectory() as tmp:
            recs = records()
            write(tmp, recs)
            fault = [r for r in recs if r["variant"] == "ps-1" and r["repeat"] == 2
                     and r["recovery"]["role"] == "fault"][0]
            base = rcv.find_baseline(fault, tmp)
            self.assertEqual((base["variant"], base["repeat"], base["recovery"]["role"]),
                             ("ps-1", 2, "baseline"))
            other = dict(fault, config=dict(fault["config"], lr="0.5"))
            self.assertIsNone(rcv.find_baseline(other, tmp))

    def test_same_result_is_checked_for_synchronous_training_only(self):
        with tempfile.TemporaryDirectory() as tmp:
            recs = records()
            write(tmp, recs)
            r = dict(recs[1], status="ok", test_accuracy=recs[0]["test_accuracy"] + 1e-4)
            r["recovery"] = dict(r["recovery"])
            metrics = os.path.join(tmp, "m.jsonl")
            open(metrics, "w").close()
            rcv.finish(r, {"metrics_file": metrics}, {"out": tmp})
            self.assertIs(r["recovery"]["same_result"], False)
            self.assertEqual(rcv.count_key(r), "result differs")
            r.update(backend="ps", consistency="asp", test_accuracy=recs[0]["test_accuracy"])
            rcv.finish(r, {"metrics_file": metrics}, {"out": tmp})
            self.assertIsNone(r["recovery"]["same_result"])


    def test_a_different_test_loss_is_a_different_result(self):
        with tempfile.TemporaryDirectory() as tmp:
            recs = records()
            write(tmp, recs)
            r = dict(recs[1], status="ok", test_loss=recs[0]["test_loss"] + 1e-3)
            r["recovery"] = dict(r["recovery"])
            metrics = os.path.join(tmp, "m.jsonl")
            open(metrics, "w").close()
            rcv.finish(r, {"metrics_file": metrics}, {"out": tmp})
            self.assertEqual(r["recovery"]["accuracy_delta"], 0.0)
            self.assertIs(r["recovery"]["same_result"], False)

    def test_a_run_that_failed_before_its_fault_gets_no_second_leg(self):
        # the first leg crashed before the fault step (no '--fault ... at step' line): a restart
        # would count a run that never had its fault as recovered from it
        from unittest import mock
        with tempfile.TemporaryDirectory() as tmp:
            log = os.path.join(tmp, "log.txt")
            with open(log, "w", encoding="utf-8") as f:
                f.write("starring: error: rank 0: out of memory\n")
            calls = []

            def launch(np_, argv, log_path, ctx):
                calls.append(argv)
                return 1, "failed", 2.0, " ".join(argv)
            rec = {"np": 2}
            files = {"log_file": log}
            with mock.patch.object(rcv, "launch", launch):
                status = rcv.run_legs(rec, {"flags": {"fault": "kill:1:300"}},
                                      ["starring", "train", "--fault", "kill:1:300"], files,
                                      {"out": tmp}, tmp)
            self.assertEqual(status, "failed")
            self.assertEqual(len(calls), 1)
            self.assertEqual(len(rec["recovery"]["legs"]), 1)
            self.assertEqual(rec["recovery"]["fault"]["outcome"], "not injected")

    def test_the_baseline_is_the_newest_successful_one_of_the_same_repeat_and_flags(self):
        # the same sweep run again into the folder (--out): the newer baseline, not a failed
        # one, of the same repeat however the records are ordered; --keep-checkpoints (which
        # only a run with checkpoints has) does not make another configuration
        with tempfile.TemporaryDirectory() as tmp:
            recs = records()
            fault = [r for r in recs if r["variant"] == "ring" and r["repeat"] == 1
                     and r["recovery"]["role"] == "fault"][0]
            base = [r for r in recs if r["variant"] == "ring" and r["repeat"] == 1
                    and r["recovery"]["role"] == "baseline"][0]
            base2 = [r for r in recs if r["variant"] == "ring" and r["repeat"] == 2
                     and r["recovery"]["role"] == "baseline"][0]
            newer = dict(copy.deepcopy(base), run_id="ring-base-again")
            failed = dict(copy.deepcopy(base), run_id="ring-base-failed", status="failed",
                          log_tail="x")
            write(tmp, [base, newer, failed, base2])
            self.assertEqual(rcv.find_baseline(fault, tmp)["run_id"], "ring-base-again")
            kept = dict(fault, config=dict(fault["config"], **{"keep-checkpoints": "2"}))
            self.assertEqual(rcv.find_baseline(kept, tmp)["run_id"], "ring-base-again")

    def test_asynchronous_runs_are_not_held_to_the_same_result(self):
        with tempfile.TemporaryDirectory() as tmp:
            recs = records()
            write(tmp, recs)
            metrics = os.path.join(tmp, "m.jsonl")
            open(metrics, "w").close()
            for consistency in ("ssp", "asp"):
                r = dict(recs[1], status="ok", backend="ps", consistency=consistency,
                         test_accuracy=recs[0]["test_accuracy"] + 0.01)
                r["recovery"] = dict(r["recovery"])
                rcv.finish(r, {"metrics_file": metrics}, {"out": tmp})
                self.assertIsNone(r["recovery"]["same_result"], consistency)

    def test_a_fault_that_did_not_end_the_job_is_a_failed_run(self):
        from unittest import mock
        with tempfile.TemporaryDirectory() as tmp:
            log = os.path.join(tmp, "log.txt")
            with open(log, "w", encoding="utf-8") as f:
                f.write("[starring] rank 1: --fault hang at step 300 (unix time 1000.5)\n")
            rec = {"np": 2}
            with mock.patch.object(rcv, "launch", lambda *a: (0, "ok", 9.0, "c")):
                status = rcv.run_legs(rec, {"flags": {"fault": "hang:1:300"}}, ["starring"],
                                      {"log_file": log}, {"out": tmp}, tmp)
            self.assertEqual((status, rec["status"]), ("failed", "failed"))
            self.assertIn("did not end the job (missed)", rec["reason"])
            self.assertEqual(rcv.count_key(rec), "failed")


    def test_checkpoints_and_their_seconds_add_up_over_the_metrics(self):
        with tempfile.TemporaryDirectory() as tmp:
            recs = records()
            write(tmp, recs)
            metrics = os.path.join(tmp, "m.jsonl")
            lines = [{"step": 1, "loss": 1.0}, {"event": "checkpoint", "step": 10, "save_s": 0.1},
                     {"event": "eval", "step": 10}, {"event": "checkpoint", "step": 20,
                                                      "save_s": 0.25},
                     {"event": "checkpoint", "step": 30, "save_s": 0.05}]
            for line in lines:
                sr.append_jsonl(metrics, line)
            r = dict(recs[1], status="ok")
            r["recovery"] = dict(r["recovery"])
            rcv.finish(r, {"metrics_file": metrics}, {"out": tmp})
            self.assertEqual(r["recovery"]["checkpoints_total"], 3)
            self.assertAlmostEqual(r["recovery"]["checkpoint_s_total"], 0.4)


    def test_time_lost_is_both_legs_against_the_baseline_and_the_sweep_line_says_it(self):
        with tempfile.TemporaryDirectory() as tmp:
            recs = records()
            write(tmp, recs)
            r = copy.deepcopy([x for x in recs if x["variant"] == "ring" and x["repeat"] == 1
                               and x["recovery"]["role"] == "fault"
                               and x["recovery"]["checkpoint_every"] == 25][0])
            for k in ("extra_s", "baseline_s", "baseline_run_id", "steps_lost"):
                r["recovery"].pop(k)
            r.update(resumed_from="ckpt/ckpt-275.ckpt", resumed_at_step=275)  # the summary's
            metrics = os.path.join(tmp, "m.jsonl")
            open(metrics, "w").close()
            rcv.finish(r, {"metrics_file": metrics}, {"out": tmp})
            rv = r["recovery"]
            self.assertEqual(len(rv["legs"]), 2)
            self.assertEqual(rv["baseline_s"], BASE_S["ring"])
            self.assertAlmostEqual(rv["extra_s"], rv["total_s"] - BASE_S["ring"], places=3)
            legs = " + ".join(f"{leg['elapsed_s']:.1f}" for leg in rv["legs"])
            self.assertEqual(rcv.describe(r), f"ok {rv['total_s']:.1f}s ({legs} s), 25 steps "
                             f"lost, {rv['extra_s']:+.1f} s vs baseline, same result  acc "
                             f"{r['test_accuracy']:.4f}")


if __name__ == "__main__":
    unittest.main(verbosity=2)
