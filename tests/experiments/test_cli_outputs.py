#!/usr/bin/env python3
"""What a user sees about a run's outputs (exit 2, one line, no MPI_Abort, no half-written file):
two outputs on one path or an output on an input, a path that is not a plain file or whose folder
is missing, a full disk under the standard output, a file that cannot be opened at set-up or
written at the end on one rank; a diverged run (its summary kept), SIGTERM and Ctrl-C (whole
files, every rank's trace, no word of checkpoints from bench).
Bad flags, values, config and data files: test_cli_input.py.
  test_cli_outputs.py --bin build/bin/starring
The checks every case shares, and why some cases run at once: cli_case.py.
"""
import glob
import json
import os
import signal
import subprocess
import sys
import tempfile
import time

import bin_main
import cli_case
from cli_case import BIN, CRASH, MPIRUN, TINY, LONG, CliCase, with_opts, write_idx_dir


class Outputs(CliCase):
    """Each case is a few short runs (launch and refusal) or one run stopped by SIGTERM: six at
    once, as test_cli_input.py's BadInput."""
    overlap = 6

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

    def test_interrupted_bench_says_no_word_of_checkpoints(self):
        # bench writes no checkpoints or metrics: its line said they were kept, as train's does
        # -b 4: the first row comes after ~1 s (100000 ops of 1M took 34 s at load 11), the
        # rows up to 64M would take hours
        p = subprocess.Popen([BIN, "bench", "--backends", "ring", "-b", "4", "-e", "64M",
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

    def test_standard_output_on_a_full_disk_is_an_error(self):
        # /dev/full: every write fails with ENOSPC, as on a full disk. `bench --json > rows` and
        # train's summary table ended with exit 0 and an empty or cut file, the failure unsaid.
        # One process only: under mpirun the ranks write to mpirun, which writes the file and
        # does not report a failed write (Open MPI 4.1: exit 0).
        for args in (["bench", "--json", "-b", "1K", "-e", "4K"], ["train"] + TINY):
            argv = [BIN] + args
            with open("/dev/full", "w") as full:
                p = subprocess.run(argv, stdout=full, stderr=subprocess.PIPE, text=True,
                                   cwd=self.tmp, timeout=120)
            where = f"\n$ {' '.join(argv)}\nexit {p.returncode}\n{p.stderr}"
            self.assertEqual(p.returncode, 1, where)
            for bad in CRASH:
                self.assertNotIn(bad, p.stderr, where)
            errors = [l for l in p.stderr.splitlines() if l.startswith("starring: error: ")]
            self.assertEqual(len(errors), 1, where)  # the reason is lost when an earlier flush
            # failed (stdio keeps only the error flag)
            self.assertRegex(errors[0], r"^starring: error: writing the standard output failed"
                             r"(: No space left on device)? \(what this command printed there is "
                             r"incomplete\)$", where)

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

    def test_output_folder_missing(self):
        missing = os.path.join(self.tmp, "no", "such", "folder")
        err, _ = self.run_case(2, ["train", "--backend", "ring", "--summary-file",
                                   f"{missing}/s.json"] + TINY, 2, ["--summary-file", missing],
                               rank=0, outputs=False)
        # rank 0 refused it; every rank exits 2 and mpirun named rank 1's exit in most runs
        self.assertIn("mpirun: job stopped: rank 0 exited with code 2", err)
        self.run_case(0, ["train", "--trace", self.tmp] + TINY, 2, ["--trace", "is a folder"],
                      outputs=False)

    def test_late_failure_on_one_rank(self):
        # The summary cannot be written (a name of 255 characters, the most a folder entry may
        # have, leaves no room for its temporary file's) after rank 1 has finished: rank 0 fails
        # alone, at the end. Agreed with rank 1, not aborted (an MPI_Abort while a peer sits in
        # MPI_Finalize can deadlock mpirun). (Until 2026-12-02 a folder planted at the fixed
        # temporary name s.json.tmp made it fail; every write now has a temporary name of its own,
        # trainer/atomic_file.h.)
        name = "s" * 250 + ".json"  # in the run's folder (its working directory)
        err, _ = self.run_case(2, ["train", "--backend", "ring", "--metrics-file", "m.jsonl",
                                   "--summary-file", name] + TINY, 1,
                               ["cannot write", name, "File name too long"], rank=0, bound=30,
                               trained=True, outputs=False)
        self.assertNotIn("MPI_Abort", err)

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


class OneAtATime(CliCase):
    """A Ctrl-C whose traces must be written within mpirun's grace period: alone."""
    overlap = 1

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


if __name__ == "__main__":
    bin_main.main(sys.modules[__name__], shared=[cli_case])
