#!/usr/bin/env python3
"""Tests of the result-format checks and the theory bytes in scripts/starring_results.py, on the
committed fixture (tests/experiments/fixtures/results, written by make_fixture.py): its records
and bench rows follow the schema, broken ones are caught with a message naming what is wrong.
Standard library only; no `starring` binary needed. The report itself: test_report.py.
"""
import copy
import json
import os
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
FIXTURE = os.path.join(HERE, "fixtures", "results")
sys.path.insert(0, os.path.join(REPO, "scripts"))
import starring_results as sr  # noqa: E402


class RecordChecks(unittest.TestCase):
    def setUp(self):
        self.runs, bad = sr.read_jsonl(os.path.join(FIXTURE, "runs.jsonl"))
        self.assertEqual(bad, [])
        self.ok = next(r for r in self.runs if r["status"] == "ok" and r["backend"] == "ps")

    def test_fixture_records_and_bench_rows_follow_the_schema(self):
        for r in self.runs:
            self.assertEqual(sr.check_record(r, r["run_id"]), [])
        bench, _ = sr.read_jsonl(os.path.join(FIXTURE, "bench.jsonl"))
        for b in bench:
            self.assertEqual(sr.check_bench_row(b), [])

    def test_checks_catch_broken_records(self):
        cases = [("step_time", lambda r: r["step_time"].pop("comm_s"), "step_time lacks"),
                 ("status", lambda r: r.update(status="weird"), "status 'weird'"),
                 ("workers", lambda r: r.update(workers=True), "'workers' is bool"),
                 ("ranks", lambda r: r["ranks"].pop(), "ranks listed"),
                 ("accuracy", lambda r: r.update(test_accuracy=3.0), "outside [0, 1]"),
                 ("schema", lambda r: r.update(schema="x"), "schema is 'x'"),
                 ("np", lambda r: r.update(np=r["np"] + 1), "world_size"),
                 ("model", lambda r: r.pop("model"), "missing 'model'")]
        for name, breakit, expect in cases:
            rec = copy.deepcopy(self.ok)
            breakit(rec)
            problems = sr.check_record(rec)
            self.assertTrue(any(expect in p for p in problems), f"{name}: {problems}")
        failed = next(r for r in self.runs if r["status"] == "failed")
        rec = copy.deepcopy(failed)
        rec.pop("log_tail")
        self.assertTrue(sr.check_record(rec))

    def test_overlap_rows_are_checked_against_their_own_schema(self):
        bench, _ = sr.read_jsonl(os.path.join(FIXTURE, "bench.jsonl"))
        row = next(b for b in bench if b.get("bench") == "overlap")
        self.assertEqual(sr.check_bench_row(row), [])
        for breakit, expect in ((lambda r: r.pop("t_total_us"), "missing 't_total_us'"),
                                (lambda r: r.update(overlap_pct=150.0), "outside [0, 100]"),
                                (lambda r: r.update(sync_overlap=1), "'sync_overlap' is int")):
            broken = copy.deepcopy(row)
            breakit(broken)
            problems = sr.check_bench_row(broken)
            self.assertTrue(any(expect in p for p in problems), problems)

    def test_theory_bytes(self):
        ring = copy.deepcopy(self.ok)
        ring.update(backend="ring", servers=None, workers=4, num_servers=0, compress="none")
        d = ring["model"]["bytes"]
        self.assertAlmostEqual(sr.theory_bytes(ring)["worker"], 1.5 * d)
        for half in ("fp16", "bf16"):  # 2 bytes a value on the wire
            ring["compress"] = half
            self.assertAlmostEqual(sr.theory_bytes(ring)["worker"], 0.75 * d, msg=half)
        ps = copy.deepcopy(self.ok)
        ps.update(backend="ps", servers="2", workers=4, num_servers=2, compress="none")
        self.assertEqual(sr.theory_bytes(ps), {"worker": d, "server": 2.0 * d})
        ps.update(servers="colocated", num_servers=0)
        self.assertAlmostEqual(sr.theory_bytes(ps)["worker"], 1.5 * d)
        self.assertIsNone(sr.theory_bytes(ps)["server"])


class WorkerRates(unittest.TestCase):
    def test_each_workers_samples_over_its_own_loop_time(self):
        # batch x accum samples a step, over the timed steps (the untimed first ones are out of
        # compute_s and wait_s too) and the worker's compute + wait seconds; servers have none
        rec = {"batch": 32, "accum": 2, "ranks": [
            {"role": "worker", "steps": 110, "untimed_steps": 10, "compute_s": 1.5, "wait_s": 0.5},
            {"role": "worker", "steps": 110, "untimed_steps": 10, "compute_s": 3.0, "wait_s": 1.0},
            {"role": "server", "steps": 0, "compute_s": 0.0, "wait_s": 0.0}]}
        self.assertEqual(sr.worker_rates(rec), [64 * 100 / 2.0, 64 * 100 / 4.0])
        del rec["ranks"][0]["steps"]  # a summary without per-rank steps: no rates
        self.assertEqual(sr.worker_rates(rec), [])

    def test_the_loop_time_is_the_workers_wall_time_where_recorded(self):
        # compute + wait leave out the loop's work between steps (step_time.other_s), 18-45% of
        # worker 0's step time-shared: the summed rates of a synchronous run read above the job's
        rec = {"batch": 32, "accum": 1, "ranks": [
            {"role": "worker", "steps": 105, "untimed_steps": 5, "compute_s": 1.5, "wait_s": 0.5,
             "wall_s": 2.5},
            {"role": "worker", "steps": 105, "untimed_steps": 5, "compute_s": 2.0, "wait_s": 0.4,
             "wall_s": 2.5}]}
        self.assertEqual(sr.worker_rates(rec), [32 * 100 / 2.5, 32 * 100 / 2.5])


class RecoveryAndTraceChecks(unittest.TestCase):
    def test_a_resumed_run_has_two_legs(self):
        leg = {"exit_code": 0, "status": "ok", "elapsed_s": 2.0, "start_unix": 1.0,
               "command": "c", "log_file": "l"}
        rv = {"role": "fault", "legs": [leg], "total_s": 2.0, "fault": {}, "fault_step": 30,
              "detect_s": 1.0, "resumed_at_step": 20, "steps_lost": 10, "startup_s": 0.3}
        problems = sr.check_recovery({"status": "ok", "recovery": rv})
        self.assertEqual(problems, ["record: a resumed run has 1 legs, expected 2"])
        rv.update(legs=[leg, leg], total_s=4.0)
        self.assertEqual(sr.check_recovery({"status": "ok", "recovery": rv}), [])

    def test_a_partial_trace_loses_only_its_cut_last_line(self):
        ev = [{"ph": "X", "name": "n", "ts": t, "dur": 1, "pid": 0, "tid": 0} for t in (1, 2)]
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "t.json")
            with open(path + ".partial", "w", encoding="utf-8") as f:
                f.write("[" + ",\n".join(json.dumps(e) for e in ev) + ',\n{"ph":"X","na')
            self.assertEqual(sr.read_trace_events(path), ev)


class AppendJsonl(unittest.TestCase):
    def test_a_cut_last_line_does_not_swallow_the_next_record(self):
        # a runs.jsonl whose last record was cut (full disk, killed writer): the next record was
        # appended to the same line, and both were lost to the report
        import tempfile
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "runs.jsonl")
            sr.append_jsonl(path, {"run_id": "a"})
            with open(path, "a", encoding="utf-8") as f:
                f.write('{"run_id": "b", "sta')  # cut
            sr.append_jsonl(path, {"run_id": "c"})
            sr.append_jsonl(path, {"run_id": "d"})
            records, bad = sr.read_jsonl(path)
            self.assertEqual([r["run_id"] for r in records], ["a", "c", "d"])
            self.assertEqual(len(bad), 1)
            self.assertIn("runs.jsonl:2:", bad[0])

    def test_a_record_that_does_not_fit_leaves_no_cut_line(self):
        # A full disk during a sweep: the record being appended was cut (596 of 3,800 bytes on a
        # 40 KB tmpfs) and stayed as a half-written line. A file-size limit (RLIMIT_FSIZE, in a
        # child process) stands in for the full disk: the write fails, the file is as before.
        import resource
        import signal
        import tempfile
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "runs.jsonl")
            sr.append_jsonl(path, {"run_id": "a"})
            before = os.path.getsize(path)
            pid = os.fork()
            if pid == 0:  # child: exit 0 when the append failed with the file left as it was
                code = 1
                try:
                    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
                    resource.setrlimit(resource.RLIMIT_FSIZE, (before + 100, before + 100))
                    try:
                        sr.append_jsonl(path, {"run_id": "b", "pad": "x" * 100000})
                    except OSError:
                        code = 0 if os.path.getsize(path) == before else 3
                finally:
                    os._exit(code)
            _, status = os.waitpid(pid, 0)
            self.assertEqual(os.waitstatus_to_exitcode(status), 0, f"size {os.path.getsize(path)}")
            records, bad = sr.read_jsonl(path)
            self.assertEqual(([r["run_id"] for r in records], bad), (["a"], []))


class UniqueNames(unittest.TestCase):
    def test_a_name_taken_between_the_look_and_the_make_is_not_shared(self):
        # Two sweeps appending to one results folder at the same moment: each looked for a free
        # run name, then made its folder with exist_ok=True, so both could take the same folder.
        # A look that cannot see the other's folder (os.path.exists answering False: the other
        # sweep made it just after) stands in for the race.
        from unittest import mock
        with tempfile.TemporaryDirectory() as tmp:
            runs = os.path.join(tmp, "runs")
            os.makedirs(os.path.join(runs, "s-000-ring-w2"))
            open(os.path.join(runs, "s-bench-np2.log"), "w").close()
            with mock.patch.object(os.path, "exists", return_value=False):
                self.assertEqual(sr.claim_unique_name(runs, "s-000-ring-w2"), "s-000-ring-w2-2")
                self.assertEqual(sr.claim_unique_name(runs, "s-bench-np2", ".log"),
                                 "s-bench-np2-2")
            self.assertTrue(os.path.isdir(os.path.join(runs, "s-000-ring-w2-2")))
            self.assertEqual(os.path.getsize(os.path.join(runs, "s-bench-np2-2.log")), 0)
            self.assertEqual(sr.claim_unique_name(os.path.join(tmp, "new"), "a"), "a")

    def test_a_whole_file_is_written_through_a_temporary_of_its_own(self):
        # two reports writing one folder at once shared '<file>.tmp': one replaced the file with
        # the other's half-written temporary, or failed on its vanished .tmp
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "summary.md")
            seen = []
            sr.write_whole(path, lambda t: (seen.append(t), open(t, "w").write("x")))
            self.assertEqual(seen, [sr.tmp_name(path)])
            self.assertEqual(os.listdir(tmp), ["summary.md"])


if __name__ == "__main__":
    unittest.main(verbosity=2)
