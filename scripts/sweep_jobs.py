"""Launching the jobs of a sweep (scripts/sweep.py): one job under `timeout`, output to a log
file, stopped with it on Ctrl-C; a `starring bench` pass and its JSON rows; scripts/report.py
after the sweep; the --launcher check; the sweep's flags against `starring COMMAND --help`; and
the facts about this host every record carries. Standard library and starring_results only."""
import ctypes
import datetime
import json
import os
import re
import resource
import shlex
import shutil
import signal
import subprocess
import sys
import time

import starring_results as sr

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# train flags run_train passes itself
DRIVER_FLAGS = {"summary-file", "metrics-file", "run-name", "trace"}


def tail(path, lines=25):
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return "".join(f.readlines()[-lines:])
    except OSError:
        return ""


def host_busy_s():
    """CPU seconds this host's CPUs have been busy since boot (/proc/stat: all but idle and
    iowait; guest time is inside user time already; steal time, which a virtual machine's
    hypervisor gave to other guests, counts as busy), or None where there is no /proc/stat."""
    try:
        with open("/proc/stat", encoding="ascii") as f:
            v = [int(x) for x in f.readline().split()[1:]]
        return (sum(v[:8]) - v[3] - v[4]) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


def own_cpu_s():
    """CPU seconds of this process's finished jobs (mpirun and its ranks, once waited for, and
    the job's orphans reap_orphans waited for)."""
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def adopt_orphans():
    """Makes this process the parent of its descendants whose own parent ends first (Linux
    prctl PR_SET_CHILD_SUBREAPER; elsewhere nothing happens), so that reap_orphans can wait for
    them and their CPU time counts as the job's own: scripts/mpirun.sh's stderr filter
    (mpirun_filter.py, 0.09-0.10 s of CPU time per job here, most of it Python's start) runs in
    a process substitution that nobody waits for, and a rank that outlives mpirun is no one's."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0)  # 36: PR_SET_CHILD_SUBREAPER
    except (OSError, AttributeError):
        pass


def reap_orphans(wait_s=5.0):
    """Waits up to wait_s for the finished job's orphans (adopt_orphans) to end, reaping each:
    the filter ends as soon as mpirun's stderr closes (0.00-0.02 s after mpirun here). Only for
    when the job's own process has been waited for: any child of this process then is one of
    its orphans (the sweep runs one job at a time)."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:  # none left
            return
        if pid == 0:  # some still running
            if time.monotonic() >= deadline:
                return
            time.sleep(0.01)


class OtherLoad:
    """How many of the host's CPUs processes other than the job kept busy while it ran (the
    host's busy CPU time minus the job's own, over the wall time): a shared machine's load,
    which the job's wall-clock figures include, and a virtual machine's steal time. cpus()
    after launch() has returned (the job and its orphans waited for)."""

    def __init__(self):
        self.busy0, self.own0, self.t0 = host_busy_s(), own_cpu_s(), time.monotonic()

    def cpus(self):
        busy, wall = host_busy_s(), time.monotonic() - self.t0
        if busy is None or self.busy0 is None or wall <= 0:
            return None
        other = (busy - self.busy0) - (own_cpu_s() - self.own0)
        return round(max(0.0, other) / wall, 2)


def other_load_words(rec):
    """'  [other work on the host: 1.4 of 2 CPUs]' when other processes kept over a quarter of
    the host's CPUs busy during the job, else ''."""
    other, ncpu = rec.get("host_other_cpus"), rec.get("cores") or 1
    if other is None or other <= 0.25 * ncpu:
        return ""
    return f"  [other work on the host: {other:.1f} of {ncpu} CPUs]"


def launch(np_, argv, log_path, ctx):
    """Runs `launcher argv` under `timeout`; returns (exit code, status, elapsed s, command).
    At the bound, `timeout` sends SIGTERM to the job's process group (mpirun, its ranks, the
    launcher's filter) and SIGKILL kill_after_s later to what is left; after the job's end, what
    of it outlives ORPHAN_GRACE_S is killed (kill_leftovers) and named in the log, as is the
    bound a timed-out job ran past (status "timeout": 124, or 137 after the SIGKILL).
    Ctrl-C while the job runs stops it (KeyboardInterrupt); from the job's end on, Ctrl-C is held
    until its record is written (defer_ctrl_c): a job that ran to its end is a result."""
    if ctx.get("ctrl_c"):  # held since the previous job (a recovery run's next leg)
        raise KeyboardInterrupt
    launcher = shlex.split(ctx["launcher"].format(np=np_))
    bound = int(float(ctx["timeout_s"]))
    kill_after = str(ctx.get("kill_after_s", KILL_AFTER_S))
    cmd = ["timeout", "-k", kill_after, str(bound)] + launcher + argv
    start = time.monotonic()
    with open(log_path, "w", encoding="utf-8") as log:
        log.write("$ " + shlex.join(cmd) + "\n")
        log.flush()
        signal.signal(signal.SIGINT, signal.default_int_handler)
        adopt_orphans()
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=REPO)
        try:
            rc = proc.wait()
        except KeyboardInterrupt:
            if proc.returncode is None:  # still running: stopped, not a result
                stop_job(proc)
                raise
            rc = proc.returncode  # it had ended by itself: record it, then stop
            ctx["ctrl_c"] = True
        defer_ctrl_c(ctx)
    elapsed = time.monotonic() - start
    reap_orphans(ORPHAN_GRACE_S)
    killed = kill_leftovers(proc.pid)
    # `timeout` exits 124 once the job has ended on its SIGTERM. A job still there -k seconds
    # later gets SIGKILL, which `timeout` sends to its whole group, itself included: -9 here
    # (137 in a shell), recorded as 137; it was called "failed". A job whose rank was killed by
    # SIGKILL exits 137 too, long before the bound.
    if rc == -signal.SIGKILL:
        rc = 128 + signal.SIGKILL
    timed_out = rc in (124, 137) and elapsed >= bound - 1.0
    if timed_out or killed:
        with open(log_path, "a", encoding="utf-8") as log:
            if timed_out:
                log.write(f"[sweep] {timeout_reason(ctx, rc)}\n")
            if killed:
                log.write(f"[sweep] {len(killed)} process(es) of the job outlived it by "
                          f"{ORPHAN_GRACE_S:.0f} s and were killed: {', '.join(killed)}\n")
    status = "ok" if rc == 0 else ("timeout" if timed_out else "failed")
    return rc, status, elapsed, shlex.join(cmd)


# `timeout -k`: the seconds between the SIGTERM at the bound and the SIGKILL, and the seconds a
# finished job's leftovers get before kill_leftovers (reap_orphans' wait in launch)
KILL_AFTER_S = 15
ORPHAN_GRACE_S = 5.0


def timeout_reason(ctx, exit_code):
    """A record's `reason` for a job stopped at its time bound, by how it ended: 124, on the
    SIGTERM (`timeout` exits so once the job's own process has ended); 137, by the SIGKILL
    kill_after_s later (it said so for both)."""
    bound = (f"ran past its time bound of {float(ctx['timeout_s']):g} s (the sweep's timeout_s "
             "or --timeout): stopped, SIGTERM to the whole job")
    if exit_code == 128 + signal.SIGKILL:
        return (f"{bound}, still there {ctx.get('kill_after_s', KILL_AFTER_S)} s later: "
                "SIGKILL to what was left")
    return f"{bound}, which ended on it"


def timeout_words(exit_code, reason, log_file):
    """The console's words for a run or bench pass recorded as a timeout."""
    return f"TIMEOUT (exit {exit_code}): {reason}; see {log_file}"


def own_processes():
    """{pid: (name, state, parent pid, process group)} of this process's descendants, its
    unreaped (zombie) children among them, read from /proc; {} without /proc. The job's
    processes are all here once `timeout` has ended: their parents are in the job, or they were
    orphaned and adopt_orphans made them ours."""
    procs = {}
    try:
        entries = os.listdir("/proc")
    except OSError:
        return procs
    for d in entries:
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat", encoding="utf-8", errors="replace") as f:
                stat = f.read()
            name, rest = stat[stat.index("(") + 1:stat.rindex(")")], stat.rsplit(")", 1)[1]
            state, ppid, pgrp = rest.split()[:3]
            procs[int(d)] = (name, state, int(ppid), int(pgrp))
        except (OSError, ValueError):
            continue
    ours, todo = {}, [os.getpid()]
    while todo:
        parent = todo.pop()
        for pid, p in procs.items():
            if p[2] == parent and pid not in ours:
                ours[pid] = p
                todo.append(pid)
    return ours


def kill_leftovers(pgid):
    """SIGKILLs what is left of a finished job after reap_orphans' grace (launch): a rank that
    ignored the SIGTERM at the time bound, or hung in its handler, outlived mpirun and
    `timeout` (which then exited 124 and sent no SIGKILL), and ran on beside the next runs, no
    one's. Only when the job's own process has been waited for and the sweep runs one job at
    a time (any descendant of this process is one of the job's). Returns 'PID (NAME)' of those
    killed.
    `timeout` (pid `pgid`, the group's leader) has been reaped: its pid, and the group's id
    once no member is left, may be another's already (ids wrap at pid_max). Signals go only to
    this process's unreaped children, whose pids cannot be reused, and to group `pgid` only
    while one of them is in it (a group keeps its id while it has a member); a killed child's
    children become ours and are found the next round."""
    killed = []
    for _ in range(10):
        ours = own_processes()
        live = {pid: p for pid, p in ours.items() if p[1] not in ("Z", "X")}
        if not live:
            break
        killed += [f"{pid} ({p[0]})" for pid, p in sorted(live.items())
                   if f"{pid} ({p[0]})" not in killed]
        children = {pid: p for pid, p in ours.items() if p[2] == os.getpid()}
        if any(p[3] == pgid for p in children.values()):
            try:  # ranks under a living mpirun, in one go
                os.killpg(pgid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        for pid, p in children.items():
            if p[1] not in ("Z", "X"):
                try:
                    os.kill(pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
        reap_orphans(1.0)
    return killed


def defer_ctrl_c(ctx):
    """From here until end_deferral(ctx), Ctrl-C only sets ctx["ctrl_c"]: a finished job's record
    is written whole (Ctrl-C just after a run's end left its folder behind, unrecorded)."""
    signal.signal(signal.SIGINT, lambda *_: ctx.__setitem__("ctrl_c", True))


def end_deferral(ctx):
    """Ctrl-C stops the sweep again; one held since defer_ctrl_c is raised now."""
    signal.signal(signal.SIGINT, signal.default_int_handler)
    if ctx.pop("ctrl_c", False):
        raise KeyboardInterrupt


def stopped_job_words(path, out):
    """What the stopped job left: its folder (or bench log) and the files in it; an empty folder
    is removed."""
    if not path or not os.path.exists(path):
        return "a job in progress was stopped and is not recorded"
    rel = os.path.relpath(path, out)
    if os.path.isdir(path):
        files = sorted(os.listdir(path))
        if not files:
            os.rmdir(path)
            return "a job in progress was stopped and is not recorded"
        partial = " (.partial: the steps it made, unfinished)" if any(
            f.endswith(".partial") for f in files) else ""
        return (f"a job in progress was stopped and is not recorded; its folder {rel} is kept "
                f"with {', '.join(files)}{partial}")
    return f"a job in progress was stopped and is not recorded; its log {rel} is kept"


def stop_job(proc):
    """Ctrl-C: `timeout` runs the job in a process group of its own, which the terminal's SIGINT
    does not reach, and killing `timeout` (what subprocess.run does) left mpirun and its ranks
    running to the end. SIGINT to `timeout` is passed on to mpirun, which stops the ranks; a job
    still there after 15 s (or a second Ctrl-C) is killed, its whole group. Ranks that outlive
    mpirun are waited for (5 s), then killed: the job is over when this returns."""
    try:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=15)
        # mpirun can end before its ranks (one outlived it by 0.35 s here): they are this
        # process's orphans (adopt_orphans), still writing the files the stop message lists
        reap_orphans(5.0)
    except subprocess.TimeoutExpired:
        pass
    except KeyboardInterrupt:  # a second Ctrl-C: do not wait any longer
        pass
    # `timeout` leads the group: SIGKILL to it alone left the job running with no bound at all.
    # While it is unreaped its pid, the group's id, is no one else's.
    if proc.returncode is None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:  # `timeout` has not made its group yet
            proc.kill()
        proc.wait()
    # Once it has ended, what is left of the job (a rank past the 5 s) is killed the same way
    # as after a job's end: its pid may be another's by now (kill_leftovers)
    kill_leftovers(proc.pid)


# ---- a bench pass, the report ---------------------------------------------------------------

def repeat_suffix(ctx, rep):
    return f"-r{rep}" if ctx["repeats"] > 1 else ""


def bench_id_of(name, np_, ctx, rep=1):
    return f"{ctx['name']}-bench-{name}-np{np_}" + repeat_suffix(ctx, rep)


def run_bench(name, np_, args, ctx, rep=1):
    bench_id = bench_id_of(name, np_, ctx, rep)
    # bench_id stays as it is (rows of the same pass made again count as its repeats); the log
    # gets a name of its own
    log_path = os.path.join(ctx["out"], "runs",
                            sr.claim_unique_name(os.path.join(ctx["out"], "runs"), bench_id, ".log")
                            + ".log")
    ctx["job_files"] = log_path
    argv = [ctx["bin"], "bench", "--json"] + shlex.split(args)
    load = OtherLoad()
    rc, status, elapsed, cmd = launch(np_, argv, log_path, ctx)
    # bench_args and quick: what the pass ran, so that --resume makes a pass of other args again
    extra = {"sweep": ctx["name"], "bench_id": bench_id, "bench_args": args,
             "quick": ctx["quick"], "git": ctx["git"], "host": ctx["host"], "date": utc_now(),
             "cores": ctx["cores"], "oversubscribed": np_ > ctx["cores"],
             "repeat": rep, "repeats": ctx["repeats"], "host_other_cpus": load.cpus()}
    rows = []
    with open(log_path, encoding="utf-8", errors="replace") as f:
        for line in f:
            line = line.strip()
            if line.startswith("{"):
                try:
                    row = json.loads(line)
                except json.JSONDecodeError:
                    continue
                if isinstance(row, dict) and "bench" in row:
                    # a row that names its hosts was judged by the job itself, host by host;
                    # the driver knows only its own host's CPUs (np 4 on two hosts of 2 CPUs
                    # is not time-shared)
                    judged = {k: row[k] for k in ("cores", "oversubscribed")
                              if "hosts" in row and k in row}
                    row.update(extra)
                    row.update(judged)
                    rows.append(row)
    if status == "ok" and not rows:
        status = "failed"
    reason = timeout_reason(ctx, rc) if status == "timeout" else None
    if status != "ok":
        rows.append(dict(extra, status=status, exit_code=rc, np=np_, command=cmd,
                         elapsed_s=round(elapsed, 3), log_tail=tail(log_path),
                         **({"reason": reason} if reason else {})))
    for row in rows:
        sr.append_jsonl(os.path.join(ctx["out"], "bench.jsonl"), row)
    nrows = len([r for r in rows if "size" in r])
    # the console's line: a pass past its bound says why, as a run does (it said only
    # "timeout 60.0s, 0 rows")
    words = f"{status} {elapsed:.1f}s, {nrows} rows" if not reason else timeout_words(
        rc, reason, os.path.relpath(log_path, ctx["out"])) + f" ({elapsed:.1f}s, {nrows} rows)"
    return status, nrows, elapsed, words + other_load_words(extra)


def run_report(out, ctx):
    report = os.path.join(REPO, "scripts", "report.py")
    print(f"[sweep] report: {report} {out}", flush=True)
    rc = subprocess.run([sys.executable, report, out]).returncode
    if rc != 0:
        print(f"[sweep] report.py failed with exit code {rc}", file=sys.stderr)
    return rc


# ---- the host and the launcher --------------------------------------------------------------

def usage_error(message):
    """Bad input (a sweep file, an option): one line, exit 2, as `starring` does."""
    print(message, file=sys.stderr)
    sys.exit(2)


def utc_now():
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def git_commit():
    try:
        head = subprocess.run(["git", "-C", REPO, "rev-parse", "--short=12", "HEAD"],
                              capture_output=True, text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", REPO, "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True).stdout.strip()
        return head + ("+dirty" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def gpu_count():
    """GPUs a run on this host may use: those nvidia-smi lists (0 without a driver or device),
    no more than CUDA_VISIBLE_DEVICES names when it is set (CUDA reads it up to the first
    entry that is not a GPU: "" or "-1" hide them all)."""
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return 0
    if out.returncode != 0:
        return 0
    listed = sum(1 for line in out.stdout.splitlines() if line.startswith("GPU "))
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is None:
        return listed
    named = 0
    for entry in visible.split(","):
        if not entry.strip() or entry.strip().startswith("-"):
            break
        named += 1
    return min(listed, named)


def cores():
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def check_launcher(launcher, find_program=True):
    """--launcher before any run: a placeholder other than {np} was a KeyError traceback after
    the first run's folder was made, a program that is not there failed every run (exit 127)."""
    try:
        argv = shlex.split(launcher.format(np=1))
    except (KeyError, IndexError, ValueError) as e:
        usage_error(f"sweep: --launcher {launcher!r}: {e!r} (the only placeholder is {{np}})")
    # runs start in the repository (launch, above): a relative path is found from there
    prog = os.path.join(REPO, argv[0]) if argv and os.sep in argv[0] else (argv or [""])[0]
    if find_program and not (prog and shutil.which(prog)):
        usage_error(f"sweep: --launcher {launcher!r}: no program "
                    f"{argv[0] if argv else ''!r} on PATH")


def help_flags(binary, command):
    """The options `starring COMMAND --help` lists (long names, and one-letter ones), or None
    when the program cannot be run."""
    try:
        proc = subprocess.run([binary, command, "--help"], capture_output=True, text=True,
                              timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if proc.returncode != 0:
        return None
    return set(re.findall(r"--([a-z0-9][a-z0-9-]*)", proc.stdout)) | set(
        re.findall(r"(?:^|\s)-([a-z]),? ", proc.stdout))


def unknown_flags(binary, runs, benches):
    """One line per key of the sweep file that `starring train` (or, in a bench's args,
    `starring bench`) does not know; checked before anything runs, so a typo costs no sweep."""
    problems = []
    for r in runs:  # the driver gives every run these itself (twice, each run failed)
        for key in DRIVER_FLAGS.intersection(r["flags"]):
            line = (f"sweep: variant {r['variant']}: '{key}' is set by the sweep driver (each "
                    "run's files go to OUT/runs/<id>/; `trace = yes` in [sweep] for traces)")
            if line not in problems:
                problems.append(line)
    train = help_flags(binary, "train")
    if train:
        for r in runs:
            for key in r["flags"]:
                line = (f"sweep: variant {r['variant']}: '{key}' is not a `starring train` option "
                        "(see starring train --help)")
                if key not in train and line not in problems:
                    problems.append(line)
    bench = help_flags(binary, "bench")
    if bench:
        for name, b in benches.items():
            for tok in shlex.split(b.get("args", "")):
                flag = tok[2:].split("=")[0] if tok.startswith("--") else None
                if flag and flag not in bench:
                    problems.append(f"sweep: bench {name}: '--{flag}' is not a `starring bench` "
                                    "option (see starring bench --help)")
    return problems
