#!/usr/bin/env python3
"""The sweep driver's time bound on every job (scripts/sweep_jobs.py launch): the sweep's
timeout_s, or --timeout in its place; a job past it is stopped whole (SIGTERM to `timeout`'s
process group, SIGKILL later to what is left), a process of it that outlives the job (a rank that
ignored the SIGTERM) is killed, not left running beside the next runs, and the run is recorded as
a timeout with its reason while the sweep goes on.
  test_sweep_time_bound.py --bin build/bin/starring
The cases run one at a time: launch() sets signal handlers (main thread only) and kills every
child of this process that outlives a job.
"""
import glob
import os
import signal
import subprocess
import sys
import tempfile
import time
import unittest
from unittest import mock

import bin_main
from sweep_ini import small_sweep

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(REPO, "scripts"))
import starring_results as sr  # noqa: E402
import sweep as driver  # noqa: E402
import sweep_jobs  # noqa: E402

BIN = None  # set from --bin


def alive(pid):
    """Whether process `pid` runs (a zombie does not)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except OSError:
        return False


def launch_sh(script, ctx, tmp):
    """sweep_jobs.launch of `sh -c script` under ctx's bound: (rc, status, elapsed, log text)."""
    log, ctx = os.path.join(tmp, "log"), dict(ctx, launcher="sh")
    try:
        rc, status, elapsed, _ = sweep_jobs.launch(1, ["-c", script], log, ctx)
    finally:
        sweep_jobs.end_deferral(ctx)
    with open(log, encoding="utf-8") as f:
        return rc, status, elapsed, f.read()


class TheTimeBound(unittest.TestCase):
    """Every job runs under its time bound: the sweep's timeout_s, or --timeout in its place."""

    def test_timeout_overrides_the_sweeps_timeout_s(self):
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "t.ini")
            with open(path, "w") as f:
                f.write("[sweep]\ntimeout_s = 50\n[grid]\nworkers = 1\n")
            for extra, bound in (([], "at most 50 s each"), (["--timeout", "7"], "at most 7 s each")):
                p = subprocess.run([sys.executable, os.path.join(REPO, "scripts", "sweep.py"), path,
                                    "--dry-run", "--bin", os.path.join(tmp, "none"), *extra],
                                   capture_output=True, text=True, timeout=60)
                self.assertEqual(p.returncode, 0, p.stderr)
                self.assertIn(bound, p.stdout.splitlines()[0])
                a = driver.parse_args([path, *extra])
                ctx = driver.make_context(a, driver.load_sweep(path, False)[0], "t")
                self.assertEqual(ctx["timeout_s"], 7.0 if extra else 50.0)

    def test_a_job_past_its_bound_is_stopped_and_called_a_timeout(self):
        ctx = {"launcher": sys.executable, "timeout_s": 2}
        with tempfile.TemporaryDirectory() as tmp:
            try:
                rc, status, elapsed, cmd = sweep_jobs.launch(
                    1, ["-c", "import time; time.sleep(120)"], os.path.join(tmp, "log"), ctx)
            finally:
                sweep_jobs.end_deferral(ctx)
        self.assertEqual((rc, status), (124, "timeout"))
        self.assertLess(elapsed, 60)
        self.assertTrue(cmd.startswith("timeout -k 15 2 "), cmd)

    def test_a_process_that_outlives_the_job_is_killed(self):
        # The job ends on the SIGTERM at its bound, one of its processes (a rank stuck in its
        # handler) ignores it: `timeout` exited 124 as soon as the job's own process had ended,
        # sent no SIGKILL, and the process ran on beside the next runs, no one's (ps: `sleep
        # 300`, parent the driver, the job's group).
        foreign = record_foreign_signals(self)  # and no one else's
        with tempfile.TemporaryDirectory() as tmp:
            pidfile = os.path.join(tmp, "pid")
            script = (f"(trap '' TERM; exec sleep 300) & echo $! > {pidfile}; "
                      "trap 'exit 143' TERM; while :; do sleep 0.05; done")
            rc, status, elapsed, log = launch_sh(script, {"timeout_s": 1}, tmp)
            with open(pidfile) as f:
                pid = int(f.read())
            left = alive(pid)
            if left:  # clean up before failing
                os.kill(pid, signal.SIGKILL)
        self.assertEqual((rc, status), (124, "timeout"), log)
        self.assertFalse(left, f"the job's process {pid} still runs\n{log}")
        self.assertIn(f"[sweep] 1 process(es) of the job outlived it by 5 s and were killed: "
                      f"{pid} (sleep)", log)
        self.assertIn("[sweep] ran past its time bound of 1 s", log)
        self.assertLess(elapsed, 30)
        self.assertEqual(foreign, [], "signals to processes not the driver's")

    def test_a_job_that_ignores_sigterm_is_killed_and_still_a_timeout(self):
        # `timeout -k` sends its SIGKILL to the whole group, itself included: the driver saw -9,
        # and the run was recorded as "failed" with exit code -9, not as a timeout
        with tempfile.TemporaryDirectory() as tmp:
            script = "trap '' TERM; while :; do sleep 0.05; done"
            rc, status, elapsed, log = launch_sh(script, {"timeout_s": 1, "kill_after_s": 1}, tmp)
        self.assertEqual((rc, status), (137, "timeout"), log)
        self.assertIn("[sweep] ran past its time bound of 1 s (the sweep's timeout_s or "
                      "--timeout): stopped, SIGTERM to the whole job, still there 1 s later: "
                      "SIGKILL to what was left", log)
        self.assertLess(elapsed, 30)

    def test_the_reason_says_how_the_job_ended(self):
        # it said "SIGKILL 15 s later to what was left" for a job that had ended on the SIGTERM
        ctx = {"timeout_s": 60.0}
        self.assertEqual(sweep_jobs.timeout_reason(ctx, 124),
                         "ran past its time bound of 60 s (the sweep's timeout_s or --timeout): "
                         "stopped, SIGTERM to the whole job, which ended on it")
        self.assertEqual(sweep_jobs.timeout_reason(ctx, 137),
                         "ran past its time bound of 60 s (the sweep's timeout_s or --timeout): "
                         "stopped, SIGTERM to the whole job, still there 15 s later: SIGKILL to "
                         "what was left")
        self.assertIn("still there 3 s later",
                      sweep_jobs.timeout_reason(dict(ctx, kill_after_s=3), 137))


def descendants(pid):
    """The pids of `pid`'s descendants, zombies included (the kernel's child lists, not the
    driver's /proc/PID/stat walk)."""
    found = []
    for task in glob.glob(f"/proc/{pid}/task/*/children"):
        try:
            with open(task) as f:
                kids = [int(k) for k in f.read().split()]
        except OSError:
            continue
        for kid in kids:
            found += [kid] + descendants(kid)
    return found


def record_foreign_signals(test):
    """Patches os.kill and os.killpg for the rest of `test` to note every signal sent to a
    process, or a group, that is not (has no member that is) a descendant of this process,
    sending only the others; returns the list the first go to."""
    foreign, kill, killpg = [], os.kill, os.killpg

    def fake_kill(pid, sig):
        if pid not in descendants(os.getpid()):
            foreign.append(("kill", pid, sig))
            raise ProcessLookupError
        return kill(pid, sig)

    def group_of(pid):
        try:
            return os.getpgid(pid)
        except ProcessLookupError:
            return None

    def fake_killpg(pgid, sig):
        if pgid not in {group_of(pid) for pid in descendants(os.getpid())}:
            foreign.append(("killpg", pgid, sig))
            raise ProcessLookupError
        return killpg(pgid, sig)

    for name, fake in (("kill", fake_kill), ("killpg", fake_killpg)):
        patch = mock.patch.object(sweep_jobs.os, name, fake)
        patch.start()
        test.addCleanup(patch.stop)
    return foreign


class SignalsOnlyToItsOwn(unittest.TestCase):
    """After a job, the driver signals only its own processes: `timeout`, the job's group
    leader, has been reaped by then, and its pid (the group's id once no member is left) may be
    another user's already (pid_max 32768 here). It sent SIGKILL to that group after every job,
    one that left nothing too (os.killpg on a pid /proc no longer had). A leftover killed:
    TheTimeBound.test_a_process_that_outlives_the_job_is_killed."""

    def test_a_job_that_left_nothing_gets_no_signal(self):
        foreign = record_foreign_signals(self)
        with tempfile.TemporaryDirectory() as tmp:
            rc, status, _, log = launch_sh("exit 0", {"timeout_s": 30}, tmp)
        self.assertEqual((rc, status), (0, "ok"), log)
        self.assertEqual(foreign, [], "signals to processes not the driver's")

    def test_a_stopped_job_gets_no_signal_once_reaped(self):
        # stop_job: SIGINT, `timeout` passes it on, the job ends, `timeout` is waited for; then
        # it sent SIGKILL to the reaped `timeout`'s group
        foreign = record_foreign_signals(self)
        sweep_jobs.adopt_orphans()
        proc = subprocess.Popen(["timeout", "-k", "100", "100", "sh", "-c",
                                 "trap 'exit 130' INT; while :; do sleep 0.05; done"])
        deadline = time.monotonic() + 10
        while os.getpgid(proc.pid) != proc.pid and time.monotonic() < deadline:
            time.sleep(0.01)  # `timeout` makes its own group first thing
        time.sleep(0.2)  # ... and starts sh, which sets its trap
        sweep_jobs.stop_job(proc)
        self.assertIsNotNone(proc.returncode)
        self.assertEqual(foreign, [], "signals to processes not the driver's")


class InASweep(unittest.TestCase):
    def test_a_run_past_its_bound_is_a_timeout_with_its_reason_and_the_sweep_goes_on(self):
        # np 2 under scripts/mpirun.sh, 4 s: mpirun and both ranks are stopped, none is left,
        # and the next run is made
        rest = ("[grid]\nworkers = 2\n\n[variant too-long]\nbackend = ring\nepochs = 100000\n"
                "\n[variant after]\nbackend = ring\nmax-steps = 2\n")
        with tempfile.TemporaryDirectory(prefix="starring_sweep_test_") as tmp:
            ini = os.path.join(tmp, "sweep.ini")
            with open(ini, "w") as f:
                f.write(small_sweep(4, "", rest))
            out = os.path.join(tmp, "results")
            t0 = time.monotonic()
            p = subprocess.run([os.path.join(REPO, "scripts", "sweep.sh"), ini, "--out", out,
                                "--bin", BIN, "--no-bench"], capture_output=True, text=True,
                               timeout=120)
            left = subprocess.run(["ps", "-eo", "pid,args"], capture_output=True,
                                  text=True).stdout.splitlines()
            left = [l for l in left if out in l]
            for line in left:  # clean up before failing
                os.kill(int(line.split()[0]), signal.SIGKILL)
            self.assertEqual(left, [], "processes of the stopped run still run")
            runs, _ = sr.read_jsonl(os.path.join(out, "runs.jsonl"))
            self.assertEqual([(r["variant"], r["status"]) for r in runs],
                             [("too-long", "timeout"), ("after", "ok")], p.stdout + p.stderr)
            for r in runs:
                self.assertEqual(sr.check_record(r), [])
            self.assertEqual(runs[0]["exit_code"], 124)
            self.assertIn("ran past its time bound of 4 s", runs[0]["reason"])
            self.assertIn("[sweep] ran past its time bound of 4 s", runs[0]["log_tail"])
            self.assertIn("TIMEOUT (exit 124): ran past its time bound of 4 s", p.stdout)
            self.assertIn("which ended on it", runs[0]["reason"])
            self.assertNotEqual(p.returncode, 0)
            self.assertLess(time.monotonic() - t0, 100)

    def test_a_bench_pass_past_its_bound_says_why_on_the_console(self):
        # a run said "TIMEOUT (exit 124): <reason>; see <log>", a bench pass only
        # "timeout 60.0s, 0 rows"
        with tempfile.TemporaryDirectory() as tmp:
            fake = os.path.join(tmp, "starring")  # lists -b in --help, else runs on
            with open(fake, "w") as f:
                f.write('#!/bin/sh\n[ "$2" = --help ] && { echo "  -b, --bytes"; exit 0; }\n'
                        'exec sleep 300\n')
            os.chmod(fake, 0o755)
            ini = os.path.join(tmp, "s.ini")
            with open(ini, "w") as f:
                f.write("[sweep]\ntimeout_s = 1\nreport = no\n[grid]\nworkers = 1\n"
                        "[bench b]\nnp = 1\nargs = -b 1K\n")
            out = os.path.join(tmp, "out")
            p = subprocess.run([sys.executable, os.path.join(REPO, "scripts", "sweep.py"), ini,
                                "--out", out, "--bin", fake, "--launcher", "env"],
                               capture_output=True, text=True, timeout=100)
            rows, _ = sr.read_jsonl(os.path.join(out, "bench.jsonl"))
        lines = [l for l in p.stdout.splitlines() if "bench b np=1" in l]
        self.assertEqual(len(lines), 1, p.stdout + p.stderr)
        self.assertRegex(lines[0], r"bench b np=1 \.\.\. TIMEOUT \(exit 124\): ran past its time "
                         r"bound of 1 s \(the sweep's timeout_s or --timeout\): stopped, SIGTERM "
                         r"to the whole job, which ended on it; see runs/s-bench-b-np1\.log "
                         r"\(\d+\.\ds, 0 rows\)")
        self.assertEqual([(r["status"], r["exit_code"]) for r in rows], [("timeout", 124)])
        self.assertIn("which ended on it", rows[0]["reason"])


if __name__ == "__main__":
    bin_main.main(sys.modules[__name__])
