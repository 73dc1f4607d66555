#!/usr/bin/env python3
"""What a user sees when `starring` is given bad input or a rank fails: the helpers and the
common checks of test_cli_input.py (bad flags, values, config and data), test_cli_outputs.py
(outputs, a failure to write them, interrupts), test_cli_faults.py (a rank killed, hung, silent or
far behind) and test_cli_stopped.py (a rank stopped where no --fault step reaches), each run as
`test_cli_*.py --bin build/bin/starring`.
Each case runs the real executable, alone or under scripts/mpirun.sh, and checks: a non-zero
exit (2 for bad input), one `starring: error:` line naming the problem (and the rank where one
rank failed), at most one short line from the launcher and none of Open MPI's banners, no
traceback / "terminate called" / crash report, an end well within the time bound, and no
half-written output file (only the documented `<metrics>.partial`; traces are whole JSON, or a
killed rank's `<trace>.partial`, which parses once its optional `]` is added).
scripts/mpirun_filter.py alone on canned Open MPI 4.1 output: test_mpirun_filter.py.
Small data: synthetic, a 16-unit MLP; the IDX cases use tiny files written here.
Most cases spend their time waiting (a stopped rank, --timeout, a straggler's sleeps): a class's
`overlap` says how many of its cases bin_main runs at once (see bin_main.py; the cases timed from
a fault against the job's own start-up run together, beside no other class's: `apart`)."""
import gzip
import json
import os
import re
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import threading
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(REPO, "scripts"))
import starring_results as sr  # noqa: E402
MPIRUN = os.path.join(REPO, "scripts", "mpirun.sh")
BIN = None  # set from --bin (bin_main.main's `shared`)

TINY = ["--dataset", "synthetic", "--synthetic-train", "512", "--synthetic-test", "64",
        "--synthetic-dim", "16", "--hidden", "16", "--epochs", "1", "--max-steps", "4",
        "--batch", "16", "--progress", "off"]
# Long enough that a fault at step 5 hits a run in progress.
LONG = ["--dataset", "synthetic", "--synthetic-train", "4096", "--synthetic-test", "64",
        "--synthetic-dim", "16", "--hidden", "16", "--epochs", "50", "--max-steps", "40",
        "--batch", "16", "--progress", "off"]
CRASH = ["Traceback", "terminate called", "Segmentation fault", "core dumped",
         "*** Process received signal", "MPI_ABORT was invoked", "-" * 74, "ORTE_ERROR_LOG",
         "Primary job", "[starring] error", ": error: [starring]"]


def ps1_run(consistency, timeout, *extra):
    """train: 2 workers, 1 dedicated server (np 3), `consistency`; long enough for faults."""
    return ["train", "--backend", "ps", "--servers", "1", "--consistency", consistency,
            "--timeout", str(timeout), *extra] + LONG


def with_opts(base, **kw):
    """`base` with --key values replaced (or added); underscores in keys become dashes."""
    out = list(base)
    for k, v in kw.items():
        flag = "--" + k.replace("_", "-")
        if flag in out:
            out[out.index(flag) + 1] = str(v)
        else:
            out += [flag, str(v)]
    return out


def idx(magic_dims, payload):
    magic, dims = magic_dims
    return struct.pack(">I", magic) + b"".join(struct.pack(">I", d) for d in dims) + payload


def write_idx_dir(path, n_train=64, n_labels=None, magic=0x803, cut=None, test_side=28, pixel=3):
    """Tiny Fashion-MNIST-shaped IDX files; pixels and labels a closed form of the index."""
    os.makedirs(path, exist_ok=True)
    n_labels = n_train if n_labels is None else n_labels
    for prefix, n, nl in (("train", n_train, n_labels), ("t10k", 16, 16)):
        side = 28 if prefix == "train" else test_side
        images = idx((magic if prefix == "train" else 0x803, (n, side, side)),
                     bytes((i * 7 + pixel) % 256 for i in range(n * side * side)))
        labels = idx((0x801, (nl,)), bytes(i % 10 for i in range(nl)))
        blob = gzip.compress(images)
        if cut and prefix == "train":
            blob = blob[:cut]
        with open(os.path.join(path, f"{prefix}-images-idx3-ubyte.gz"), "wb") as f:
            f.write(blob)
        with open(os.path.join(path, f"{prefix}-labels-idx1-ubyte.gz"), "wb") as f:
            f.write(gzip.compress(labels))


def rank_pid(folder, rank):
    """The pid of world rank `rank` among the starring processes running in `folder`, or None."""
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if (os.readlink(f"/proc/{pid}/cwd") != folder or
                    os.path.basename(os.readlink(f"/proc/{pid}/exe")) != "starring"):
                continue
            with open(f"/proc/{pid}/environ", "rb") as fh:
                if f"OMPI_COMM_WORLD_RANK={rank}".encode() in fh.read().split(b"\0"):
                    return int(pid)
        except OSError:
            pass
    return None


def run_stopping(argv, cwd, env, rank, ready, timeout, on_fault=lambda: None):
    """subprocess.run(argv) that stops world rank `rank` (SIGSTOP, from outside: alive and
    silent, as a debugger or a stopped job leaves it) once `ready(cwd)` is true, then calls
    `on_fault()`. Returns the CompletedProcess and the unix time of the SIGSTOP (None if it was
    never sent)."""
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            cwd=cwd, env=env)
    sent = []

    def stop():
        while proc.poll() is None:
            pid = rank_pid(cwd, rank) if ready(cwd) else None
            if pid:
                os.kill(pid, signal.SIGSTOP)
                sent.append(time.time())
                on_fault()
                return
            time.sleep(0.02)

    watcher = threading.Thread(target=stop, daemon=True)
    watcher.start()
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        stdout, stderr = proc.communicate()
    watcher.join(5)
    return (subprocess.CompletedProcess(argv, proc.returncode, stdout, stderr),
            sent[0] if sent else None)


ANNOUNCED = re.compile(r"(?:--fault .* at step \d+|STARRING_TEST_STOP at \S+) "
                       r"\(unix time ([0-9.]+)\)")


def run_announcing(argv, cwd, env, timeout, on_fault):
    """subprocess.run(argv) that calls `on_fault()` as soon as a line on its stderr announces a
    --fault or a STARRING_TEST_STOP (common/fault.h; scripts/mpirun_filter.py passes each line on
    as it comes). Returns the CompletedProcess."""
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            cwd=cwd, env=env)
    out, err = [], []

    def read_stderr():
        for line in proc.stderr:
            err.append(line)
            if ANNOUNCED.search(line):
                on_fault()

    readers = [threading.Thread(target=read_stderr, daemon=True),
               threading.Thread(target=lambda: out.append(proc.stdout.read()), daemon=True)]
    for r in readers:
        r.start()
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    for r in readers:
        r.join(5)
    return subprocess.CompletedProcess(argv, proc.returncode, "".join(out), "".join(err))


def gate_entered(gate):
    """Acquires `gate` (a semaphore) and returns the function that releases it, at most once
    however many threads call it."""
    gate.acquire()
    lock, held = threading.Lock(), [True]

    def leave():
        with lock:
            if held[0]:
                held[0] = False
                gate.release()
    return leave


def trained_a_step(rank):
    """ready() for run_stopping: world rank `rank`'s streamed trace has a backward pass."""
    def ready(out):
        try:
            with open(os.path.join(out, f"t{rank}.json.partial")) as fh:
                return '"backward"' in fh.read()
        except OSError:
            return False
    return ready


def ranks_in(folder, wait=3.0):
    """starring processes still running in `folder` (their cwd) after `wait` s at most."""
    deadline = time.monotonic() + wait
    while True:
        left = []
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                if (os.readlink(f"/proc/{pid}/cwd") == folder and
                        os.path.basename(os.readlink(f"/proc/{pid}/exe")) == "starring"):
                    left.append(int(pid))
            except OSError:
                pass
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.1)


class CliCase(unittest.TestCase):
    """The common checks; a test module's classes derive from it."""
    overlap = 1  # how many of the class's cases run at once (bin_main.main)
    # With overlap: the class's cases timed from a fault (after_fault) start one at a time, each
    # once the one before has announced its fault (or ended), so that a job's start-up, the
    # control for the machine's load, is as long as it would be alone, while their waits
    # overlap: all at once, 5 start-ups together stretched each to 5 s at load 19 and so allowed
    # 5 s more after the fault than one alone would.
    staggered = False

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="starring_cli_")
        cls.startup_gate = threading.Semaphore(1)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def run_case(self, np, args, code=None, says=(), rank=None, bound=60, outputs=True,
                 killed=False, prepare=None, trained=False, preexec=None, after_fault=None,
                 stop_at=None, finished=False, hosts=None, sigstop=None, extra_env=None):
        """Runs starring (np 0: without mpirun) and checks what every failure must satisfy.
        `says`: substrings of the first error line, which is the launcher's when a rank was
        `killed` (it cannot speak for itself); a run that `trained` to the end leaves whole
        metrics. `prepare(out)` may plant files first. Returns (stderr, files left over).
        `bound`: seconds the whole run may take. `after_fault=(least, most)`: instead, the run
        announces a --fault and ends at least `least` s after that announcement (a timeout must
        not fire early) and at most `most` s after it plus as long again as the job took to get
        there: starting the job and its first steps is the control, measured in the same run,
        for how much the machine's load stretches a job (0.3-1.5 s idle, 6-12 s beside 12 busy
        loops on 2 cores, which stretched the part after the fault only from 6.6 to 8.3 s).
        `stop_at="WHERE:RANK"`: that rank stops itself (SIGSTOP) there (STARRING_TEST_STOP, see
        common/fault.h); a run `finished` that far left its whole summary and metrics.
        `hosts="0,1"`: the ranks take themselves for ranks of those test hosts (STARRING_TEST_HOSTS,
        common/test_hosts.h), as on a cluster.
        `sigstop=(RANK, ready)`: the test stops that world rank itself (SIGSTOP) once `ready(out)`
        (mid-training, where no stop point is); `after_fault` then times from that signal.
        `extra_env`: variables added to the job's environment (STARRING_MPI_ARGS: another
        transport).
        """
        # Open MPI 4.1's mpirun itself sometimes segfaults (PMIx_server_finalize) as it stops a job
        # with a stopped rank, after the program's own line: its bug, not the program's, shown as
        # one line by mpirun_filter.py; such a run is made again (at most twice).
        for attempt in range(3):
            out = tempfile.mkdtemp(dir=self.tmp)
            argv = ([BIN] if np == 0 else [MPIRUN, "-np", str(np), BIN]) + list(args)
            if outputs and args and args[0] == "train":
                argv += ["--metrics-file", f"{out}/m.jsonl", "--summary-file", f"{out}/s.json",
                         "--trace", f"{out}/t%r.json"]
            planted = set(os.listdir(out))
            if prepare:
                planted = prepare(out)
            env = dict(os.environ, **(extra_env or {}))
            if stop_at:
                env["STARRING_TEST_STOP"] = stop_at
            if hosts:
                env["STARRING_TEST_HOSTS"] = hosts
            limit = bound + 30 if after_fault is None else 120
            stopped = None
            gated = self.staggered and after_fault is not None
            leave = gate_entered(self.startup_gate) if gated else lambda: None
            # after the gate's wait; the fault's announcement is in the host's wall clock
            # (common/fault.h)
            t0, wall0 = time.monotonic(), time.time()
            try:
                if sigstop:
                    p, stopped = run_stopping(argv, out, env, sigstop[0], sigstop[1], limit,
                                              leave)
                elif gated:
                    p = run_announcing(argv, out, env, limit, leave)
                else:
                    p = subprocess.run(argv, capture_output=True, text=True, cwd=out,
                                       preexec_fn=preexec, env=env, timeout=limit)
            finally:
                leave()  # no fault announced (or not seen): the next start-up may go
            took, wall1 = time.monotonic() - t0, time.time()
            if "mpirun: crashed itself" not in p.stderr or attempt == 2:
                break
        text = p.stdout + p.stderr
        where = f"\n$ {' '.join(argv)}\nexit {p.returncode}\n{text}"
        if after_fault is None:
            self.assertLess(took, bound, where)
        else:
            at = ANNOUNCED.search(p.stderr)
            if sigstop:
                self.assertIsNotNone(stopped, where + "\n(the test's SIGSTOP was never sent)")
                at = [None, stopped]
            self.assertTrue(at, where)
            startup, after = float(at[1]) - wall0, wall1 - float(at[1])
            where += f"\nstart-up (launch to fault) {startup:.1f} s, after the fault {after:.1f} s"
            # the margins, in the log of a run that passed too (cases run a few at once)
            print(f"{self.id()}: start-up {startup:.1f} s, after the fault {after:.1f} s "
                  f"(allowed {after_fault[0]}-{after_fault[1] + startup:.1f})", flush=True)
            self.assertGreaterEqual(after, after_fault[0], where)
            self.assertLess(after, after_fault[1] + startup, where)
        self.assertNotEqual(p.returncode, 0, where)
        if code is not None:
            self.assertEqual(p.returncode, code, where)
        for bad in CRASH:
            self.assertNotIn(bad, text, where)
        self.assertEqual(ranks_in(out), [], where)  # none outlives mpirun (a stopped one too)
        head = "mpirun: job stopped: " if killed else "starring: error: "
        errors = [l for l in p.stderr.splitlines() if l.startswith(head)]
        self.assertTrue(errors, where)
        if code == 2:  # bad input is agreed on before any communication: one line, from one rank
            self.assertEqual(len(errors), 1, where)
        first = errors[0]
        for s in says:
            self.assertIn(s, first, where)
        if rank is not None:
            self.assertIn(f"rank {rank}", first, where)
        launcher = [l for l in p.stderr.splitlines() if l.startswith("mpirun")]
        self.assertLessEqual(len(launcher), 1, where)
        if launcher and not killed:  # the program's line comes first
            lines = p.stderr.splitlines()
            self.assertLess(lines.index(first), lines.index(launcher[0]), where)
        files = sorted(set(os.listdir(out)) - set(planted))
        for f in files:  # nothing half-written: the documented .partial, or whole files
            self.assertFalse(".tmp" in f or f.startswith(".starring-write-test"), where + str(files))
            if f.endswith(".json"):
                with open(os.path.join(out, f)) as fh:
                    json.load(fh)
            if f.endswith(".json.partial"):  # a killed rank's streamed trace: Chrome's JSON
                # Array Format, its ']' left out, or one killed while it was being completed in
                # place (common/trace.cc finish()): the report's reader takes all three
                self.assertTrue(sr.read_trace_events(os.path.join(out, f)), where + f)
        if finished:
            self.assertIn("s.json", files, where)
            self.assertIn("m.jsonl", files, where)
        else:
            self.assertNotIn("s.json", files, where)
        if trained or finished:
            with open(os.path.join(out, "m.jsonl")) as fh:
                self.assertTrue([json.loads(l) for l in fh], where)
        else:
            self.assertNotIn("m.jsonl", files, where)
        return p.stderr, files

    def run_killed(self, np, args, rank, extra_env=None):
        """`args` kill world rank `rank`: the launcher names it, killed by signal 9, within 30 s."""
        return self.run_case(np, args, None, [f"rank {rank}", "killed by signal 9"], killed=True,
                             after_fault=(0, 30), extra_env=extra_env)

    def run_to_the_end(self, np, args, *, steps):
        """`args` (a train command line) on `np` ranks for `steps` steps, with a summary file: it
        exits 0 and each of the two workers trains every step. Returns (seconds it took, the
        command and its output for messages, the summary's worker rows, the summary)."""
        out = tempfile.mkdtemp(dir=self.tmp)
        argv = [MPIRUN, "-np", str(np), BIN] + with_opts(args, max_steps=steps,
                                                         summary_file=f"{out}/s.json")
        t0 = time.monotonic()
        p = subprocess.run(argv, capture_output=True, text=True, cwd=out, timeout=90)
        took = time.monotonic() - t0
        where = f"\n$ {' '.join(argv)}\nexit {p.returncode} after {took:.1f} s\n" \
                f"{p.stdout}{p.stderr}"
        self.assertEqual(p.returncode, 0, where)
        with open(f"{out}/s.json") as fh:
            s = json.load(fh)
        workers = [r for r in s["ranks"] if r["role"] == "worker"]
        self.assertEqual([r["steps"] for r in workers], [steps, steps], where)
        return took, where, workers, s

    def run_ps1_to_the_end(self, consistency, timeout, *extra, steps):
        """run_to_the_end of ps1_run(consistency, timeout, *extra): 2 workers, 1 server."""
        return self.run_to_the_end(3, ps1_run(consistency, timeout, *extra), steps=steps)
