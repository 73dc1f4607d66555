#!/usr/bin/env python3
"""Tests of what the sweep driver records of its jobs, on a stand-in `starring` (no binary, no
mpirun): a failed run's record, a bench pass's rows or its record of failure, and --resume, which
reads those records back to skip the jobs already made (test_sweep_files.py: how it reads sweep
files)."""
import json
import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(REPO, "scripts"))
import starring_results as sr  # noqa: E402
import sweep as driver  # noqa: E402


FAKE_STARRING = """#!/usr/bin/env python3
import json, sys
if sys.argv[1] == "bench" and sys.argv[-1] == "0":  # a pass that exits 0 with no row
    sys.exit(0)
if sys.argv[1] == "bench":  # one row, as `starring bench --json` prints them
    row = {"bench": "allreduce", "backend": "ring", "np": 0, "workers": 0,
           "size": 1024, "count": 256, "type": "float", "time_us": 10.0,
           "algbw_GBps": 0.1, "busbw_GBps": 0.1, "wrong": 0}
    if sys.argv[-1] == "two-hosts":  # the job's own judgement: 2 ranks on each of 2 hosts
        row.update(hosts=2, cores=2, oversubscribed=False)
    print(json.dumps(row))
    sys.exit(0)
print("starring: error: --hidden 0: a width must be at least 1", file=sys.stderr)
sys.exit(2)
"""


class TheRecordsOfJobs(unittest.TestCase):
    """What the driver itself writes for a job, on a stand-in `starring` (no binary, no mpirun):
    a failed run's record has the schema's fields, its roles and its log's tail, and says
    whether its ranks outnumber the cores; so do a bench pass's rows (the busbw plot's note on
    time-shared jobs reads them)."""

    def context(self, tmp):
        fake = os.path.join(tmp, "starring")
        with open(fake, "w") as f:
            f.write(FAKE_STARRING)
        os.chmod(fake, 0o755)
        return {"name": "t", "out": os.path.join(tmp, "out"), "bin": fake, "quick": False,
                "repeats": 1, "launcher": "env STARRING_NP={np}", "timeout_s": 60.0,
                "git": "0123abc", "host": "h", "cores": 2, "gpus": 0, "gpus_where": "",
                "trace": False, "recovery": False}

    def sweep_cli(self, path, ctx, *more):
        """scripts/sweep.py on the sweep file `path` with ctx's stand-in and folder."""
        return subprocess.run(
            [sys.executable, os.path.join(REPO, "scripts", "sweep.py"), path, "--out",
             ctx["out"], "--bin", ctx["bin"], "--launcher", "env STARRING_NP={np}", *more],
            capture_output=True, text=True, timeout=60)

    def sweep_file(self, tmp, text):
        """(ctx, sweep): sweep(*flags) runs scripts/sweep.py on a sweep file `text` in `tmp`."""
        ctx = self.context(tmp)
        path = os.path.join(tmp, "s.ini")
        with open(path, "w") as f:
            f.write(text)
        return ctx, lambda *more: self.sweep_cli(path, ctx, *more)

    def test_a_failed_runs_record(self):
        import sweep_jobs
        with tempfile.TemporaryDirectory() as tmp:
            ctx = self.context(tmp)
            got = []
            for workers, flags in ((2, {"backend": "ring"}),
                                   (2, {"backend": "ps", "servers": "1"})):
                run = {"variant": flags["backend"], "flags": flags, "workers": workers,
                       "point": {}, "requires": ""}
                try:
                    got.append(driver.run_train(run, len(got) + 1, ctx))
                finally:
                    sweep_jobs.end_deferral(ctx)
        for rec in got:
            self.assertEqual(sr.check_record(rec, rec["run_id"]), [])
            self.assertEqual((rec["status"], rec["exit_code"]), ("failed", 2))
            self.assertIn("--hidden 0: a width must be at least 1", rec["log_tail"])
            self.assertEqual((rec["git"], rec["host"], rec["cores"]), ("0123abc", "h", 2))
        ring, ps = got
        self.assertEqual((ring["np"], ring["roles"], ring["oversubscribed"]),
                         (2, {"worker": 2, "server": 0}, False))
        self.assertEqual((ps["np"], ps["num_servers"], ps["roles"], ps["oversubscribed"]),
                         (3, 1, {"worker": 2, "server": 1}, True))
        self.assertIn("STARRING_NP=3", ps["command"])

    def test_resume_makes_only_the_jobs_not_recorded(self):
        # Ctrl-C's message said `--out DIR` adds to the records: every run was made again, and
        # the report pooled the ones made twice as repeats. With --resume the recorded ones
        # (whatever their status; a line cut by a kill is no record) are skipped.
        import sweep_jobs
        with tempfile.TemporaryDirectory() as tmp:
            ctx = self.context(tmp)
            runs = [{"variant": "ring", "flags": {"backend": "ring"}, "workers": w,
                     "point": {}, "requires": ""} for w in (1, 2, 4)]
            benches = {"ar": {"np": "2 4", "args": ""}}
            os.makedirs(ctx["out"])

            def sweep(**more):
                counts = {}
                try:
                    driver.run_all(runs, benches, dict(ctx, **more), counts)
                finally:
                    sweep_jobs.end_deferral(ctx)
                return counts

            self.assertEqual(sweep(), {"failed": 3, "bench ok": 2})
            path = os.path.join(ctx["out"], "runs.jsonl")
            with open(path, encoding="utf-8") as f:
                lines = f.readlines()
            with open(path, "w", encoding="utf-8") as f:  # run 3 cut as it was written
                f.write("".join(lines[:2]) + lines[2][:40])
            bench = os.path.join(ctx["out"], "bench.jsonl")
            with open(bench, encoding="utf-8") as f:
                rows = f.readlines()
            with open(bench, "w", encoding="utf-8") as f:  # the np 4 pass not made yet
                f.write(rows[0])
            counts = sweep(recorded=driver.recorded_jobs(ctx["out"]))
            self.assertEqual(counts, {driver.RECORDED: 1, driver.RECORDED_BAD: 2, "failed": 1,
                                      "bench ok": 1})
            made, bad = sr.read_jsonl(path)
            self.assertEqual([r["workers"] for r in made], [1, 2, 4])
            self.assertEqual(len(bad), 1)  # the cut line, reported and not taken as a record
            self.assertEqual(sorted(r["bench_id"] for r in sr.read_jsonl(bench)[0]),
                             ["t-bench-ar-np2", "t-bench-ar-np4"])
            # another round of the same sweep (--repeat) is not the same job
            self.assertNotIn(driver.run_key("t", "ring", 1, {"backend": "ring"},
                                            {}, 2), driver.recorded_jobs(ctx["out"]))

    def test_resume_exits_1_when_recorded_jobs_failed(self):
        # --resume counted a recorded failed run as done, and the sweep exited 0: one stopped
        # and resumed exited 0 where the same sweep made in one go exits 1
        with tempfile.TemporaryDirectory() as tmp:
            ctx, sweep = self.sweep_file(tmp, "[sweep]\nreport = no\n[grid]\nworkers = 1\n"
                                         "[bench x]\nargs = -b 1K\n")
            p = sweep()
            self.assertEqual(p.returncode, 1, p.stdout + p.stderr)  # the run failed
            os.remove(os.path.join(ctx["out"], "bench.jsonl"))  # stopped before the bench pass
            p = sweep("--resume")
            self.assertEqual(p.returncode, 1, p.stdout + p.stderr)
            self.assertIn("recorded before (failed): skipped (--resume)", p.stdout)
            self.assertIn("1 bench ok, 1 recorded before, did not succeed (--resume)", p.stdout)
            self.assertIn("1 of 1 run(s) and bench pass(es) recorded before did not "
                          "succeed", p.stdout)
            # a fault detected as meant (an expected failure) is a success on record too
            runs = os.path.join(ctx["out"], "runs.jsonl")
            rec = sr.read_jsonl(runs)[0][0]
            rec["fault"] = {"spec": "kill:1:3", "outcome": "detected"}
            with open(runs, "w", encoding="utf-8") as f:
                f.write(json.dumps(rec) + "\n")
            p = sweep("--resume")
            self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
            self.assertIn("2 recorded before (--resume)", p.stdout)

    def test_a_dry_run_with_resume_marks_the_recorded_jobs(self):
        # --dry-run ignored --resume: the plan listed every job as one to make
        with tempfile.TemporaryDirectory() as tmp:
            ctx, sweep = self.sweep_file(tmp, "[sweep]\nreport = no\n[grid]\nworkers = 1 2\n"
                                         "[bench x]\nnp = 2 4\nargs = -b 1K\n")

            sweep()
            for name in ("runs.jsonl", "bench.jsonl"):  # stopped after W=1 and the np 2 pass
                with open(os.path.join(ctx["out"], name), encoding="utf-8") as f:
                    first = f.readline()
                with open(os.path.join(ctx["out"], name), "w", encoding="utf-8") as f:
                    f.write(first)
            p = sweep("--dry-run", "--resume")
            self.assertEqual(p.returncode, 0, p.stderr)
            lines = [ln for ln in p.stdout.splitlines() if ln.startswith("  ")]
            self.assertEqual(len(lines), 3, p.stdout)
            self.assertTrue(lines[0].endswith("W=1 np=1:   [recorded (failed): "
                                              "--resume skips it]"), lines[0])
            self.assertNotIn("recorded", lines[1])
            self.assertTrue(lines[2].endswith("-b 1K  [recorded np 2: --resume skips it]"),
                            lines[2])
            self.assertIn("[sweep] --resume: 2 of the 4 runs and bench passes are recorded in "
                          f"{ctx['out']} and would be skipped (1 of them did not succeed",
                          p.stdout)
            self.assertNotIn("recorded", sweep("--dry-run").stdout)

    def test_resume_with_another_repeat_count_skips_round_1s_bench_pass_too(self):
        # a bench pass's id has "-rN" only with --repeat 2 or more, a run's key has no id: one
        # sweep, then --resume --repeat 2 skipped round 1's run but made its bench pass again
        with tempfile.TemporaryDirectory() as tmp:
            ctx, sweep = self.sweep_file(tmp, "[sweep]\nreport = no\n[grid]\nworkers = 1\n"
                                         "[bench x]\nargs = -b 1K\n")
            sweep()
            p = sweep("--resume", "--repeat", "2", "--dry-run")
            self.assertIn("-b 1K  [recorded np 2 round 1: --resume skips it]", p.stdout)
            self.assertIn("2 of the 4 runs and bench passes are recorded", p.stdout)
            p = sweep("--resume", "--repeat", "2")
            self.assertIn("1 bench ok, 1 failed, 1 recorded before (--resume)", p.stdout)
            bench = os.path.join(ctx["out"], "bench.jsonl")
            self.assertEqual([(r["bench_id"], r["repeat"]) for r in sr.read_jsonl(bench)[0]],
                             [("s-bench-x-np2", 1), ("s-bench-x-np2-r2", 2)])
            # ... and back: round 1 of a --repeat 2 sweep is "-r1", recorded for --repeat 1 too
            ctx["out"] += "2"
            sweep("--repeat", "2")
            p = sweep("--resume", "--dry-run")
            self.assertIn("-b 1K  [recorded: --resume skips it]", p.stdout)

    def test_resume_makes_a_bench_pass_of_other_args_or_quick_again(self):
        # the bench key was (bench_id, round): a --quick pass of `-b 1K` counted as the full
        # sweep's `-b 64M` pass, whose rows were never made
        import sweep_jobs
        with tempfile.TemporaryDirectory() as tmp:
            ctx = self.context(tmp)
            os.makedirs(ctx["out"])

            def sweep(args, quick):
                counts = {}
                try:
                    driver.run_all([], {"ar": {"np": "2", "args": args}},
                                   dict(ctx, quick=quick,
                                        recorded=driver.recorded_jobs(ctx["out"])), counts)
                finally:
                    sweep_jobs.end_deferral(ctx)
                return counts

            self.assertEqual(sweep("-b 1K", True), {"bench ok": 1})
            self.assertEqual(sweep("-b 64M", True), {"bench ok": 1})  # other args
            self.assertEqual(sweep("-b 64M", False), {"bench ok": 1})  # not --quick
            self.assertEqual(sweep("-b 64M", False), {driver.RECORDED: 1})
            bench = os.path.join(ctx["out"], "bench.jsonl")
            self.assertEqual([(r["bench_args"], r["quick"]) for r in sr.read_jsonl(bench)[0]],
                             [("-b 1K", True), ("-b 64M", True), ("-b 64M", False)])
            # a row written before rows said their args matches no pass: made again
            rows = sr.read_jsonl(bench)[0]
            with open(bench, "w", encoding="utf-8") as f:
                for r in rows:
                    r.pop("bench_args")
                    f.write(json.dumps(r) + "\n")
            self.assertEqual(sweep("-b 64M", False), {"bench ok": 1})

    def test_resume_runs_a_run_that_was_skipped(self):
        # a skipped run (`requires = gpu` where there was no GPU) counted as done: resumed on a
        # host with GPUs (or with --gpus), the sweep still never launched it
        import sweep_jobs
        with tempfile.TemporaryDirectory() as tmp:
            ctx = self.context(tmp)
            runs = [{"variant": "nccl", "flags": {"backend": "nccl"}, "workers": 2,
                     "point": {}, "requires": "gpu"}]
            os.makedirs(ctx["out"])

            def sweep(**more):
                counts = {}
                try:
                    driver.run_all(runs, {}, dict(ctx, **more), counts)
                finally:
                    sweep_jobs.end_deferral(ctx)
                return counts

            self.assertEqual(sweep(gpus=0), {"skipped": 1})
            self.assertEqual(sweep(gpus=2, recorded=driver.recorded_jobs(ctx["out"])),
                             {"failed": 1})  # launched (the stand-in fails every run)

    def bench_passes(self, *passes):
        """sweep_jobs.run_bench's (status, row count) for each (np, args), and bench.jsonl's rows
        and bad lines."""
        import sweep_jobs
        with tempfile.TemporaryDirectory() as tmp:
            ctx = self.context(tmp)
            got = []
            for np_, args in passes:
                try:
                    got.append(sweep_jobs.run_bench("b", np_, args, ctx)[:2])
                finally:
                    sweep_jobs.end_deferral(ctx)
            rows, bad = sr.read_jsonl(os.path.join(ctx["out"], "bench.jsonl"))
        return got, rows, bad

    def test_bench_rows_say_whether_the_job_time_shared_the_cores(self):
        got, rows, bad = self.bench_passes((2, "-b 1K"), (3, "-b 1K"))
        self.assertEqual(got, [("ok", 1), ("ok", 1)])
        self.assertEqual(bad, [])
        self.assertEqual([(r["bench_id"], r["oversubscribed"]) for r in rows],
                         [("t-bench-b-np2", False), ("t-bench-b-np3", True)])
        for r in rows:
            self.assertEqual(sr.check_bench_row(r), [])

    def test_bench_rows_judged_by_the_job_host_by_host_are_kept(self):
        # np 4 over two hosts of 2 CPUs: the driver's host has 2 CPUs, so np > cores read as
        # time-shared (two fake hosts, test_mpirun_helper.py's set-up: train records false,
        # the bench pass's rows true)
        got, rows, _ = self.bench_passes((4, "-b 1K two-hosts"))
        self.assertEqual(got, [("ok", 1)])
        self.assertEqual([(r["oversubscribed"], r["cores"], r["hosts"], r["host"]) for r in rows],
                         [(False, 2, 2, "h")])

    def test_a_bench_pass_without_rows_is_a_failure_on_record(self):
        # exit 0 but no `--json` row: nothing to plot, so the pass failed, and says so in
        # bench.jsonl (a status record with the log's tail); its row count is 0
        got, rows, _ = self.bench_passes((2, "-b 0"))
        self.assertEqual(got, [("failed", 0)])
        self.assertEqual([(r["status"], r["exit_code"], r["np"]) for r in rows],
                         [("failed", 0, 2)])
        self.assertEqual(sr.check_bench_row(rows[0]), [])


if __name__ == "__main__":
    unittest.main(verbosity=2)
