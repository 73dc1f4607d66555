"""Launching one job of a sweep (scripts/sweep.py): under `timeout`, output to a log file, and
stopped with it on Ctrl-C. Standard library only."""
import os
import shlex
import signal
import subprocess
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def tail(path, lines=25):
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return "".join(f.readlines()[-lines:])
    except OSError:
        return ""


def launch(np_, argv, log_path, ctx):
    """Runs `launcher argv` under `timeout`; returns (exit code, status, elapsed s, command)."""
    launcher = shlex.split(ctx["launcher"].format(np=np_))
    cmd = ["timeout", "-k", "15", str(int(float(ctx["timeout_s"])))] + launcher + argv
    start = time.monotonic()
    with open(log_path, "w", encoding="utf-8") as log:
        log.write("$ " + shlex.join(cmd) + "\n")
        log.flush()
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=REPO)
        try:
            rc = proc.wait()
        except KeyboardInterrupt:
            stop_job(proc)
            raise
    elapsed = time.monotonic() - start
    # `timeout` exits 124 (or 137 after -k); a job whose rank was killed by SIGKILL exits 137
    # too, long before the bound.
    timed_out = rc in (124, 137) and elapsed >= float(ctx["timeout_s"]) - 1.0
    status = "ok" if rc == 0 else ("timeout" if timed_out else "failed")
    return rc, status, elapsed, shlex.join(cmd)


def stop_job(proc):
    """Ctrl-C: `timeout` runs the job in a process group of its own, which the terminal's SIGINT
    does not reach, and killing `timeout` (what subprocess.run does) left mpirun and its ranks
    running to the end. SIGINT to `timeout` is passed on to mpirun, which stops the ranks; a job
    still there after 15 s (or a second Ctrl-C) is killed, its whole group."""
    try:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=15)
        return
    except subprocess.TimeoutExpired:
        pass
    except KeyboardInterrupt:  # a second Ctrl-C: do not wait any longer
        pass
    # `timeout` leads the group: SIGKILL to it alone left the job running with no bound at all.
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:  # `timeout` has not made its group yet
        proc.kill()
    proc.wait()
