#!/usr/bin/env python3
"""What Ctrl-C does to the sweep driver (scripts/sweep.sh) and its jobs:
  test_sweep_interrupt.py --bin build/bin/starring
Ctrl-C in a terminal stops the sweep and the run in progress (no traceback, no process left,
the stopped run not recorded) and says where the results are; a second Ctrl-C while a job
ignores the first kills the job's whole process group (scripts/sweep_jobs.py stop_job).
The rest of the driver: test_sweep.py.
"""
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import unittest

import bin_main
from sweep_ini import small_sweep

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
SWEEP = os.path.join(REPO, "scripts", "sweep.sh")
sys.path.insert(0, os.path.join(REPO, "scripts"))
import starring_results as sr  # noqa: E402
import sweep_jobs  # noqa: E402

BIN = None  # set from --bin


def processes_left(out, within=3.0):
    """The processes whose command line names `out` still there `within` seconds from now (the
    pgrep lines; empty as soon as none is left: the stopped job's processes have that long)."""
    deadline = time.monotonic() + within
    while True:
        left = subprocess.run(["pgrep", "-f", out], capture_output=True, text=True).stdout
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.1)


class CtrlC(unittest.TestCase):
    def test_ctrl_c_stops_the_job_and_says_where_the_results_are(self):
        # It was a Python traceback, and the run in progress went on to its end in the background
        # (`timeout` keeps the job in a process group of its own, out of the terminal's reach).
        rest = "[grid]\nworkers = 2\n\n[variant a]\nbackend = ring\n\n[variant b]\nbackend = ring\n"
        with tempfile.TemporaryDirectory(prefix="starring_sweep_test_") as tmp:
            ini = os.path.join(tmp, "sweep.ini")
            with open(ini, "w") as f:  # 5 ms a step on worker 0, 100000 steps: long enough
                f.write(small_sweep(120, "epochs = 100000\nmax-steps = 100000\nstraggler = 0:5",
                                    rest))
            out = os.path.join(tmp, "results")
            proc = subprocess.Popen([SWEEP, ini, "--out", out, "--bin", BIN, "--no-bench"],
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                    start_new_session=True)  # its own group, as in a terminal
            metrics = os.path.join(out, "runs", "sweep-001-a-w2", "metrics.jsonl.partial")
            deadline = time.monotonic() + 60
            while not os.path.exists(metrics) and time.monotonic() < deadline:
                time.sleep(0.1)
            time.sleep(0.5)
            os.killpg(proc.pid, signal.SIGINT)  # what Ctrl-C in a terminal does
            _, err = proc.communicate(timeout=60)
            self.assertEqual(proc.returncode, -signal.SIGINT, err)  # a calling script stops too
            self.assertNotIn("Traceback", err)
            self.assertIn("[sweep] interrupted (Ctrl-C)", err)
            self.assertIn(f"scripts/report.py {out}", err)
            left = processes_left(out)
            self.assertEqual(left, "", "processes of the stopped job still run")
            runs, _ = sr.read_jsonl(os.path.join(out, "runs.jsonl"))
            self.assertEqual(runs, [])  # the stopped run is not a result
            self.assertFalse(os.path.exists(os.path.join(out, "runs", "sweep-002-b-w2")))
            # what the stopped run left, named: its folder and files (its metrics' .partial)
            self.assertIn("its folder runs/sweep-001-a-w2 is kept with ", err)
            self.assertIn("metrics.jsonl.partial", err)

    def test_sigterm_stops_the_job_as_ctrl_c_does(self):
        # A batch system's SIGTERM (or `timeout N scripts/sweep.sh`) to the driver alone: it
        # died at once without a word, and the run in progress went on to its end, orphaned.
        rest = "[grid]\nworkers = 2\n\n[variant a]\nbackend = ring\n"
        with tempfile.TemporaryDirectory(prefix="starring_sweep_test_") as tmp:
            ini = os.path.join(tmp, "sweep.ini")
            with open(ini, "w") as f:
                f.write(small_sweep(120, "epochs = 100000\nmax-steps = 100000\nstraggler = 0:5",
                                    rest))
            out = os.path.join(tmp, "results")
            proc = subprocess.Popen([SWEEP, ini, "--out", out, "--bin", BIN, "--no-bench"],
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                    start_new_session=True)
            metrics = os.path.join(out, "runs", "sweep-001-a-w2", "metrics.jsonl.partial")
            deadline = time.monotonic() + 60
            while not os.path.exists(metrics) and time.monotonic() < deadline:
                time.sleep(0.1)
            time.sleep(0.5)
            proc.send_signal(signal.SIGTERM)  # the driver alone, not its group
            try:
                _, err = proc.communicate(timeout=60)
            finally:
                left = processes_left(out)
                for pid in left.split():  # an orphaned job's group (`timeout` leads it)
                    try:
                        os.killpg(os.getpgid(int(pid)), signal.SIGKILL)
                    except ProcessLookupError:
                        pass
            self.assertEqual(proc.returncode, -signal.SIGTERM, err)
            self.assertNotIn("Traceback", err)
            self.assertIn("[sweep] interrupted (SIGTERM)", err)
            self.assertIn("its folder runs/sweep-001-a-w2 is kept with ", err)
            self.assertEqual(left, "", "processes of the stopped job still run")
            runs, _ = sr.read_jsonl(os.path.join(out, "runs.jsonl"))
            self.assertEqual(runs, [])

    def test_ctrl_c_just_after_a_run_ended_records_that_run(self):
        # Ctrl-C while the driver wrote up a run that had ended (here: as it measured the other
        # load of the job's time, right after the job): that run's folder stayed, unrecorded, and
        # the driver said "a job in progress was stopped". It is recorded, then the sweep stops.
        rest = "[grid]\nworkers = 2\n\n[variant a]\nbackend = ring\n\n[variant b]\nbackend = ring\n"
        with tempfile.TemporaryDirectory(prefix="starring_sweep_test_") as tmp:
            ini = os.path.join(tmp, "sweep.ini")
            with open(ini, "w") as f:
                f.write(small_sweep(120, "epochs = 1\nmax-steps = 2", rest))
            out = os.path.join(tmp, "results")
            # the sweep driver with Ctrl-C arriving at the first job's end (SIGINT to itself)
            driver = ("import os, signal, sys; sys.path.insert(0, sys.argv[1]); import sweep_jobs\n"
                      "cpus = sweep_jobs.OtherLoad.cpus\n"
                      "def ctrl_c(self):\n"
                      "    os.kill(os.getpid(), signal.SIGINT)\n"
                      "    return cpus(self)\n"
                      "sweep_jobs.OtherLoad.cpus = ctrl_c\n"
                      "import sweep\nsys.exit(sweep.main(sys.argv[2:]))\n")
            p = subprocess.run([sys.executable, "-c", driver, os.path.join(REPO, "scripts"), ini,
                                "--out", out, "--bin", BIN, "--no-bench"],
                               capture_output=True, text=True, timeout=120)
            self.assertEqual(p.returncode, -signal.SIGINT, p.stderr)
            self.assertNotIn("Traceback", p.stderr)
            runs, _ = sr.read_jsonl(os.path.join(out, "runs.jsonl"))
            self.assertEqual([(r["run_id"], r["status"]) for r in runs],
                             [("sweep-001-a-w2", "ok")], p.stderr)
            self.assertIn("[sweep] interrupted (Ctrl-C): no job was running; 1 run(s)", p.stderr)
            self.assertNotIn("stopped", p.stderr)
            self.assertFalse(os.path.exists(os.path.join(out, "runs", "sweep-002-b-w2")))


def live_members(pgid):
    """Processes of group `pgid` that are not zombies (from /proc)."""
    live = []
    for d in os.listdir("/proc"):
        try:
            with open(f"/proc/{d}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()  # state ppid pgrp ...
        except (OSError, IndexError):
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            live.append(int(d))
    return live


def kill_group(proc):
    """SIGKILL what is left of `proc`'s group and reap `proc` (a test's clean-up); only while
    `proc`, the group's leader, is unreaped: its pid may be another's once it has been."""
    if proc.returncode is None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    proc.wait()


class StopJob(unittest.TestCase):
    def test_a_process_that_outlives_the_launcher_is_waited_for(self):
        # mpirun can exit before its ranks (one outlived it by 0.35 s): stop_job returned, and
        # the stop message listed the folder while a rank still wrote its files (a
        # 'metrics.jsonl.partial' that became metrics.jsonl and summary.json after the sweep
        # ended). Here the job's launcher exits on SIGINT at once while its child, which
        # ignores it, writes a file 1 s later: the file must be there when stop_job returns.
        with tempfile.TemporaryDirectory(prefix="starring_stop_test_") as tmp:
            done = os.path.join(tmp, "done")
            job = (f"sh -c \"trap '' INT; sleep 1; touch {done}\" & "
                   "trap 'exit 130' INT; while :; do sleep 0.05; done")
            sweep_jobs.adopt_orphans()  # as launch() does: the child becomes ours when sh ends
            proc = subprocess.Popen(["timeout", "-k", "100", "100", "sh", "-c", job])
            try:
                deadline = time.monotonic() + 10
                while len(live_members(proc.pid)) < 4 and time.monotonic() < deadline:
                    time.sleep(0.01)  # timeout, sh, the child's sh, its sleep
                sweep_jobs.stop_job(proc)
                self.assertTrue(os.path.exists(done), "stop_job returned before the job's end")
                self.assertEqual(live_members(proc.pid), [])
            finally:
                kill_group(proc)

    def test_a_second_ctrl_c_kills_the_whole_job(self):
        # A job that ignores the SIGINT `timeout` passes on (a rank stuck in a hook) and a user who
        # presses Ctrl-C again: SIGKILL to `timeout` alone left the job running with no bound.
        proc = subprocess.Popen(["timeout", "-k", "100", "100", "sh", "-c",
                                 "trap '' INT; sleep 100 & wait"])
        try:
            deadline = time.monotonic() + 10
            while os.getpgid(proc.pid) != proc.pid and time.monotonic() < deadline:
                time.sleep(0.01)  # `timeout` makes its own group first thing
            while len(live_members(proc.pid)) < 3 and time.monotonic() < deadline:
                time.sleep(0.01)
            self.assertEqual(len(live_members(proc.pid)), 3)  # timeout, sh, sleep
            second = threading.Timer(1.0, os.kill, (os.getpid(), signal.SIGINT))
            second.start()
            sweep_jobs.stop_job(proc)  # sends SIGINT, waits; the second Ctrl-C comes meanwhile
            second.join()
            deadline = time.monotonic() + 10
            while live_members(proc.pid) and time.monotonic() < deadline:
                time.sleep(0.05)
            self.assertEqual(live_members(proc.pid), [], "processes of the stopped job still run")
        finally:
            kill_group(proc)



if __name__ == "__main__":
    bin_main.main(sys.modules[__name__])
