#!/usr/bin/env python3
"""`starring train` with checkpoints, end to end under mpirun (2 ranks, synthetic data):
  test_checkpoint_cli.py --bin build/bin/starring --mpirun scripts/mpirun.sh
Trains 20 steps with --checkpoint-dir/--checkpoint-every, resumes with --resume latest up to 40
steps, and checks the summary (steps, accuracy, resumed_from, the steady-state timing that
leaves the first steps out), the metrics file (every step once), the checkpoint folder
(--keep-checkpoints, no leftovers); that a run killed at step 21 (--fault) resumes from its
checkpoint of step 16 and ends with every step's metrics once; and that a damaged checkpoint and
an empty folder each end the job with a non-zero exit and one line naming the problem; that a
run resumed from another folder's checkpoint refuses a folder holding checkpoints, and leaves
them as they were; and that SIGUSR1 to mpirun's process group (a preemption notice) stops a
parameter-server run at one step with a checkpoint and exit 75, from which the same command
(--resume auto) resumes it to the end, while a stop whose metrics file failed exits 1, not 75,
and a request too late to stop the run before its end says so beside its exit 0. Times: the
metrics file's time_s and the history's wall_s are one clock (worker 0's training seconds,
across the runs), and the job's train_s sums each run's slowest worker's (job.leg_train_s),
under ps asp with a straggler too.
"""
import argparse
import json
import os
import signal
import struct
import subprocess
import sys
import tempfile
import time
import unittest
import zlib

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "experiments"))
import bin_main  # noqa: E402

ARGS = None
# Each case is its own folder and jobs of 2-3 ranks that mostly train a few hundred tiny steps or
# wait: three at once (bin_main.py; 48 s one after another at load 13).
OVERLAP = 3
COMMON = ["--dataset", "synthetic", "--synthetic-train", "512", "--synthetic-test", "128",
          "--synthetic-dim", "32", "--hidden", "16", "--batch", "16", "--epochs", "3",
          "--progress", "off", "--timeout", "20"]


def train(*flags):
    cmd = [ARGS.mpirun, "-np", "2", ARGS.bin, "train"] + COMMON + list(flags)
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120)


def folder_bytes(folder):
    out = {}
    for name in os.listdir(folder):
        with open(os.path.join(folder, name), "rb") as f:
            out[name] = f.read()
    return out


def patch_meta(path, patch):
    """Edits a checkpoint's metadata with patch(meta) and recomputes its CRC (trainer/checkpoint.h:
    the JSON's length at byte 16, the JSON from byte 24, a crc32 of everything before the last 4
    bytes): a crafted file that passes every check of the format."""
    with open(path, "rb") as f:
        b = f.read()
    n = struct.unpack_from("<Q", b, 16)[0]
    meta = json.loads(b[24:24 + n])
    patch(meta)
    text = json.dumps(meta).encode()
    out = b[:16] + struct.pack("<Q", len(text)) + text + b[24 + n:-4]
    with open(path, "wb") as f:
        f.write(out + struct.pack("<I", zlib.crc32(out) & 0xFFFFFFFF))


def steps_in(metrics):
    with open(metrics) as f:
        return [json.loads(l)["step"] for l in f if '"loss"' in l]


class CheckpointCli(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory(prefix="starring_ckpt_cli_")
        self.dir = os.path.join(self.tmp.name, "ckpt")
        self.metrics = os.path.join(self.tmp.name, "metrics.jsonl")
        self.summary = os.path.join(self.tmp.name, "summary.json")

    def tearDown(self):
        self.tmp.cleanup()

    def test_train_then_resume_latest(self):
        first = train("--backend", "ring", "--max-steps", "20", "--checkpoint-dir", self.dir,
                      "--checkpoint-every", "8", "--metrics-file", self.metrics)
        self.assertEqual(first.returncode, 0, first.stderr)
        self.assertEqual(sorted(os.listdir(self.dir)),
                         ["ckpt-0000000016.ckpt", "ckpt-0000000020.ckpt", "latest"])
        self.assertEqual(steps_in(self.metrics), list(range(1, 21)))

        second = train("--backend", "ring", "--max-steps", "40", "--checkpoint-dir", self.dir,
                       "--resume", "latest", "--metrics-file", self.metrics,
                       "--summary-file", self.summary)
        self.assertEqual(second.returncode, 0, second.stderr)
        self.assertIn("resumed from", second.stdout)
        self.assertNotIn("other settings", second.stdout + second.stderr)  # none changed
        # the printed wall time and throughput cover the 20 steps this run trained: say so
        self.assertIn("steps 40 (21-40 in this run)  wall ", second.stdout)
        with open(self.summary) as f:
            s = json.load(f)
        self.assertEqual(s["steps"], 40)
        self.assertEqual(s["resumed_at_step"], 20)
        self.assertTrue(s["resumed_from"].endswith("ckpt-0000000020.ckpt"), s["resumed_from"])
        self.assertNotIn("resumed_with_changes", s)
        self.assertGreater(s["test_accuracy"], 0.0)
        # Steady-state timing: samples/s and step times leave out the first 5 of the 20 steps
        # this run trained (--untimed-steps 5, at most a quarter); wall_s counts every step.
        self.assertEqual(s["untimed_steps"], 5)
        workers = [r for r in s["ranks"] if r["role"] == "worker"]
        self.assertEqual([(r["untimed_steps"], r["samples"]) for r in workers], [(5, 15 * 16)] * 2)
        timed_wall = max(r["wall_s"] for r in workers)
        self.assertAlmostEqual(s["samples_per_s"] * timed_wall / (2 * 15 * 16), 1.0, places=6)
        self.assertLessEqual(timed_wall, s["wall_s"])
        self.assertAlmostEqual(s["samples_per_s_all_steps"] * s["wall_s"] / (2 * 20 * 16), 1.0,
                               places=6)
        self.assertEqual(steps_in(self.metrics), list(range(1, 41)))
        # one clock across both runs: time_s goes on from the first run's last line (it
        # restarted at 0, so loss against time drew the resumed part back over the first)
        with open(self.metrics) as f:
            times = [json.loads(l)["time_s"] for l in f if '"loss"' in l]  # the step lines
        self.assertEqual(times, sorted(times))
        self.assertEqual(sorted(os.listdir(self.dir)),
                         ["ckpt-0000000020.ckpt", "ckpt-0000000040.ckpt", "latest"])  # every 0: only the end
        # resumed from the finished run's last step: it trains nothing, and the line says so
        # (it read "steps 40 (41-40 in this run)")
        third = train("--backend", "ring", "--max-steps", "40", "--checkpoint-dir", self.dir,
                      "--resume", "latest")
        self.assertEqual(third.returncode, 0, third.stderr)
        self.assertIn("steps 40 (none in this run: it resumed after the last step)  wall ",
                      third.stdout)

    def test_a_stopped_and_resumed_runs_summary_lists_every_epoch_once(self):
        # 2 workers x 16 on 512 samples: 16 steps an epoch, 48 in all; a stop request at step
        # 20 (vote round 24) stops after step 26, inside epoch 2, which the resumed run ends
        plain_summary = os.path.join(self.tmp.name, "plain.json")
        plain = train("--backend", "ring", "--summary-file", plain_summary)
        self.assertEqual(plain.returncode, 0, plain.stderr)
        flags = ["--backend", "ring", "--checkpoint-dir", self.dir, "--metrics-file",
                 self.metrics, "--summary-file", self.summary]
        stopped = train(*flags, "--fault", "stop:1:20")
        self.assertEqual(stopped.returncode, 75, stopped.stderr)
        self.assertIn("stopped after step 26", stopped.stdout)
        # who asked (worker 1, seen at the vote of step 24), where to resume from, and where the
        # metrics wait: the line naming no worker passed every test
        ckpt = os.path.join(self.dir, "ckpt-0000000026.ckpt")
        self.assertIn(" that worker(s) 1 had at step 24\ncheckpoint " + ckpt + "\nresume: the "
                      "same command with --resume latest (or auto); the metrics so far stay in "
                      + self.metrics + ".partial, which the resumed run continues\n",
                      stopped.stdout)
        self.assertFalse(os.path.exists(self.summary))  # a stopped run writes none
        resumed = train(*flags, "--resume", "latest")
        self.assertEqual(resumed.returncode, 0, resumed.stderr)
        with open(plain_summary) as f:
            p = json.load(f)
        with open(self.summary) as f:
            s = json.load(f)
        self.assertEqual([h["epoch"] for h in s["history"]], [1, 2, 3])
        self.assertEqual([h["step"] for h in s["history"]], [16, 32, 48])
        for a, b in zip(p["history"], s["history"]):  # synchronous: the same numbers
            for k in ("epoch", "step", "test_accuracy", "test_loss"):
                self.assertEqual(a[k], b[k], (k, a, b))
            # epoch 2's loss so far went through the checkpoint as the workers' mean sum
            self.assertAlmostEqual(a["train_loss"], b["train_loss"], places=9)
        self.assertEqual(p["history"][0]["train_loss"], s["history"][0]["train_loss"])
        self.assertEqual(s["epochs"], 3)
        self.assertEqual((s["test_accuracy"], s["test_loss"], s["final_train_loss"]),
                         (p["test_accuracy"], p["test_loss"], p["final_train_loss"]))
        # the metrics file, continued across the runs, evaluates every epoch once too
        with open(self.metrics) as f:
            lines = [json.loads(l) for l in f]
        evals = [e for e in lines if e.get("event") == "eval"]
        self.assertEqual([e["epoch"] for e in evals], [1, 2, 3])
        # one clock for the job: the training seconds of both runs (evaluation left out), the
        # same in the metrics file (every line: steps, evaluations, checkpoints) and the history
        walls = [h["wall_s"] for h in s["history"]]
        self.assertEqual(walls, sorted(walls))
        self.assertEqual([e["time_s"] for e in evals], walls)
        times = [m["time_s"] for m in lines]
        self.assertEqual(times, sorted(times))
        job = s["job"]
        self.assertEqual((job["legs"], job["steps"], job["epochs_by_earlier_legs"]), (2, 48, 1))
        self.assertGreater(job["train_s"], s["wall_s"])  # the first run's 26 steps, and these
        self.assertGreaterEqual(job["train_s"], walls[-1])
        # each run's part: the first one's from the checkpoint, this one's wall_s
        self.assertEqual(len(job["leg_train_s"]), 2)
        self.assertEqual(job["leg_train_s"][1], s["wall_s"])
        self.assertAlmostEqual(sum(job["leg_train_s"]), job["train_s"], places=9)
        self.assertAlmostEqual(job["samples_per_s"] * job["train_s"] / (48 * 2 * 16), 1.0, places=6)
        # this run's figures stay this run's, and say so
        self.assertEqual(s["resumed_at_step"], 26)
        self.assertEqual(s["ranks"][0]["steps"], 22)
        self.assertIn("steps 48 (27-48 in this run)", resumed.stdout)
        self.assertIn("the whole job (run 2 of it): 48 steps, ", resumed.stdout)
        self.assertIn("the history's epoch 1 comes from an earlier run", resumed.stdout)
        # an uninterrupted run's job is the run itself
        pj = p["job"]
        self.assertEqual((pj["legs"], pj["steps"], pj["epochs_by_earlier_legs"]), (1, 48, 0))
        self.assertEqual(pj["train_s"], p["wall_s"])
        self.assertEqual(pj["leg_train_s"], [p["wall_s"]])
        self.assertNotIn("the whole job", plain.stdout)

    def test_the_jobs_training_seconds_are_each_runs_slowest_workers(self):
        # ps asp: no worker waits for the other's steps. Worker 1 sleeps 25 ms a step, so worker 0
        # ends its 20 steps far sooner and waits for worker 1 at the evaluations and the final
        # checkpoint, outside its training seconds. The job's part of the first run is worker 1's,
        # at least its 20 sleeps, as that run's wall_s is (it was worker 0's, which the job's
        # train_s then added to the resumed run's slowest worker's).
        flags = ["--backend", "ps", "--servers", "colocated", "--consistency", "asp",
                 "--straggler", "1:25", "--checkpoint-dir", self.dir, "--metrics-file", self.metrics]
        first_summary = os.path.join(self.tmp.name, "first.json")
        first = train(*flags, "--max-steps", "20", "--summary-file", first_summary)
        self.assertEqual(first.returncode, 0, first.stderr)
        resumed = train(*flags, "--max-steps", "30", "--resume", "latest",
                        "--summary-file", self.summary)
        self.assertEqual(resumed.returncode, 0, resumed.stderr)
        with open(first_summary) as f:
            f1 = json.load(f)
        with open(self.summary) as f:
            s = json.load(f)
        self.assertGreaterEqual(f1["wall_s"], 20 * 0.025)
        self.assertEqual(f1["job"]["leg_train_s"], [f1["wall_s"]])
        job = s["job"]
        self.assertEqual((job["legs"], job["steps"]), (2, 30))
        self.assertGreaterEqual(job["leg_train_s"][0], 20 * 0.025)
        self.assertEqual(job["leg_train_s"][1], s["wall_s"])
        self.assertGreaterEqual(s["wall_s"], 10 * 0.025)
        self.assertAlmostEqual(sum(job["leg_train_s"]), job["train_s"], places=9)
        # The timeline (history, metrics time_s) is worker 0's training seconds across both runs,
        # behind the totals (worker 0 waited for worker 1 outside them), and never runs back.
        self.assertEqual([h["step"] for h in s["history"]], [16, 30])  # epoch 2 re-evaluated
        with open(self.metrics) as f:
            lines = [json.loads(l) for l in f]
        times = [m["time_s"] for m in lines]
        self.assertEqual(times, sorted(times))
        evals = {m["epoch"]: m["time_s"] for m in lines if m.get("event") == "eval"}
        self.assertEqual([evals[h["epoch"]] for h in s["history"]],
                         [h["wall_s"] for h in s["history"]])
        ckpt20 = [m for m in lines if m.get("event") == "checkpoint" and m["step"] == 20]
        self.assertEqual(len(ckpt20), 1)
        self.assertLessEqual(ckpt20[0]["time_s"], job["leg_train_s"][0])
        self.assertLessEqual(s["history"][-1]["wall_s"], job["train_s"])

    def test_a_checkpoint_leaves_the_wait_for_a_straggler_in_the_timeline(self):
        # ring (synchronous): worker 1 sleeps 20 ms a step before its gradients go out, so worker
        # 0 cannot end a step sooner. With a checkpoint after every step, that wait falls in the
        # checkpoint's flush, which is the last step's communication, training time: worker 0's
        # timeline (the history) read 0.02 s of 10 steps when the checkpoint took it out, against
        # the summary's 0.20 s. Sleeps only lengthen steps: half of them is the bound.
        r = train("--backend", "ring", "--straggler", "1:20", "--max-steps", "10",
                  "--checkpoint-dir", self.dir, "--checkpoint-every", "1",
                  "--summary-file", self.summary)
        self.assertEqual(r.returncode, 0, r.stderr)
        with open(self.summary) as f:
            s = json.load(f)
        self.assertGreaterEqual(s["wall_s"], 10 * 0.020)
        self.assertGreaterEqual(s["history"][-1]["wall_s"], 0.5 * 10 * 0.020, s["history"])

    def test_killed_run_resumes_from_its_last_checkpoint(self):
        killed = train("--backend", "ps", "--servers", "colocated", "--max-steps", "30",
                       "--checkpoint-dir", self.dir, "--checkpoint-every", "8",
                       "--metrics-file", self.metrics, "--fault", "kill:1:21")
        self.assertNotEqual(killed.returncode, 0)
        self.assertFalse(os.path.exists(self.metrics))  # only the .partial of a crashed run
        self.assertEqual(sorted(os.listdir(self.dir)),
                         ["ckpt-0000000008.ckpt", "ckpt-0000000016.ckpt", "latest"])
        again = train("--backend", "ps", "--servers", "colocated", "--max-steps", "30",
                      "--checkpoint-dir", self.dir, "--resume", "latest",
                      "--metrics-file", self.metrics, "--summary-file", self.summary)
        self.assertEqual(again.returncode, 0, again.stderr)
        with open(self.summary) as f:
            s = json.load(f)
        self.assertEqual(s["resumed_at_step"], 16)
        self.assertEqual(steps_in(self.metrics), list(range(1, 31)))
        # Per-step bytes are the steps' alone (2 co-located ranks: D each way): restoring the
        # shards' state (worker 0 sends shard 1 its parameters and momentum, D) is set-up, and the
        # final checkpoint's fetch of them (D again) is checkpoint traffic.
        d = s["model"]["bytes"]
        for r in s["ranks"]:
            for k in ("bytes_sent_per_step", "bytes_recv_per_step"):
                self.assertLess(abs(r[k] / d - 1), 0.02, (r["rank"], k, r[k], d))
        self.assertGreaterEqual(s["ranks"][0]["setup_bytes_sent"], d)
        self.assertGreaterEqual(s["ranks"][0]["checkpoint_bytes_recv"], d)

    def test_sigusr1_stops_at_a_checkpoint_and_the_run_resumes(self):
        # 2 workers + 1 dedicated server. The signal must come mid-run however late this process
        # sends it: while the job's ranks poll flat out, a process outside the job's session
        # (this one) slept up to 36 s in time.sleep(0.3) (kernel 6.18, autogroups, 2 cores), and
        # the 1.6M steps of 100000 epochs took only 32-42 s, so the signal came after the last
        # vote and the run ended with 0. Worker 0 sleeping 2 ms a step (--straggler 0:2) makes
        # the run last an hour and leaves this process the CPU; a lost signal still fails the
        # test (communicate's time-out).
        long_run = list(COMMON) + ["--straggler", "0:2"]
        long_run[long_run.index("--epochs") + 1] = "100000"
        # --resume auto: a fresh run on the empty folder, the same command resumes it later
        flags = ["--backend", "ps", "--servers", "1", "--checkpoint-dir", self.dir,
                 "--metrics-file", self.metrics, "--resume", "auto"]
        cmd = [ARGS.mpirun, "-np", "3", ARGS.bin, "train"] + long_run + flags
        # a session of its own: the signal goes to mpirun's process group (mpirun and the
        # stderr filter of scripts/mpirun.sh; the ranks have groups of their own), as a batch
        # system signalling the job's processes (scancel -b -s USR1) does
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             start_new_session=True)
        partial = self.metrics + ".partial"
        deadline = time.time() + 60
        while time.time() < deadline and p.poll() is None:
            if os.path.exists(partial) and os.path.getsize(partial) > 0:
                break
            time.sleep(0.05)
        time.sleep(0.3)  # some steps in
        os.killpg(p.pid, signal.SIGUSR1)  # mpirun passes it on to every rank
        try:
            out, err = p.communicate(timeout=60)
        except subprocess.TimeoutExpired:  # the signal was lost: end the job, then fail
            os.killpg(p.pid, signal.SIGTERM)  # mpirun ends the ranks
            out, err = p.communicate(timeout=30)
            self.fail("still running 60 s after SIGUSR1\n" + out[-2000:] + err[-2000:])
        self.assertEqual(p.returncode, 75, out[-2000:] + err)
        self.assertIn("== StarRing train stopped ==", out)
        self.assertIn("exited with code 75 (stopped on request", err)
        stopped = steps_in(partial)
        at = stopped[-1]
        self.assertEqual(stopped, list(range(1, at + 1)))
        self.assertIn("stopped after step %d on a stop request" % at, out)
        self.assertEqual(sorted(os.listdir(self.dir)), ["ckpt-%010d.ckpt" % at, "latest"])
        self.assertFalse(os.path.exists(self.metrics))  # not finished: only the .partial

        # the same run resumed, told to end soon after
        end = at + 40
        again = subprocess.run(
            [ARGS.mpirun, "-np", "3", ARGS.bin, "train"] + long_run + flags +
            ["--max-steps", str(end), "--summary-file", self.summary],
            capture_output=True, text=True, timeout=120)
        self.assertEqual(again.returncode, 0, again.stderr)
        with open(self.summary) as f:
            self.assertEqual(json.load(f)["resumed_at_step"], at)
        self.assertEqual(steps_in(self.metrics), list(range(1, end + 1)))

    def test_a_stop_request_too_late_to_stop_the_run_is_said(self):
        # 20 steps: the vote's rounds are after steps 8 and 16, each read 2 steps later; a
        # request from step 17 on has no round left before the end. The run ends as planned
        # (0, its summary and last checkpoint) and says why the request did not stop it: a user
        # who sent SIGUSR1 just before the end otherwise sees a plain 0 (a test saw only
        # "Forwarding signal 10").
        r = train("--backend", "ring", "--max-steps", "20", "--checkpoint-dir", self.dir,
                  "--fault", "stop:1:17")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("== StarRing train summary ==", r.stdout)
        self.assertIn("[starring] stop request (SIGUSR1 or --fault stop) on rank(s) 1 came after "
                      "the workers' last vote that could stop the run before its end (step 20): "
                      "it finished as planned, with nothing to resume", r.stderr)
        self.assertIn("ckpt-0000000020.ckpt", os.listdir(self.dir))

    def test_a_stop_whose_metrics_file_failed_exits_with_the_failure(self):
        # a full disk under the metrics file (every write: ENOSPC): the stop's checkpoint is
        # written, but the job fails (1) rather than asking to be resumed (75) from worker 1
        if not os.path.exists("/dev/full"):
            self.skipTest("no /dev/full")
        os.symlink("/dev/full", self.metrics + ".partial")
        r = train("--backend", "ring", "--checkpoint-dir", self.dir, "--metrics-file",
                  self.metrics, "--fault", "stop:1:1")
        self.assertEqual(r.returncode, 1, r.stderr)
        self.assertIn("No space left on device", r.stderr)
        self.assertNotIn("== StarRing train stopped ==", r.stdout)
        self.assertIn("ckpt-0000000010.ckpt", os.listdir(self.dir))

    def test_damaged_or_missing_checkpoint_is_one_clear_error(self):
        empty = train("--backend", "ring", "--max-steps", "4", "--checkpoint-dir", self.dir,
                      "--resume", "latest")
        self.assertNotEqual(empty.returncode, 0)
        self.assertIn("no valid checkpoint in " + self.dir, empty.stderr)

        ok = train("--backend", "ring", "--max-steps", "4", "--checkpoint-dir", self.dir)
        self.assertEqual(ok.returncode, 0, ok.stderr)
        path = os.path.join(self.dir, "ckpt-0000000004.ckpt")
        with open(path, "r+b") as f:
            f.truncate(os.path.getsize(path) // 2)
        bad = train("--backend", "ring", "--max-steps", "8", "--resume", path)
        self.assertNotEqual(bad.returncode, 0)
        self.assertIn("rank 0: checkpoint " + path + ": truncated", bad.stderr)
        self.assertNotIn("Segmentation", bad.stderr)

    def test_a_crafted_checkpoint_is_one_clear_error(self):
        # Valid format and CRC, values no run writes: refused by rank 0 before the job starts,
        # one line naming the file, the field and the rank, exit 2. Before: the position past
        # the epoch (16 steps here) resumed at the next epoch's start with exit 0, and the
        # textual global batch ended the job with the JSON library's type_error (exit 1).
        ok = train("--backend", "ring", "--max-steps", "4", "--checkpoint-dir", self.dir)
        self.assertEqual(ok.returncode, 0, ok.stderr)
        path = os.path.join(self.dir, "ckpt-0000000004.ckpt")
        with open(path, "rb") as f:
            good = f.read()
        cases = [
            (lambda m: m.update(step=100, next_batch=100, epoch_steps=100),
             " does not fit this run: next_batch 100 in the checkpoint is past the 16 steps"),
            (lambda m: m.update(step=5), ": bad metadata: step is 5, not epoch 0 x 16 steps"),
            (lambda m: m.update(global_batch="32"), ": bad metadata: global_batch is \"32\""),
            (lambda m: m.update(lr_workers=2 ** 40), ": bad metadata: lr_workers is"),
            (lambda m: m.update(epoch=2 ** 40), ": bad metadata: epoch is 1099511627776"),
            (lambda m: m.update(widths="32,16,10"), ": bad metadata: widths is \"32,16,10\""),
        ]
        for patch, said in cases:
            with open(path, "wb") as f:
                f.write(good)
            patch_meta(path, patch)
            bad = train("--backend", "ring", "--max-steps", "8", "--checkpoint-dir", self.dir,
                        "--resume", path)
            self.assertEqual(bad.returncode, 2, bad.stderr)
            self.assertIn("rank 0: checkpoint " + path + said, bad.stderr)
            self.assertEqual(len([l for l in bad.stderr.splitlines() if path in l]), 1,
                             bad.stderr)

    def test_a_fresh_run_refuses_a_folder_holding_another_runs_checkpoints(self):
        first = train("--backend", "ring", "--max-steps", "4", "--checkpoint-dir", self.dir)
        self.assertEqual(first.returncode, 0, first.stderr)
        before = sorted(os.listdir(self.dir))
        again = train("--backend", "ring", "--max-steps", "8", "--checkpoint-dir", self.dir)
        self.assertEqual(again.returncode, 2, again.stderr)
        self.assertIn("already holds checkpoints", again.stderr)
        self.assertIn("--resume latest", again.stderr)
        self.assertEqual(sorted(os.listdir(self.dir)), before)  # nothing written or deleted

    def test_a_resume_from_elsewhere_refuses_a_folder_holding_another_runs_checkpoints(self):
        # before: run A resumed from its step 4 into run B's folder wrote among B's files, and
        # its rotation deleted B's ckpt-4 (and its step 8 would have replaced B's)
        other = os.path.join(self.tmp.name, "other")
        a = train("--backend", "ring", "--max-steps", "4", "--checkpoint-dir", other)
        self.assertEqual(a.returncode, 0, a.stderr)
        b = train("--backend", "ring", "--max-steps", "8", "--seed", "5", "--checkpoint-dir",
                  self.dir, "--checkpoint-every", "4", "--keep-checkpoints", "1")
        self.assertEqual(b.returncode, 0, b.stderr)
        before = folder_bytes(self.dir)
        path = os.path.join(other, "ckpt-0000000004.ckpt")
        bad = train("--backend", "ring", "--max-steps", "8", "--checkpoint-dir", self.dir,
                    "--checkpoint-every", "2", "--resume", path)
        self.assertEqual(bad.returncode, 2, bad.stderr)
        self.assertIn("rank 0: --checkpoint-dir: folder '%s' already holds checkpoints" % self.dir,
                      bad.stderr)
        self.assertIn("--resume %s is not in it" % path, bad.stderr)
        self.assertEqual(folder_bytes(self.dir), before)  # nothing written, replaced or deleted

    def test_the_folder_refusal_judges_links_by_their_file_and_leaves_folders_to_resume(self):
        other = os.path.join(self.tmp.name, "other")
        a = train("--backend", "ring", "--max-steps", "4", "--checkpoint-dir", other)
        self.assertEqual(a.returncode, 0, a.stderr)
        b = train("--backend", "ring", "--max-steps", "4", "--seed", "5", "--checkpoint-dir",
                  self.dir)
        self.assertEqual(b.returncode, 0, b.stderr)
        # a link in the folder to another run's file is that run's file: refused
        link = os.path.join(self.dir, "from-other.ckpt")
        os.symlink(os.path.join(other, "ckpt-0000000004.ckpt"), link)
        bad = train("--backend", "ring", "--max-steps", "8", "--checkpoint-dir", self.dir,
                    "--resume", link)
        self.assertEqual(bad.returncode, 2, bad.stderr)
        self.assertIn("--resume %s is not in it" % link, bad.stderr)
        # the folder itself given to --resume is not "a checkpoint outside it"
        folder = train("--backend", "ring", "--max-steps", "8", "--checkpoint-dir", self.dir,
                       "--resume", self.dir)
        self.assertNotEqual(folder.returncode, 0, folder.stderr)
        self.assertNotIn("is not in it", folder.stderr)
        # a folder whose only trace of a run is a 'latest' naming nothing left: nothing to lose
        os.remove(link)
        for name in os.listdir(self.dir):
            if name != "latest":
                os.remove(os.path.join(self.dir, name))
        fresh = train("--backend", "ring", "--max-steps", "4", "--checkpoint-dir", self.dir)
        self.assertEqual(fresh.returncode, 0, fresh.stderr)

    def test_a_resume_with_another_rate_says_so_in_the_summary_under_progress_off(self):
        # The note naming a changed setting was a progress message only: --progress off (as
        # here, and in every sweep) hid it, and the run's record did not keep it.
        first = train("--backend", "ring", "--max-steps", "4", "--checkpoint-dir", self.dir)
        self.assertEqual(first.returncode, 0, first.stderr)
        second = train("--backend", "ring", "--max-steps", "8", "--checkpoint-dir", self.dir,
                       "--resume", "latest", "--lr", "0.02", "--summary-file", self.summary)
        self.assertEqual(second.returncode, 0, second.stderr)
        self.assertIn("with other settings than the checkpoint's run (from step 5): --lr 0.02 "
                      "(0.05 in the checkpoint)\n", second.stdout)
        with open(self.summary) as f:
            s = json.load(f)
        self.assertEqual(s["resumed_with_changes"], "--lr 0.02 (0.05 in the checkpoint)")

    def test_a_resume_with_another_seed_is_refused_by_rank_0_before_the_job_starts(self):
        # Rank 0 checks the checkpoint against the run before any communication, so a dedicated
        # server does not wait for workers that refuse it, and the refusal is said once.
        first = train("--backend", "ring", "--max-steps", "4", "--checkpoint-dir", self.dir)
        self.assertEqual(first.returncode, 0, first.stderr)
        cmd = [ARGS.mpirun, "-np", "3", ARGS.bin, "train"] + COMMON + [
            "--backend", "ps", "--servers", "1", "--max-steps", "8", "--checkpoint-dir",
            self.dir, "--resume", "latest", "--seed", "43"]
        bad = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        self.assertEqual(bad.returncode, 2, bad.stderr)
        path = os.path.join(self.dir, "ckpt-0000000004.ckpt")
        self.assertIn("rank 0: checkpoint " + path + " does not fit this run: seed 42 in the "
                      "checkpoint, --seed 43 in this run", bad.stderr)
        self.assertNotIn("also rank", bad.stderr)

    def test_a_fault_the_checkpoint_has_passed_is_refused(self):
        # A worker's kill or hang fires at its step exactly; a resumed run starts after the
        # checkpoint's step, so --fault kill:1:3 on a resume from step 4 never fired and the run
        # ended with exit 0, as if the fault had been survived.
        first = train("--backend", "ring", "--max-steps", "4", "--checkpoint-dir", self.dir)
        self.assertEqual(first.returncode, 0, first.stderr)
        bad = train("--backend", "ring", "--max-steps", "8", "--checkpoint-dir", self.dir,
                    "--resume", "latest", "--fault", "kill:1:3")
        self.assertEqual(bad.returncode, 2, bad.stderr)
        self.assertIn("--fault kill:1:3: the run resumes after step 4", bad.stderr)
        self.assertIn("step 3 is never reached", bad.stderr)


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--bin", required=True)
    p.add_argument("--mpirun", required=True)
    ARGS, rest = p.parse_known_args()
    bin_main.run(sys.modules[__name__], rest)
