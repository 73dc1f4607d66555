#!/usr/bin/env python3
"""What a user sees when `starring` is given bad input or a rank fails:
  test_cli_errors.py --bin build/bin/starring
Each case runs the real executable, alone or under scripts/mpirun.sh, and checks: a non-zero
exit (2 for bad input), one `starring: error:` line naming the problem (and the rank where one
rank failed), at most one short line from the launcher and none of Open MPI's banners, no
traceback / "terminate called" / crash report, an end well within the time bound, and no
half-written output file (only the documented `<metrics>.partial`; traces are whole JSON, or a
killed rank's `<trace>.partial`, which parses once its optional `]` is added).
scripts/mpirun_filter.py alone on canned Open MPI 4.1 output: test_mpirun_filter.py.
Small data: synthetic, a 16-unit MLP; the IDX cases use tiny files written here.
"""
import glob
import gzip
import json
import os
import re
import resource
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import threading
import time
import unittest

import bin_main

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(REPO, "scripts"))
import starring_results as sr  # noqa: E402
MPIRUN = os.path.join(REPO, "scripts", "mpirun.sh")
BIN = None  # set from --bin

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


def write_idx_dir(path, n_train=64, n_labels=None, magic=0x803, cut=None, test_side=28):
    """Tiny Fashion-MNIST-shaped IDX files; pixels and labels a closed form of the index."""
    os.makedirs(path, exist_ok=True)
    n_labels = n_train if n_labels is None else n_labels
    for prefix, n, nl in (("train", n_train, n_labels), ("t10k", 16, 16)):
        side = 28 if prefix == "train" else test_side
        images = idx((magic if prefix == "train" else 0x803, (n, side, side)),
                     bytes((i * 7 + 3) % 256 for i in range(n * side * side)))
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


def run_stopping(argv, cwd, env, rank, ready, timeout):
    """subprocess.run(argv) that stops world rank `rank` (SIGSTOP, from outside: alive and
    silent, as a debugger or a stopped job leaves it) once `ready(cwd)` is true. Returns the
    CompletedProcess and the unix time of the SIGSTOP (None if it was never sent)."""
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            cwd=cwd, env=env)
    sent = []

    def stop():
        while proc.poll() is None:
            pid = rank_pid(cwd, rank) if ready(cwd) else None
            if pid:
                os.kill(pid, signal.SIGSTOP)
                sent.append(time.time())
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


class CliErrors(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="starring_cli_errors_")

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def run_case(self, np, args, code=None, says=(), rank=None, bound=60, outputs=True,
                 killed=False, prepare=None, trained=False, preexec=None, after_fault=None,
                 stop_at=None, finished=False, hosts=None, sigstop=None):
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
            # the fault's announcement is in the host's wall clock (common/fault.h)
            t0, wall0 = time.monotonic(), time.time()
            env = dict(os.environ)
            if stop_at:
                env["STARRING_TEST_STOP"] = stop_at
            if hosts:
                env["STARRING_TEST_HOSTS"] = hosts
            limit = bound + 30 if after_fault is None else 120
            stopped = None
            if sigstop:
                p, stopped = run_stopping(argv, out, env, sigstop[0], sigstop[1], limit)
            else:
                p = subprocess.run(argv, capture_output=True, text=True, cwd=out,
                                   preexec_fn=preexec, env=env, timeout=limit)
            took, wall1 = time.monotonic() - t0, time.time()
            if "mpirun: crashed itself" not in p.stderr or attempt == 2:
                break
        text = p.stdout + p.stderr
        where = f"\n$ {' '.join(argv)}\nexit {p.returncode}\n{text}"
        if after_fault is None:
            self.assertLess(took, bound, where)
        else:
            at = re.search(r"(?:--fault .* at step \d+|STARRING_TEST_STOP at \S+) "
                           r"\(unix time ([0-9.]+)\)", p.stderr)
            if sigstop:
                self.assertIsNotNone(stopped, where + "\n(the test's SIGSTOP was never sent)")
                at = [None, stopped]
            self.assertTrue(at, where)
            startup, after = float(at[1]) - wall0, wall1 - float(at[1])
            where += f"\nstart-up (launch to fault) {startup:.1f} s, after the fault {after:.1f} s"
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

    def run_killed(self, np, args, rank):
        """`args` kill world rank `rank`: the launcher names it, killed by signal 9, within 30 s."""
        return self.run_case(np, args, None, [f"rank {rank}", "killed by signal 9"], killed=True,
                             after_fault=(0, 30))

    def run_ps1_to_the_end(self, consistency, timeout, *extra, steps):
        """ps1_run(consistency, timeout, *extra) for `steps` steps, with a summary file: it exits
        0 and each worker trains every step. Returns (seconds it took, the command and its output
        for messages, the summary's worker rows, the summary)."""
        out = tempfile.mkdtemp(dir=self.tmp)
        argv = [MPIRUN, "-np", "3", BIN] + with_opts(ps1_run(consistency, timeout, *extra),
                                                     max_steps=steps, summary_file=f"{out}/s.json")
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

    # --- bad input: exit 2, one line, no MPI_Abort ------------------------------------------
    def test_unknown_flag(self):
        err, _ = self.run_case(0, ["train", "--bogus"] + TINY, 2, ["'--bogus'"])
        self.assertEqual(len(err.strip().splitlines()), 1, err)
        self.run_case(2, ["train", "--bogus"] + TINY, 2, ["'--bogus'"])

    def test_bad_values(self):
        self.run_case(2, ["train", "--lr", "-1"] + TINY, 2, ["--lr", "> 0", "-1"])
        self.run_case(2, ["train", "--backend", "ps", "--servers", "0"] + TINY, 2, ["--servers"])
        # a number beyond int, or no rank left for a worker: named, exit 2 (not std::stoi's text)
        self.run_case(2, ["train", "--backend", "ps", "--servers", "3000000000"] + TINY, 2,
                      ["--servers", "3000000000"])
        self.run_case(2, ["train", "--backend", "ps", "--servers", "2"] + TINY, 2,
                      ["--servers 2", "needs at least 3 ranks"])
        self.run_case(0, ["train"] + with_opts(TINY, hidden="0,5"), 2, ["--hidden", "width 1"])
        # options that would be ignored are refused: relaxed consistency outside the PS, a
        # fault on a rank that was not started
        self.run_case(2, ["train", "--backend", "ring", "--consistency", "asp"] + TINY, 2,
                      ["--consistency asp", "synchronous"])
        self.run_case(2, ["train", "--backend", "ring", "--fault", "kill:5:3"] + TINY, 2,
                      ["--fault kill:5:3", "no rank 5", "2 ranks"])
        # a stop request the run could not act on: nowhere to save it, under asp, or a
        # server's rank (RANK is a worker index); --resume auto with no folder to look in
        self.run_case(0, ["train", "--fault", "stop:0:2"] + TINY, 2,
                      ["--fault stop:0:2", "needs --checkpoint-dir"])
        ck = os.path.join(self.tmp, "ck-stop")
        self.run_case(3, ["train", "--backend", "ps", "--servers", "1", "--consistency", "asp",
                          "--checkpoint-dir", ck, "--fault", "stop:0:2"] + TINY, 2,
                      ["--fault stop:0:2", "asp"])
        self.run_case(3, ["train", "--backend", "ps", "--servers", "1", "--checkpoint-dir", ck,
                          "--fault", "stop:2:2"] + TINY, 2,
                      ["--fault stop:2:2", "worker's index", "2 workers"])
        self.run_case(0, ["train", "--resume", "auto"] + TINY, 2,
                      ["--resume auto", "needs --checkpoint-dir"])
        # a fault after the last step never fired
        self.run_case(0, ["train", "--fault", "hang:0:5"] + TINY, 2,
                      ["--fault hang:0:5", "--max-steps 4"])
        # ... nor after the last step of the last epoch (512 samples, 2 x 16 a step: 16 steps):
        # the run ended with exit 0 as if the fault had been survived
        self.run_case(2, ["train", "--backend", "ring", "--fault", "kill:1:17"]
                      + with_opts(TINY, max_steps=-1), 2, ["--fault kill:1:17", "16 steps"])
        # values that overflowed where they are converted: 'inf' s timed out at once
        self.run_case(2, ["train", "--backend", "ring", "--timeout", "inf"] + TINY, 2,
                      ["--timeout", "inf"])
        self.run_case(0, ["train", "--lr", "inf"] + TINY, 2, ["--lr", "finite", "inf"])
        # more threads than OpenBLAS runs (its MAX_THREADS, 64 here): capped without a word
        self.run_case(0, ["train", "--threads", "100000"] + TINY, 2,
                      ["--threads", "between 1 and", "MAX_THREADS", "100000"])
        # a straggler that outsleeps --timeout (alone, 0:99999999999 slept for years)
        self.run_case(0, ["train", "--straggler", "0:99999999999"] + TINY, 2,
                      ["--straggler 0:99999999999", "--timeout"])
        # a bench message no rank can hold: refused before rank 0 alone failed to allocate it
        # (the others sat at a barrier for minutes)
        self.run_case(2, ["bench", "--backends", "ring", "-b", "4", "-e", "65536G"], 2,
                      ["--max-bytes", "memory"])

    def test_a_size_the_code_rounds_is_a_note_not_an_error(self):
        # accepted, as nccl-tests and BytePS accept sizes they align, with one note from rank 0
        # saying what is used (common/config_use.cc size_notes); the run trains to its end
        for args, says in (
                (["--backend", "ps", "--servers", "colocated", "--ps-chunk-bytes", "1000001"],
                 "--ps-chunk-bytes 1000001 is used as 1000000 bytes"),
                (["--backend", "ring-p2p", "--segment-bytes", "1000"],
                 "--segment-bytes 1000 is used as 960 bytes")):
            with self.subTest(args=args):
                p = subprocess.run([MPIRUN, "-np", "2", BIN, "train"] + args + TINY,
                                   capture_output=True, text=True, timeout=90)
                self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
                notes = [l for l in p.stderr.splitlines() if l.startswith("[starring] note: ")]
                self.assertEqual(len(notes), 1, p.stderr)
                self.assertIn(says, notes[0])
                self.assertIn("the nearest valid values are", notes[0])
                self.assertIn("== StarRing train summary ==", p.stdout)

    def test_a_warm_up_as_long_as_the_run_is_a_note(self):
        # experiments/fmnist_mlp.ini's 100 warm-up steps in a run cut short: the rate never
        # reached the scaled one and the cosine never began, without a word
        p = subprocess.run([MPIRUN, "-np", "2", BIN, "train", "--backend", "ring", "--lr-scale",
                            "linear", "--warmup-steps", "100", "--lr-schedule", "cosine"] + TINY, capture_output=True, text=True,
                           timeout=90)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        notes = [l for l in p.stderr.splitlines() if l.startswith("[starring] note: ")]
        self.assertEqual(notes, ["[starring] note: --warmup-steps 100 is not shorter than the run "
                                 "(4 steps): the rate never reaches --lr x the --lr-scale linear "
                                 "factor, and the cosine decay never starts"], p.stderr)
        p = subprocess.run([MPIRUN, "-np", "2", BIN, "train", "--backend", "ring", "--lr-scale",
                            "linear", "--warmup-steps", "2"] + TINY,
                           capture_output=True, text=True, timeout=90)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        self.assertNotIn("note:", p.stderr)

    def test_model_beyond_memory(self):
        # refused before any allocation (the OOM killer ended such a run with no word); only
        # where a model under the 2^31-parameter cap can exceed memory
        memory = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        params = 1.5 * memory / 20  # the check counts 20 bytes a parameter
        if params > 2.0e9:
            self.skipTest(f"{memory / 2**30:.0f} GiB of memory holds every model under 2^31")
        widths = f"60000,{int(params / 60000) + 1}"

        def cap():  # a binary without the check fails to allocate instead of calling the OOM killer
            resource.setrlimit(resource.RLIMIT_AS, (memory // 2, memory // 2))
        self.run_case(0, ["train"] + with_opts(TINY, hidden=widths), 2,
                      ["--hidden", widths, "memory"], preexec=cap)

    def test_more_chunks_than_reply_tags(self):
        # a 16.9M-parameter model cut into 4-byte chunks: more chunks than the worker has reply
        # tags for (ps/protocol.h kMaxChunks, 15.7M); refused, not run with tags that collide
        widths = "4096,4096"
        self.run_case(0, ["train"] + with_opts(TINY, hidden=widths, backend="ps",
                                               servers="colocated", ps_chunk_bytes=4), 2,
                      ["16891914 parameter-server chunks", "more than the 15728624",
                       "raise --ps-chunk-bytes"])

    def test_config_files(self):
        ini = os.path.join(self.tmp, "bad.ini")
        with open(ini, "w") as f:
            f.write("[train]\nbatch = 16\nlearning_rate = 0.1\n")
        self.run_case(2, ["train", "--config", ini] + TINY, 2, [ini + ":3", "learning_rate"])
        self.run_case(1, ["train", "--config", ini + ".missing"] + TINY, 2,
                      ["--config", ini + ".missing"])
        # a folder opened as an empty file: every option silently stayed at its default
        self.run_case(0, ["train", "--config", self.tmp] + TINY, 2, ["--config", "is a folder"])
        # a bad value is named with its line (the parser's error had none); ';' after a value
        # starts a comment, as '#' does; --run-name is a key like any other (it was unknown)
        with open(ini, "w") as f:
            f.write("[train]\nrun-name = x ; a label\nmomentum = 0.5 ; sgd\nbatch = many\n")
        self.run_case(0, ["train", "--config", ini] + TINY[:-4], 2,
                      [ini + ":4", "'many'", "batch"])

    def test_commands(self):
        self.run_case(0, [], 2, ["no command"])
        self.run_case(2, ["frobnicate"], 2, ["unknown command 'frobnicate'"])
        self.run_case(2, ["bench", "--backends", "ring", "-b", "1X"], 2, ["--min-bytes", "1X"])
        # a training option that would do nothing in a benchmark is refused, not ignored
        self.run_case(0, ["bench", "--summary-file", "s.json"], 2, ["'--summary-file'"])
        self.run_case(0, ["bench-model", "--epochs", "3"], 2, ["'--epochs'"])
        # so is a sync option the benchmark would not use (they ran without it, exit 0)
        self.run_case(0, ["bench", "--backends", "ring", "--servers", "2"], 2,
                      ["--servers 2", "--backends is 'ring'"])
        self.run_case(2, ["bench", "--backends", "ps", "--consistency", "asp", "-b", "1K"], 2,
                      ["--consistency asp", "push-pull is synchronous"])

    def test_one_process_without_mpirun_is_noted(self):
        # a ring of one moves nothing: said once, for a run that goes ahead, not before a refusal
        note = "one process (not started by mpirun)"
        with tempfile.TemporaryDirectory() as tmp:
            p = subprocess.run([BIN, "train", "--backend", "ring"] + TINY, capture_output=True,
                               text=True, timeout=60, cwd=tmp)
            self.assertEqual(p.returncode, 0, p.stderr)
            self.assertEqual(p.stderr.count(note), 1, p.stderr)
            p = subprocess.run([BIN, "train", "--backend", "ps", "--servers", "1"] + TINY,
                               capture_output=True, text=True, timeout=60, cwd=tmp)
            self.assertEqual(p.returncode, 2, p.stderr)
            self.assertIn("--servers 1 needs at least 2 ranks", p.stderr)
            self.assertNotIn(note, p.stderr)
            p = subprocess.run([BIN, "train", "--backend", "local"] + TINY, capture_output=True,
                               text=True, timeout=60, cwd=tmp)
            self.assertEqual(p.returncode, 0, p.stderr)
            self.assertNotIn(note, p.stderr)
            # bench: after its backends are made (it came before '2 ranks, but only 1')
            sizes = ["-b", "1K", "-e", "1K", "-n", "1", "-w", "0"]
            p = subprocess.run([BIN, "bench", "--backends", "ring"] + sizes, capture_output=True,
                               text=True, timeout=60, cwd=tmp)
            self.assertEqual(p.returncode, 0, p.stderr)
            self.assertEqual(p.stderr.count(note), 1, p.stderr)
            for mode in (["--mode", "overlap"], []):
                p = subprocess.run([BIN, "bench", "--backends", "ring@2"] + mode + sizes,
                                   capture_output=True, text=True, timeout=60, cwd=tmp)
                self.assertEqual(p.returncode, 2, p.stderr)
                self.assertIn("2 ranks, but only 1 were started", p.stderr)
                self.assertNotIn(note, p.stderr)

    def test_every_rank_failing_alike_is_one_line(self):
        # each rank's message starts with its own rank: they were printed once per rank
        p = subprocess.run([BIN, "train", "--backend", "nccl"] + TINY, capture_output=True,
                           text=True, timeout=60)
        if "not available" not in p.stderr:
            self.skipTest("built with NCCL")
        self.run_case(3, ["train", "--backend", "nccl"] + TINY, 2, ["'nccl' is not available"])

    def test_batch_larger_than_shard(self):
        self.run_case(2, ["train", "--backend", "ring"] + with_opts(TINY, batch=300), 2,
                      ["batch 300", "shard"])
        # with a dedicated server too: checked before any communication, so one line, exit 2
        self.run_case(3, ["train", "--backend", "ps", "--servers", "1"] + with_opts(TINY, batch=300),
                      2, ["batch 300", "shard", "over 2 workers"])

    def test_output_folder_missing(self):
        missing = os.path.join(self.tmp, "no", "such", "folder")
        self.run_case(2, ["train", "--backend", "ring", "--summary-file", f"{missing}/s.json"]
                      + TINY, 2, ["--summary-file", missing], outputs=False)
        self.run_case(0, ["train", "--trace", self.tmp] + TINY, 2, ["--trace", "is a folder"],
                      outputs=False)

    def test_outputs_on_one_path(self):
        # the file renamed last silently replaced the other
        same = os.path.join(self.tmp, "same.json")
        self.run_case(0, ["train", "--metrics-file", same, "--summary-file", same] + TINY, 2,
                      ["--metrics-file and --summary-file", "same file"], outputs=False)
        self.run_case(2, ["train", "--backend", "ring", "--trace", same] + TINY, 2,
                      ["--trace", "2 ranks", "%r"], outputs=False)
        # rank 0's summary on rank 1's trace: the summary replaced the trace (exit 0)
        t1 = os.path.join(self.tmp, "t1.json")
        self.run_case(2, ["train", "--backend", "ring", "--summary-file", t1, "--trace",
                          os.path.join(self.tmp, "t%r.json")] + TINY, 2,
                      ["--summary-file and --trace", "rank 1", "same file"], outputs=False)
        self.assertFalse(os.path.exists(t1))
        # an output on one of the run's inputs replaced it: the INI file (exit 0, the INI
        # became the summary), the checkpoint to resume from, a data file
        ini = os.path.join(self.tmp, "run.ini")
        with open(ini, "w") as f:
            f.write("progress = off\n")
        self.run_case(0, ["train", "--config", ini, "--summary-file", ini] + TINY, 2,
                      ["--summary-file", "the --config file"], outputs=False)
        with open(ini) as f:
            self.assertEqual(f.read(), "progress = off\n")
        ck = os.path.join(self.tmp, "ck", "ckpt-0000000004.ckpt")
        self.run_case(0, ["train", "--resume", ck, "--metrics-file", ck] + TINY, 2,
                      ["--metrics-file", "the --resume checkpoint"], outputs=False)
        data = os.path.join(self.tmp, "outdata")
        write_idx_dir(data)
        self.run_case(0, ["train", "--data-dir", data, "--batch", "8", "--max-steps", "1",
                          "--trace", os.path.join(data, "train-labels-idx1-ubyte.gz")], 2,
                      ["--trace", "a --data-dir file"], outputs=False)

    def test_output_not_a_plain_file(self):
        # Outputs are renamed over their path: as root, --metrics-file /dev/null replaced the
        # device with a regular file. A FIFO stands in for the device here.
        fifo = os.path.join(self.tmp, "fifo")
        os.mkfifo(fifo)
        self.run_case(0, ["train", "--metrics-file", fifo] + TINY, 2,
                      ["--metrics-file", "not a regular file"], outputs=False)
        self.assertFalse(os.path.isfile(fifo))
        # --checkpoint-dir that cannot be created: refused up front, not after the training
        plain = os.path.join(self.tmp, "plain")
        open(plain, "w").close()
        self.run_case(2, ["train", "--backend", "ring", "--checkpoint-dir", plain + "/ck"]
                      + TINY, 2, ["--checkpoint-dir", "not a folder"])
        # a folder that mkdir refuses: the error is creating it, not writing in its parent
        # (read "cannot write in folder '/proc' (No such file or directory)")
        err, _ = self.run_case(0, ["train", "--checkpoint-dir", "/proc/x"] + TINY, 2,
                               ["--checkpoint-dir: cannot create folder '/proc/x' (No such file "
                                "or directory)"])
        self.assertNotIn("'/proc'", err)

    def test_data_files(self):
        gone = os.path.join(self.tmp, "no-data")
        self.run_case(0, ["train", "--data-dir", gone, "--max-steps", "1"], 2,
                      ["--data-dir: folder", gone, "does not exist"])
        plain = os.path.abspath(__file__)
        self.run_case(0, ["train", "--data-dir", plain, "--max-steps", "1"], 2,
                      ["--data-dir", plain, "is not a folder"])
        empty = os.path.join(self.tmp, "empty")
        os.mkdir(empty)
        self.run_case(0, ["train", "--data-dir", empty, "--max-steps", "1"], 2,
                      ["cannot find", empty, "train-images-idx3-ubyte.gz"])
        magic = os.path.join(self.tmp, "magic")
        write_idx_dir(magic, magic=0x801)
        self.run_case(2, ["train", "--backend", "ring", "--data-dir", magic, "--batch", "8"], 2,
                      ["wrong magic", "train-images"])
        mismatch = os.path.join(self.tmp, "mismatch")
        write_idx_dir(mismatch, n_labels=32)
        self.run_case(2, ["train", "--backend", "ring", "--data-dir", mismatch, "--batch", "8"],
                      2, ["64 images", "32 labels"])
        # test images of another shape: found before training, not by the first evaluation
        shape = os.path.join(self.tmp, "shape")
        write_idx_dir(shape, test_side=32)
        self.run_case(0, ["train", "--data-dir", shape, "--batch", "8"], 2,
                      ["t10k-images", "32x32", "28x28"])
        # Found only when the payload is read, by every rank at once: agreed, not aborted.
        trunc = os.path.join(self.tmp, "trunc")
        write_idx_dir(trunc, cut=500)
        err, _ = self.run_case(2, ["train", "--backend", "ring", "--data-dir", trunc, "--batch",
                                   "8"], 2, ["truncated", "train-images"])
        self.assertNotIn("MPI_Abort", err)
        # ... also with a dedicated server, which loads no data: the ranks agree before the
        # parameter server starts, so it is not left waiting for the workers
        err, _ = self.run_case(3, ["train", "--backend", "ps", "--servers", "1", "--data-dir",
                                   trunc, "--batch", "8"], 2, ["truncated", "train-images"])
        self.assertNotIn("MPI_Abort", err)

    def test_data_payload_bad_on_one_rank_names_it(self):
        # Each rank reads its own --data-dir (a node's local copy): rank 1's is truncated, found
        # only when the payload is read. The line named the file but not the rank, although the
        # other ranks' data was sound (an MPMD launch stands in for two nodes).
        good, trunc = os.path.join(self.tmp, "pgood"), os.path.join(self.tmp, "ptrunc")
        write_idx_dir(good)
        write_idx_dir(trunc, cut=500)
        base = ["train", "--epochs", "1", "--max-steps", "4", "--batch", "8", "--progress", "off"]
        for backend, np_, bad in ((["ring"], 2, 1), (["ps", "--servers", "1"], 3, 1)):
            dirs = [good] * (np_ - 1)
            dirs.insert(bad, trunc)
            args = base + ["--backend", *backend, "--data-dir", dirs[0]]
            for d in dirs[1:]:
                args += [":", "-np", "1", BIN] + base + ["--backend", *backend, "--data-dir", d]
            err, _ = self.run_case(1, args, 2, ["truncated", trunc], rank=bad, outputs=False)
            self.assertNotIn("MPI_Abort", err)

    def test_late_failure_on_one_rank(self):
        # The summary cannot be written (its temporary name is taken by a folder) after rank 1
        # has finished: rank 0 fails alone, at the end. Agreed with rank 1, not aborted (an
        # MPI_Abort while a peer sits in MPI_Finalize can deadlock mpirun).
        def plant(out):
            os.mkdir(os.path.join(out, "s.json.tmp"))
            return ["s.json.tmp"]
        err, _ = self.run_case(2, ["train", "--backend", "ring"] + TINY, 1,
                               ["cannot write", "s.json.tmp"], rank=0, bound=30, prepare=plant,
                               trained=True)
        self.assertNotIn("MPI_Abort", err)

    def resume_with_a_dedicated_server(self, name, args, says):
        """Writes a checkpoint of one worker's TINY run, then resumes it with a dedicated server
        and `args`: bad input, one line naming rank 0, exit 2, no MPI_Abort."""
        ck = os.path.join(self.tmp, name)
        p = subprocess.run([BIN, "train", "--checkpoint-dir", ck] + TINY, capture_output=True,
                           text=True, timeout=60)
        self.assertEqual(p.returncode, 0, p.stderr)
        err, _ = self.run_case(3, ["train", "--backend", "ps", "--servers", "1", "--resume",
                                   "latest", "--checkpoint-dir", ck] + args, 2, says, rank=0)
        self.assertNotIn("MPI_Abort", err)

    def test_resume_misfit_with_a_dedicated_server(self):
        # A checkpoint that does not fit is bad input found before any communication: one line,
        # exit 2 (found by the workers later, the server waited for them until MPI_Abort).
        self.resume_with_a_dedicated_server("ck-misfit", TINY,
                                            ["does not fit", "global batch 16", "32"])

    def test_resume_misfit_found_by_the_workers_with_a_dedicated_server(self):
        # The model's input width comes from the data, which only the workers read: a checkpoint
        # of another width is found by them, after the ranks agreed on the data. The workers tell
        # the server: one line, exit 2 (the server waited for them, and the job ended by
        # MPI_Abort after 3 s with each worker's line).
        self.resume_with_a_dedicated_server("ck-width", with_opts(TINY, synthetic_dim=20, batch=8),
                                            ["does not fit", "model widths 16,16,10", "20,16,10"])

    def test_a_worker_that_cannot_set_up(self):
        # Worker 0 cannot open its metrics file (a folder holds its .partial name), found after
        # the ranks agreed on the data. The workers agree on it before the backend starts, and a
        # dedicated server is told: one line, exit 2, no MPI_Abort, within --timeout (the ring's
        # rank 1 sat out --timeout at its first barrier; with a dedicated server the job ended
        # by MPI_Abort after 3 s).
        def plant(out):
            os.mkdir(os.path.join(out, "m.jsonl.partial"))
            return ["m.jsonl.partial"]
        for backend in (["ring"], ["ps", "--servers", "1"]):
            err, _ = self.run_case(3 if backend[0] == "ps" else 2,
                                   ["train", "--backend", *backend, "--timeout", "30"] + TINY, 2,
                                   ["cannot open metrics file", "m.jsonl.partial"], rank=0,
                                   bound=20, prepare=plant)
            self.assertNotIn("MPI_Abort", err)

    # --- a rank dies or goes silent -----------------------------------------------------------
    def test_diverged_run_fails_after_its_summary(self):
        out = tempfile.mkdtemp(dir=self.tmp)
        argv = [BIN, "train", *with_opts(TINY, lr="1e30"), "--summary-file", f"{out}/s.json"]
        p = subprocess.run(argv, capture_output=True, text=True, timeout=60)
        self.assertEqual(p.returncode, 1, p.stderr)
        self.assertIn("starring: error: training diverged: the loss was not finite from step",
                      p.stderr)
        with open(f"{out}/s.json") as fh:  # the results are kept, and say so
            self.assertIn("diverged_at_step", json.load(fh))

    def test_interrupted_run_says_so_and_leaves_whole_files(self):
        out = tempfile.mkdtemp(dir=self.tmp)
        long_run = [a if a != "4" else "100000" for a in TINY]  # --max-steps 100000
        long_run[long_run.index("--epochs") + 1] = "1000"
        p = subprocess.Popen([BIN, "train", *long_run, "--metrics-file", f"{out}/m.jsonl",
                              "--checkpoint-dir", f"{out}/ck", "--checkpoint-every", "20",
                              "--trace", f"{out}/t.json"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 60
        while not glob.glob(f"{out}/ck/*.ckpt") and time.monotonic() < deadline:
            time.sleep(0.1)
        p.send_signal(signal.SIGTERM)
        _, err = p.communicate(timeout=60)
        self.assertEqual(p.returncode, -signal.SIGTERM, err)  # still ended by the signal
        self.assertIn("starring: rank 0: stopped by SIGTERM", err)
        self.assertTrue(glob.glob(f"{out}/ck/*.ckpt"), os.listdir(out))
        self.assertFalse(os.path.exists(f"{out}/m.jsonl"), os.listdir(out))
        with open(f"{out}/m.jsonl.partial") as fh:
            lines = fh.read().splitlines()
        for line in lines[:-1]:  # whole lines (the last may be cut by the signal)
            json.loads(line)
        # the timeline up to the signal is kept (a stopped run used to leave no trace file)
        self.assertIn("; writing the --trace events recorded so far", err)
        with open(f"{out}/t.json") as fh:
            names = {e["name"] for e in json.load(fh)["traceEvents"]}
        self.assertTrue({"forward", "backward"} <= names, names)

    def test_interrupted_bench_says_no_word_of_checkpoints(self):
        # bench writes no checkpoints or metrics: its line said they were kept, as train's does
        p = subprocess.Popen([BIN, "bench", "--backends", "ring", "-b", "1M", "-e", "64M",
                              "-n", "100000", "-w", "0"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for line in p.stdout:  # the first row: the handlers are in place long before
            if line.startswith("   ring"):
                break
        p.send_signal(signal.SIGTERM)
        _, err = p.communicate(timeout=60)
        self.assertEqual(p.returncode, -signal.SIGTERM, err)
        self.assertIn("starring: rank 0: stopped by SIGTERM\n", err)
        self.assertNotIn("checkpoint", err)

    def test_interrupted_job_keeps_every_ranks_trace(self):
        # Ctrl-C on mpirun: it passes SIGTERM to every rank; each writes its own trace file
        out = tempfile.mkdtemp(dir=self.tmp)
        # 2 ms a step on worker 0: a small trace, written well within mpirun's grace period
        long_run = with_opts(LONG, max_steps=100000, epochs=100000, straggler="0:2")
        p = subprocess.Popen([MPIRUN, "-np", "2", BIN, "train", *long_run, "--backend", "ring",
                              "--metrics-file", f"{out}/m.jsonl", "--trace", f"{out}/t.%r.json"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if os.path.getsize(f"{out}/m.jsonl.partial") > 2000:
                    break
            except OSError:
                pass
            time.sleep(0.1)
        p.send_signal(signal.SIGINT)
        _, err = p.communicate(timeout=60)
        self.assertNotEqual(p.returncode, 0, err)
        self.assertIn("starring: rank 0: stopped by SIG", err)
        self.assertIn("writing the --trace events recorded so far", err)
        for rank in (0, 1):
            with open(f"{out}/t.{rank}.json") as fh:
                events = json.load(fh)["traceEvents"]
            self.assertTrue(any(e["name"] == "backward" for e in events), rank)
            self.assertTrue(all(e["pid"] == rank for e in events), rank)

    def test_killed_worker(self):
        argv = ["train", "--backend", "ring", "--fault", "kill:1:5"] + LONG
        _, files = self.run_killed(2, argv, 1)
        self.assertIn("m.jsonl.partial", files)
        self.assertIn("t1.json.partial", files)  # its trace so far (run_case parses it)

    def test_hung_ring_peer_ends_soon(self):
        # Rank 1 goes silent: rank 0 times out after --timeout, waits 1.5 s for the census and
        # 3 s for the others to agree on the outcome, and stops the job. Nothing else may hold
        # the exit up (the shared-memory window's collective free once waited 10 s more: 15 s in
        # all with --timeout 2). Timed from the silence (6.6 s idle); timed from the launch it
        # took 14-19 s beside 12 busy loops on 2 cores, most of it the job's start.
        timeout = 2
        self.run_case(2, ["train", "--backend", "ring", "--timeout", str(timeout), "--fault",
                          "hang:1:5"] + LONG, 1, ["timeout after 2"], rank=0,
                      after_fault=(timeout, timeout + 8))

    def test_killed_server(self):
        self.run_killed(3, ["train", "--backend", "ps", "--servers", "1", "--fault", "kill:2:5"]
                        + LONG, 2)

    def test_silent_worker_named_by_the_server(self):
        err, _ = self.run_case(3, ["train", "--backend", "ps", "--servers", "1", "--timeout",
                                   "1.5", "--fault", "hang:1:5"] + LONG, 1,
                               ["worker rank 1", "sent nothing"], rank=2, after_fault=(1.5, 30))
        # The server's account (~440 characters) is printed once: worker 0, told by the server,
        # printed a copy of it too, in either order. Worker 0 now waits longer, so the server's
        # MPI_Abort usually ends it first; a line it prints all the same is the short form.
        errors = [l for l in err.splitlines() if l.startswith("starring: error: ")]
        self.assertEqual(err.count("pushes received per chunk"), 1, err)
        for line in errors:
            self.assertIn("worker rank 1 (worker 1) sent nothing", line, err)
        for line in errors[1:]:
            self.assertTrue(line.endswith("(the details: the server's own error line)"), err)

    # --- asp/ssp: a worker far behind is waited for at the meetings (trainer/peer_watch.h) ---
    def test_asp_straggler_far_behind_finishes(self):
        # Worker 1 sleeps 0.6 s a step: worker 0 reaches the evaluation ~7 s (7 x --timeout)
        # before it. That failed 3-10 s in with "rank 0: timeout after 1.0 s in recv from rank 1
        # (tag 1)" (and the server named worker 0, silent at that barrier); now worker 0 waits
        # while worker 1 begins steps, and its heartbeats to the server say it is alive.
        for consistency, *staleness in (["asp"], ["ssp", "--staleness", "100"]):
            with self.subTest(consistency=consistency):
                took, where, workers, s = self.run_ps1_to_the_end(
                    consistency, 1, *staleness, "--straggler", "1:600", steps=12)
                self.assertGreater(took, 12 * 0.6, where)  # worker 1's sleeps alone
                # the heartbeats sent while worker 0 waited are control, not step traffic
                self.assertEqual(workers[0]["bytes_sent"], workers[1]["bytes_sent"], where)
                self.assertEqual(len(s["history"]), 1, where)

    def test_asp_ssp_step_longer_than_timeout_finishes(self):
        # Worker 1's every step lasts 3 s, above --timeout 2 (a --straggler delay stands for slow
        # compute; it was refused at start-up): the server named it ("sent nothing"). Now its
        # comm thread heartbeats the server while its trainer shows signs of life
        # (common/thread_pulse.h), and under ssp the server heartbeats worker 0, whose replies
        # it holds back, so its reply deadlines wait too (bsp: the next test).
        for consistency in ("asp", "ssp"):
            with self.subTest(consistency=consistency):
                took, where, workers, _ = self.run_ps1_to_the_end(
                    consistency, 2, "--straggler", "1:3000", steps=4)
                self.assertGreater(took, 4 * 3, where)  # worker 1's sleeps alone
                # heartbeats, both ways, are control, not step traffic
                self.assertEqual(workers[0]["bytes_sent"], workers[1]["bytes_sent"], where)
                self.assertEqual(workers[0]["bytes_recv"], workers[1]["bytes_recv"], where)
        # one worker alone (local) still refuses it: no peer waits, it would only sleep
        self.run_case(0, ["train", "--straggler", "0:3000", "--timeout", "2"] + TINY, 2,
                      ["--straggler 0:3000", "shorter than --timeout",
                       "backend 'local' does not wait for a longer step"])

    def test_bsp_step_longer_than_timeout_finishes(self):
        # As above under bsp (it was refused at start-up): worker 0 waits each round for worker
        # 1's push, heartbeated by the server, which worker 1's comm thread heartbeats. The
        # heartbeats are control: each worker's step bytes are those of the run without the
        # straggler.
        runs = {}
        for straggler in ([], ["--straggler", "1:3000"]):
            took, where, workers, _ = self.run_ps1_to_the_end("bsp", 2, *straggler, steps=4)
            if straggler:
                self.assertGreater(took, 4 * 3, where)  # worker 1's sleeps alone
            runs[bool(straggler)] = [(r["bytes_sent"], r["bytes_recv"]) for r in workers]
        self.assertEqual(runs[True], runs[False])

    def test_hung_asp_worker_still_named(self):
        # Worker 0 reaches the evaluation while worker 1 hangs at step 5 (its trainer asleep; its
        # threads still run): it is named within --timeout, as under bsp.
        timeout = 2
        self.run_case(3, ps1_run("asp", timeout, "--fault", "hang:1:5"), 1,
                      ["timeout after 2", "rank 1"], after_fault=(timeout, timeout + 8))

    def test_killed_asp_worker(self):
        self.run_killed(3, ps1_run("asp", 2, "--fault", "kill:1:5"), 1)

    # ssp: the faults of the asp and bsp cases above. Worker 0 cannot run more than --staleness
    # (2) steps ahead, so it never reaches a meeting before worker 1: the server names worker 1.
    def test_hung_ssp_worker_still_named(self):
        timeout = 2
        self.run_case(3, ps1_run("ssp", timeout, "--fault", "hang:1:5"), 1,
                      ["timeout after 2", "worker rank 1 (worker 1) sent nothing"],
                      after_fault=(timeout, timeout + 8))

    def test_killed_ssp_worker(self):
        self.run_killed(3, ps1_run("ssp", 2, "--fault", "kill:1:5"), 1)

    def test_killed_ssp_server(self):
        self.run_killed(3, ps1_run("ssp", 2, "--fault", "kill:2:5"), 2)

    # A worker stopped by SIGSTOP while it trains (alive, silent: its thread of notes and its
    # heartbeats stop too), sent by the test once worker 1 (a 100 ms straggler, so that the run
    # is still training) has trained a step. Under asp worker 0 reaches the evaluation first and
    # names it ("waiting for rank 1 ... nothing came from it"), or the server does; under ssp the
    # server does. The job ended 4.8-5.0 s after the signal here at --timeout 2.
    def test_stopped_asp_worker_named(self):
        timeout = 2
        self.run_case(3, ps1_run("asp", timeout, "--straggler", "1:100"), 1,
                      ["timeout after 2", "rank 1"], sigstop=(1, trained_a_step(1)),
                      after_fault=(timeout, timeout + 8))

    def test_stopped_ssp_worker_named(self):
        timeout = 2
        self.run_case(3, ps1_run("ssp", timeout, "--straggler", "1:100"), 1,
                      ["timeout after 2", "worker rank 1 (worker 1) sent nothing"],
                      sigstop=(1, trained_a_step(1)), after_fault=(timeout, timeout + 8))

    def test_stopped_bsp_worker_named(self):
        # A straggler whose steps (3 s) outlast --timeout is waited for under bsp; stopped, its
        # heartbeats stop too, and the server names it.
        timeout = 2
        self.run_case(3, ps1_run("bsp", timeout, "--straggler", "1:3000"), 1,
                      ["timeout after 2", "worker rank 1 (worker 1) sent nothing"],
                      sigstop=(1, trained_a_step(1)), after_fault=(timeout, timeout + 8))

    def test_ring_mpi_step_longer_than_timeout_finishes(self):
        # Worker 1's steps (1.2 s) outlast --timeout 1 (it was refused at start-up: worker 0
        # timed out inside the collective, naming it). Worker 0's wait in the collective asks its
        # PeerWatch whether a peer's trainer is alive (common/peer_liveness.h) and goes on.
        for backend in ("ring", "mpi"):
            with self.subTest(backend=backend):
                out = tempfile.mkdtemp(dir=self.tmp)
                argv = [MPIRUN, "-np", "2", BIN, "train", "--backend", backend, "--timeout", "1",
                        "--straggler", "1:1200"] + with_opts(TINY, max_steps=2,
                                                             summary_file=f"{out}/s.json")
                t0 = time.monotonic()
                p = subprocess.run(argv, capture_output=True, text=True, cwd=out, timeout=90)
                took = time.monotonic() - t0
                where = f"\n$ {' '.join(argv)}\nexit {p.returncode} after {took:.1f} s\n" \
                        f"{p.stdout}{p.stderr}"
                self.assertEqual(p.returncode, 0, where)
                self.assertGreater(took, 2 * 1.2, where)
                with open(f"{out}/s.json") as fh:
                    ranks = json.load(fh)["ranks"]
                self.assertEqual([r["steps"] for r in ranks], [2, 2], where)
                self.assertEqual(ranks[0]["bytes_sent"], ranks[1]["bytes_sent"], where)

    def test_stopped_ring_straggler_named(self):
        # A ring straggler whose steps (1.5 s) outlast --timeout is waited for; stopped by
        # SIGSTOP, its PeerWatch notes stop too, and worker 0's wait in the collective names it.
        timeout = 1
        self.run_case(2, ["train", "--backend", "ring", "--timeout", str(timeout), "--straggler",
                          "1:1500"] + LONG, 1, ["timeout after 1", "rank 1 sent nothing"],
                      rank=0, sigstop=(1, trained_a_step(1)), after_fault=(timeout, timeout + 8))

    # --- a rank stopped (SIGSTOP: alive, silent) where no --fault step reaches ---------------
    # Each ended the job only by mpirun's own wait (forever), or after 120 s: every other rank
    # now leaves within --timeout plus the census and agreement, naming the stopped rank where
    # it can, and mpirun ends the stopped one too (ranks_in in run_case).

    def test_rank_stopped_before_mpi_init(self):
        # MPI_Init waits for every rank without a limit: bounded by --timeout + 10 s
        self.run_case(2, ["train", "--backend", "ring", "--timeout", "1"] + TINY, 1,
                      ["MPI_Init did not complete within 11 s"], rank=0, bound=40,
                      stop_at="init:1")

    def test_rank_stopped_before_the_options_are_agreed(self):
        # The agreement on every rank's checks (MPI_Allreduce) waited for it without a limit
        # (as for rank 0 stopped reading a --resume checkpoint): --timeout + 10 s, rank named
        self.run_case(2, ["train", "--backend", "ring", "--timeout", "1"] + TINY, 1,
                      ["timeout after 11 s", "rank 1 did not get there"], rank=0, bound=40,
                      stop_at="setup:1")

    def test_rank_stopped_before_the_jobs_communicators(self):
        # MPI_Comm_dup and the other set-up collectives waited for it without a limit; now
        # --timeout + 10 s (common/stall_watch.h), no rank named: the collective does not say
        self.run_case(2, ["train", "--backend", "ring", "--timeout", "1"] + TINY, 1,
                      ["did not complete within 11 s", "MPI_Comm_dup",
                       "another rank is stopped or stuck before it"], rank=0, bound=40,
                      stop_at="comm-setup:1")

    def test_rank_stopped_in_the_mpi_bench_row(self):
        # bench's mpi rows call the blocking MPI_Allreduce (as nccl-tests does): it waited for the
        # stopped rank for good; now each iteration must complete within --timeout + 10 s
        self.run_case(2, ["bench", "--backends", "mpi", "-b", "1K", "-e", "1K", "-n", "5",
                          "--timeout", "1"], 1,
                      ["did not complete within 11 s", "bench: an iteration of mpi at 1024 B",
                       "blocking MPI_Allreduce"], rank=0, bound=40, stop_at="bench-loop:1")

    def test_ring_rank_stopped_before_the_backends_communicators(self):
        # The ring's MPI_Comm_create_group / shared-memory window waited for it without a limit
        self.run_case(2, ["train", "--backend", "ring", "--timeout", "1"] + TINY, 1,
                      ["did not complete within 11 s", "another rank is stopped or stuck"],
                      rank=0, bound=40, stop_at="backend-setup:1")

    def test_rank_stopped_before_it_loaded_its_data(self):
        # The others wait for every rank's data --timeout plus an allowance by the data's size
        # (experiments/train_run.h); it was a fixed 60 s, too long for a test (66.5 s after the
        # stop). Now 2 + 5 s for TINY, then the census (1.5 s) and the failing rank's 3 s at the
        # outcome's agreement: 11.5 s after the stop
        timeout = 2
        self.run_case(2, ["train", "--backend", "ring", "--timeout", str(timeout)] + TINY, 1,
                      ["while every rank loaded its data (allowed: --timeout + 5 s",
                       "rank 1 did not get here"], rank=0, stop_at="load:1",
                      after_fault=(timeout + 5, timeout + 5 + 7))

    def test_ring_rank_stopped_after_its_last_step(self):
        # The shared-memory ring's end-of-run vote waited a fixed 120 s for it
        self.run_case(2, ["train", "--backend", "ring", "--timeout", "2"] + TINY, 1,
                      ["timeout after 2", "finish with it at the end of the run",
                       "rank 1 did not time out"], rank=0, bound=40, stop_at="sync-end:1",
                      trained=True)  # its metrics were whole before: training had ended

    def test_ring_rank_stopped_after_its_last_step_on_two_hosts(self):
        # Across hosts (as on a cluster) the ring runs over MPI messages, with no end-of-run
        # vote: rank 0 waited for the stopped rank's totals and said only "timeout after 2 s in
        # recv from rank 1 (tag 102)"
        self.run_case(2, ["train", "--backend", "ring", "--timeout", "2"] + TINY, 1,
                      ["timeout after 2", "rank 1 did not send its totals for the run summary"],
                      rank=0, bound=40, stop_at="sync-end:1", trained=True, hosts="0,1")

    def test_ps_server_stopped_before_its_goodbye(self):
        # The workers' wait for the goodbye named no server and took 2 x (--timeout + grace):
        # 4 + 2 + 3 s after the stop at --timeout 2 (agreement's 3 s included), now 2 + 1 + 3
        timeout = 2
        self.run_case(3, ["train", "--backend", "ps", "--servers", "1", "--timeout",
                          str(timeout)] + TINY, 1,
                      ["the servers' goodbye", "no goodbye from server rank 2"],
                      stop_at="server-end:2", trained=True, after_fault=(timeout, timeout + 5))

    def test_ps_server_stopped_before_its_start_acknowledgement(self):
        # The workers' wait for the servers' start acknowledgements named no server and took
        # 2 x (--timeout + grace), where every other wait takes --timeout (+ grace): 4 + 2 + 3 s
        # after the stop at --timeout 2 (agreement's 3 s included), now 2 + 1 + 3
        timeout = 2
        self.run_case(3, ["train", "--backend", "ps", "--servers", "1", "--timeout",
                          str(timeout)] + TINY, 1,
                      ["the servers' start acknowledgements",
                       "no start acknowledgement from server rank 2"],
                      # 6 s and mpirun's teardown, 8.0 s at load 5 (its start-up, the control,
                      # is 0.1 s: the stop comes before the first step); the old wait took 9 + 1
                      stop_at="server-start:2", after_fault=(timeout, timeout + 6.5))

    def test_colocated_worker_0_stopped_writing_a_checkpoint(self):
        # Worker 1 times out in the checkpoint's agreement; its failure path then waited for the
        # servers' goodbye (2 x --timeout + grace) that its own shard, waiting for worker 0, could
        # not give: 3 + 9 + 3 s after the stop, now 3 + 3.
        timeout = 3
        self.run_case(2, ["train", "--backend", "ps", "--servers", "colocated", "--timeout",
                          str(timeout), "--checkpoint-dir", "ck"] + TINY, 1, ["rank 0"],
                      rank=1, stop_at="checkpoint-write:0", after_fault=(timeout, timeout + 6))

    def test_colocated_worker_stopped_after_its_last_step(self):
        # Every other rank's shard waits for its goodbye and names it after --timeout ("worker
        # rank 2 ... sent nothing"), but the workers waited for the shards' goodbyes until
        # --timeout + grace and then named every server rank instead, the stopped one among them.
        # Mixed test hosts (ranks 0 and 1 share one): shared memory and messages between shards.
        timeout = 2
        self.run_case(3, ["train", "--backend", "ps", "--servers", "colocated", "--timeout",
                          str(timeout)] + TINY, 1, ["worker rank 2", "sent nothing"],
                      stop_at="sync-end:2", trained=True, after_fault=(timeout, timeout + 6),
                      hosts="0,0,1")  # + 6: at load 7 it took 7.3-8.0 s against 7.3 s allowed

    def test_rank_0_stopped_after_the_others_figures_came(self):
        # Ranks 1 and 2 had sent rank 0 their figures (or the sends had left eagerly: rank 0
        # stopped at sync-end did it about 1 run in 10) and waited for the outcome's agreement
        # without a limit: the job never ended. Now 2 x --timeout + 10 s, rank 0 named.
        timeout = 1
        self.run_case(3, ["train", "--backend", "ring-p2p", "--timeout", str(timeout)] + TINY,
                      1, ["rank 0 did not finish within 12 s"], rank=1, stop_at="summary:0",
                      finished=True, after_fault=(2 * timeout + 10, 2 * timeout + 10 + 8))

    def test_rank_stopped_at_its_exit(self):
        # After the outcome was agreed, MPI_Finalize waited for it without a limit; the run's
        # outputs are whole (the summary was written before)
        self.run_case(2, ["train", "--backend", "ring", "--timeout", "2"] + TINY, 1,
                      ["rank 1 did not reach its exit within --timeout (2 s)"], rank=0,
                      bound=30, stop_at="exit:1", finished=True)


if __name__ == "__main__":
    bin_main.main(sys.modules[__name__])
