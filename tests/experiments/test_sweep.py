#!/usr/bin/env python3
"""Tests of the sweep driver (scripts/sweep.sh) against the real `starring` executable:
  test_sweep.py --bin build/bin/starring
A tiny sweep (synthetic data, a 16-unit MLP, 4 steps, np 1 and 2, ring and PS) must write
well-formed records (schema-checked), bench rows, a trace per rank, and the report; a run with a
bad flag and a run past its time bound must be recorded as failed / timeout, not dropped; a
`requires = gpu` variant runs only where each rank has a GPU; and the
shipped sweep files must only use flags that `starring train/bench --help` knows.
What Ctrl-C does to a sweep and its jobs: test_sweep_interrupt.py.
"""
import glob
import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest
from unittest import mock

import bin_main
from sweep_ini import small_sweep

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
SWEEP = os.path.join(REPO, "scripts", "sweep.sh")
sys.path.insert(0, os.path.join(REPO, "scripts"))
import starring_results as sr  # noqa: E402
import sweep as driver  # noqa: E402
import sweep_jobs  # noqa: E402

BIN = None  # set from --bin
# Each case runs its own sweeps (a few tiny runs, mostly mpirun's start and the driver's Python)
# in its own folder, with no bound on their time but the sweep's timeout_s: three at once
# (bin_main.py), the tiny sweep of TinySweep's setUpClass among them.
OVERLAP = 3

TINY = """
[sweep]
description = tiny sweep for the driver test
timeout_s = 120
trace = yes
report = yes

[train]
dataset = synthetic
synthetic-train = 512
synthetic-test = 128
synthetic-dim = 32
hidden = 16
epochs = 1
max-steps = 4
batch = 16
progress = off

[grid]
workers = 1 2

[variant ring]
backend = ring

[variant ps-1]
backend = ps
servers = 1
workers = 1

[variant ps-colocated]
backend = ps
servers = colocated
workers = 2

[bench allreduce]
np = 2
args = --backends ring -b 1K -e 4K -f 2 -n 2 -w 1
"""


BROKEN_REST = """
[grid]
workers = 1

[variant bad-value]
backend = ring
hidden = 0

[variant too-long]
backend = ring
epochs = 100000
"""


def sweep(ini_text, tmp, *extra, env=None):
    ini = os.path.join(tmp, "sweep.ini")
    with open(ini, "w") as f:
        f.write(ini_text)
    out = os.path.join(tmp, "results")
    proc = subprocess.run([SWEEP, ini, "--out", out, "--bin", BIN, *extra], capture_output=True,
                          text=True, timeout=600, env=env)
    return proc, out


class TinySweep(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="starring_sweep_test_")
        cls.proc, cls.out = sweep(TINY, cls.tmp)
        cls.runs, cls.bad = sr.read_jsonl(os.path.join(cls.out, "runs.jsonl"))

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def test_every_run_is_ok_and_well_formed(self):
        msg = self.proc.stdout + self.proc.stderr
        self.assertEqual(self.bad, [])
        self.assertEqual([(r["variant"], r["workers"], r["np"]) for r in self.runs],
                         [("ring", 1, 1), ("ring", 2, 2), ("ps-1", 1, 2), ("ps-colocated", 2, 2)],
                         msg)
        for r in self.runs:
            self.assertEqual(r["status"], "ok", r.get("log_tail", "") + msg)
            self.assertEqual(sr.check_record(r, r["run_id"]), [])
            self.assertEqual(r["steps"], 4)
            self.assertEqual(r["model"]["widths"], [32, 16, 10])
            self.assertEqual(r["sweep"], "sweep")
            self.assertEqual(r["config"]["backend"], r["backend"])
            self.assertEqual(r["oversubscribed"], r["np"] > r["cores"])
            # the other processes' load on the host while it ran (Linux: /proc/stat)
            self.assertGreaterEqual(r["host_other_cpus"], 0.0)
        ps = self.runs[2]
        self.assertEqual((ps["num_servers"], ps["roles"]), (1, {"worker": 1, "server": 1}))
        self.assertEqual(sorted(x["role"] for x in ps["ranks"]), ["server", "worker"])
        self.assertGreater(ps["bytes_per_step"]["server_recv"], 0)
        self.assertEqual(self.proc.returncode, 0, msg)

    def test_bytes_per_step_are_the_theory_and_setup_is_apart(self):
        # D = 2,792 bytes of gradients. Ring, 2 ranks: D each way per step, exactly. PS, 1
        # worker and 1 server: D each way plus a 32-byte header per chunk (1 chunk); worker 0's
        # initial parameters (D, once) are set-up bytes, not a quarter more on each of 4 steps.
        d = self.runs[0]["model"]["bytes"]
        self.assertEqual(d, (32 * 16 + 16 + 16 * 10 + 10) * 4)
        ring = self.runs[1]["bytes_per_step"]
        self.assertEqual((ring["worker_sent"], ring["worker_recv"]), (d, d))
        ps = self.runs[2]
        for k in ("worker_sent", "worker_recv", "server_sent", "server_recv"):
            self.assertLess(abs(ps["bytes_per_step"][k] / d - 1), 0.02, (k, ps["bytes_per_step"]))
        worker = next(r for r in ps["ranks"] if r["role"] == "worker")
        server = next(r for r in ps["ranks"] if r["role"] == "server")
        self.assertGreaterEqual(worker["setup_bytes_sent"], d)
        self.assertGreaterEqual(server["setup_bytes_recv"], d)
        # Co-located, 2 ranks: 2(N-1)/N D = D each way per rank; worker 0's initial parameters
        # for rank 1's shard (D/2) are rank 1's set-up, and worker 0's first push to that shard
        # is not (a missed push would put a rank 12 % under D over these 4 steps).
        co = self.runs[3]
        for r in co["ranks"]:
            for k in ("bytes_sent_per_step", "bytes_recv_per_step"):
                self.assertLess(abs(r[k] / d - 1), 0.02, (r["rank"], k, r[k], d))
        self.assertGreaterEqual(co["ranks"][1]["setup_bytes_recv"], d / 2)

    def test_train_summary_prints_each_servers_bytes(self):
        # a dedicated server's load was only in the summary file, not in what the run prints
        for r in self.runs:
            with open(os.path.join(self.out, r["log_file"])) as f:
                log = f.read()
            b = r["bytes_per_step"]
            line = (f"bytes per server per step: recv {b['server_recv']:.0f}  "
                    f"sent {b['server_sent']:.0f}\n")
            if r["variant"] == "ps-1":
                self.assertIn(line, log)
                self.assertGreater(b["server_recv"], 0)
            else:
                self.assertNotIn("bytes per server per step", log, r["variant"])

    def test_metrics_file_has_one_line_per_step(self):
        for r in self.runs:
            lines, bad = sr.read_jsonl(os.path.join(self.out, r["metrics_file"]))
            self.assertEqual(bad, [])
            steps = [l for l in lines if "event" not in l]
            self.assertEqual(len(steps), 4, r["run_id"])
            for key in ("step", "time_s", "loss", "global_loss", "loss_min", "loss_max",
                        "loss_max_worker", "compute_s", "comm_s", "wait_s", "bytes_sent"):
                self.assertIn(key, steps[0])

    def test_trace_files_parse_and_hold_events_for_every_rank(self):
        for r in self.runs:
            self.assertEqual(len(r["trace_files"]), r["np"])
            for rank, rel in enumerate(r["trace_files"]):
                with open(os.path.join(self.out, rel)) as f:
                    doc = json.load(f)
                events = doc["traceEvents"]
                spans = [e for e in events if e["ph"] == "X"]
                self.assertTrue(spans, f"{rel}: no events")
                self.assertEqual({e["pid"] for e in events}, {rank}, rel)
                self.assertTrue(any(e["ph"] == "M" and e["name"] == "thread_name"
                                    for e in events), rel)
            with open(os.path.join(self.out, r["trace_merged"])) as f:
                merged = json.load(f)["traceEvents"]
            self.assertEqual({e["pid"] for e in merged if e["ph"] == "X"}, set(range(r["np"])))
            # workers trace forward/backward and the backend's communication; servers their work
            for rank, rel in enumerate(r["trace_files"]):
                with open(os.path.join(self.out, rel)) as f:
                    spans = [e for e in json.load(f)["traceEvents"] if e["ph"] == "X"]
                names, cats = {e["name"] for e in spans}, {e["cat"] for e in spans}
                if r["ranks"][rank]["role"] == "worker":
                    self.assertTrue({"forward", "backward"} <= names, (rel, names))
                    if r["np"] > 1:
                        self.assertIn("comm", cats, rel)
                else:
                    self.assertIn("server", cats, rel)
                    # the push that completes a round runs the optimizer: the timeline says so
                    self.assertIn("push+apply", names, rel)

    def test_bench_rows(self):
        rows, bad = sr.read_jsonl(os.path.join(self.out, "bench.jsonl"))
        self.assertEqual(bad, [])
        data = [b for b in rows if "size" in b]
        self.assertEqual(sorted(b["size"] for b in data), [1024, 2048, 4096])
        for b in rows:
            self.assertEqual(sr.check_bench_row(b), [])
            self.assertEqual(b.get("wrong", 0), 0)
            self.assertEqual(b["np"], 2)

    def test_report_was_written(self):
        self.assertTrue(os.path.getsize(os.path.join(self.out, "report", "report.html")) > 1000)
        self.assertIn("report:", self.proc.stdout)
        self.assertIn("ring", self.proc.stdout)


class FailuresAreRecorded(unittest.TestCase):
    def test_bad_flag_fails_and_overrun_times_out(self):
        with tempfile.TemporaryDirectory(prefix="starring_sweep_test_") as tmp:
            # a bound of 12 s: at 4 s the bad-value run (an error at the option check) timed out
            # in the clean-clone .ci/run of fbe85a2 at load 8: under mpirun the CUDA-linked
            # binary took 3.6-8.2 s to start and refuse --hidden 0 (cuBLAS and NCCL loaded)
            proc, out = sweep(small_sweep(12, "", BROKEN_REST), tmp, "--no-bench")
            runs, _ = sr.read_jsonl(os.path.join(out, "runs.jsonl"))
            self.assertEqual([(r["variant"], r["status"]) for r in runs],
                             [("bad-value", "failed"), ("too-long", "timeout")],
                             proc.stdout + proc.stderr)
            for r in runs:
                self.assertEqual(sr.check_record(r), [])
            self.assertIn("--hidden", runs[0]["log_tail"])
            self.assertEqual(runs[1]["exit_code"], 124)
            self.assertNotEqual(proc.returncode, 0)

    def test_results_folder_that_cannot_be_made_is_one_line(self):
        # it was a traceback from os.makedirs
        with tempfile.TemporaryDirectory(prefix="starring_sweep_test_") as tmp:
            plain = os.path.join(tmp, "plain")
            open(plain, "w").close()
            ini = os.path.join(tmp, "sweep.ini")
            with open(ini, "w") as f:
                f.write(small_sweep(4, "", BROKEN_REST))
            proc = subprocess.run([SWEEP, ini, "--out", os.path.join(plain, "results"), "--bin",
                                   BIN, "--no-bench"], capture_output=True, text=True, timeout=60)
            self.assertNotEqual(proc.returncode, 0)
            self.assertIn("cannot create the results folder", proc.stderr)
            self.assertNotIn("Traceback", proc.stderr)

    def test_results_folder_that_cannot_be_written_is_one_line(self):
        # An --out folder that exists but takes no runs (a read-only mount; here its runs/ is a
        # plain file): a traceback from os.makedirs after the first run had been launched.
        with tempfile.TemporaryDirectory(prefix="starring_sweep_test_") as tmp:
            out = os.path.join(tmp, "results")
            os.makedirs(out)
            open(os.path.join(out, "runs"), "w").close()
            ini = os.path.join(tmp, "sweep.ini")
            with open(ini, "w") as f:
                f.write(small_sweep(4, "", BROKEN_REST))
            proc = subprocess.run([SWEEP, ini, "--out", out, "--bin", BIN, "--no-bench"],
                                  capture_output=True, text=True, timeout=60)
            self.assertNotEqual(proc.returncode, 0)
            self.assertIn("cannot write in the results folder", proc.stderr)
            self.assertNotIn("Traceback", proc.stderr)
            self.assertNotIn("[1/2]", proc.stdout)  # found before any run
            self.assertEqual(sorted(os.listdir(out)), ["runs"])


class RepeatsRunInRounds(unittest.TestCase):
    def test_every_run_is_made_n_times_and_named_apart(self):
        rest = "[grid]\nworkers = 1\n\n[variant a]\nbackend = ring\n\n[variant b]\nbackend = mpi\n"
        with tempfile.TemporaryDirectory(prefix="starring_sweep_test_") as tmp:
            proc, out = sweep(small_sweep(60, "max-steps = 3", rest), tmp, "--no-bench",
                              "--repeat", "2")
            self.assertEqual(proc.returncode, 0, proc.stdout + proc.stderr)
            runs, bad = sr.read_jsonl(os.path.join(out, "runs.jsonl"))
            self.assertEqual(bad, [])
            # in rounds: every configuration once, then again
            self.assertEqual([(r["variant"], r["repeat"], r["repeats"]) for r in runs],
                             [("a", 1, 2), ("b", 1, 2), ("a", 2, 2), ("b", 2, 2)])
            self.assertEqual(len({r["run_id"] for r in runs}), 4)
            self.assertTrue(all(r["run_id"].endswith(f"-r{r['repeat']}") for r in runs))
            for r in runs:
                self.assertEqual(r["status"], "ok", r.get("log_tail"))
                self.assertEqual(sr.check_record(r), [])
            self.assertEqual(len(sr.collapse_repeats(runs)), 2)
            proc, _ = sweep(small_sweep(60, "", rest), tmp, "--repeat", "0", "--dry-run")
            self.assertNotEqual(proc.returncode, 0)
            self.assertIn("repeats must be a whole number >= 1", proc.stderr)


class SweepAgainIntoTheSameFolder(unittest.TestCase):
    def test_the_earlier_runs_keep_their_own_files(self):
        # `--out DIR` appends (and the Ctrl-C message suggests it to add to a folder): the second
        # pass used the same run ids, so its files overwrote the first pass's, whose records then
        # pointed at the second pass's summary, metrics and log.
        rest = ("[grid]\nworkers = 1\n\n[variant a]\nbackend = ring\n\n[bench b]\nnp = 1\n"
                "args = --backends ring -b 1K -e 1K -n 1 -w 0\n")
        with tempfile.TemporaryDirectory(prefix="starring_sweep_test_") as tmp:
            for _ in range(2):
                proc, out = sweep(small_sweep(60, "max-steps = 2", rest), tmp, "--no-report")
                self.assertEqual(proc.returncode, 0, proc.stdout + proc.stderr)
            runs, bad = sr.read_jsonl(os.path.join(out, "runs.jsonl"))
            self.assertEqual(bad, [])
            self.assertEqual(len(runs), 2)
            self.assertEqual(len({r["run_id"] for r in runs}), 2, [r["run_id"] for r in runs])
            for r in runs:
                self.assertEqual(r["status"], "ok", r.get("log_tail"))
                self.assertEqual(sr.check_record(r), [])
                with open(os.path.join(out, r["summary_file"])) as f:
                    self.assertEqual(json.load(f)["run_name"], r["run_id"])
                with open(os.path.join(out, r["log_file"])) as f:
                    self.assertIn(f"--run-name {r['run_id']}\n", f.readline())
            self.assertEqual(len(sr.collapse_repeats(runs)), 1)  # the same configuration twice
            logs = glob.glob(os.path.join(out, "runs", "*bench*.log"))
            self.assertEqual(len(logs), 2, logs)
            bench, _ = sr.read_jsonl(os.path.join(out, "bench.jsonl"))
            self.assertEqual(len(bench), 2)
            self.assertEqual(len(sr.collapse_bench_repeats(bench)), 1)


class UnknownKeysStopTheSweep(unittest.TestCase):
    def test_a_typo_is_one_error_before_any_run(self):
        rest = ("[grid]\nworkers = 1\n\n[variant ok]\nbackend = ring\n\n[variant typo]\n"
                "backend = ring\nbucket-mbs = 4\n\n[bench b]\nnp = 2\nargs = --backends ring "
                "--itres 3\n")
        with tempfile.TemporaryDirectory(prefix="starring_sweep_test_") as tmp:
            proc, out = sweep(small_sweep(60, "", rest), tmp)
            self.assertEqual(proc.returncode, 2, proc.stdout + proc.stderr)
            self.assertIn("variant typo: 'bucket-mbs' is not a `starring train` option",
                          proc.stderr)
            self.assertIn("bench b: '--itres' is not a `starring bench` option", proc.stderr)
            self.assertNotIn("variant ok", proc.stderr)
            self.assertFalse(os.path.exists(os.path.join(out, "runs.jsonl")))

    def test_a_dry_run_checks_the_flags_too(self):
        # --dry-run listed `--epoch 1` (a typo of --epochs) and exited 0: the plan looked good
        # and only the real sweep refused it
        rest = "[grid]\nworkers = 1\n\n[variant typo]\nbackend = ring\nepoch = 1\n"
        with tempfile.TemporaryDirectory(prefix="starring_sweep_test_") as tmp:
            proc, out = sweep(small_sweep(60, "", rest), tmp, "--dry-run")
            self.assertEqual(proc.returncode, 2, proc.stdout + proc.stderr)
            self.assertIn("--epoch 1", proc.stdout)  # the plan is still shown
            self.assertIn("variant typo: 'epoch' is not a `starring train` option", proc.stderr)
            self.assertFalse(os.path.exists(out))
            proc, _ = sweep(small_sweep(60, "", rest.replace("epoch =", "epochs =")), tmp,
                            "--dry-run")
            self.assertEqual(proc.returncode, 0, proc.stdout + proc.stderr)

    def test_a_flag_the_driver_sets_is_one_error_before_any_run(self):
        # `metrics-file = m.jsonl` in a sweep file: every run got the flag twice and failed
        rest = "[grid]\nworkers = 1\n\n[variant own]\nbackend = ring\nmetrics-file = m.jsonl\n"
        with tempfile.TemporaryDirectory(prefix="starring_sweep_test_") as tmp:
            proc, out = sweep(small_sweep(60, "", rest), tmp)
            self.assertEqual(proc.returncode, 2, proc.stdout + proc.stderr)
            self.assertIn("variant own: 'metrics-file' is set by the sweep driver", proc.stderr)
            self.assertFalse(os.path.exists(os.path.join(out, "runs.jsonl")))


FAULTS = small_sweep(60, "max-steps = 200\ntimeout = 2", """
[grid]
workers = 2
fault = kill:1:3 hang:1:3

[variant ring]
backend = ring
""")


class FaultsAreMeasured(unittest.TestCase):
    def test_a_killed_and_a_silent_rank_are_detected_named_and_timed(self):
        with tempfile.TemporaryDirectory(prefix="starring_sweep_test_") as tmp:
            proc, out = sweep(FAULTS, tmp, "--no-bench")
            msg = proc.stdout + proc.stderr
            runs, _ = sr.read_jsonl(os.path.join(out, "runs.jsonl"))
            self.assertEqual([r["fault"]["spec"] for r in runs], ["kill:1:3", "hang:1:3"], msg)
            for r in runs:
                f = r["fault"]
                self.assertEqual(sr.check_record(r), [])
                self.assertEqual((r["status"], f["outcome"], f["rank"], f["step"]),
                                 ("failed", "detected", 1, 3), r.get("log_tail", "") + msg)
                self.assertTrue(sr.expected_failure(r))
                # measured from the rank's own clock: after the fault, before the sweep's bound
                self.assertGreater(f["detect_s"], 0)
                self.assertLess(f["detect_s"], r["elapsed_s"])
            self.assertEqual(runs[0]["exit_code"], 137)  # mpirun passes on the rank's SIGKILL
            self.assertGreaterEqual(runs[1]["fault"]["detect_s"], 2.0)  # not before --timeout
            self.assertEqual(proc.returncode, 0, msg)  # the faults did what they were meant to


GPU_VARIANT = small_sweep(60, "max-steps = 4", """
[grid]
workers = 1 2

[variant needs-gpu]   # a CPU backend, so that the run the skip lets through works here
backend = ring
requires = gpu

[variant shares-gpu]
backend = ring
requires = shared-gpu
""")


class GpuVariantsFitTheGpus(unittest.TestCase):
    """`requires = gpu` runs only where every rank has a GPU (NCCL takes one per rank): with
    one GPU (a stand-in nvidia-smi listing one) the 1-worker run runs and the 2-worker run is
    skipped with the reason; `requires = shared-gpu` runs both there (ranks share the GPU); with
    none (an nvidia-smi that fails) every run is skipped."""

    def run_with_gpus(self, listing, *args, visible=None):
        with tempfile.TemporaryDirectory(prefix="starring_sweep_test_") as tmp:
            env = self.fake_gpus(tmp, listing, visible)
            proc, out = sweep(GPU_VARIANT, tmp, "--no-bench", *args, env=env)
            runs, _ = sr.read_jsonl(os.path.join(out, "runs.jsonl"))
            for r in runs:
                self.assertEqual(sr.check_record(r), [])
            return [(r["workers"], r["status"], r.get("reason", "")) for r in runs], proc

    @staticmethod
    def fake_gpus(tmp, listing, visible=None):
        """An environment whose nvidia-smi lists `listing` (None: fails, no GPU)."""
        fake = os.path.join(tmp, "bin")
        os.mkdir(fake)
        with open(os.path.join(fake, "nvidia-smi"), "w") as f:
            f.write("#!/bin/sh\n" + (f"echo '{listing}'\n" if listing else "exit 9\n"))
        os.chmod(os.path.join(fake, "nvidia-smi"), 0o755)
        env = dict(os.environ, PATH=fake + os.pathsep + os.environ["PATH"])
        env.pop("CUDA_VISIBLE_DEVICES", None)
        if visible is not None:
            env["CUDA_VISIBLE_DEVICES"] = visible
        return env

    def test_a_dry_run_marks_the_runs_it_would_skip(self):
        # `scripts/sweep.sh scaling --dry-run` on a host without a GPU listed the nccl runs
        # like the others; the sweep then skipped them
        with tempfile.TemporaryDirectory(prefix="starring_sweep_test_") as tmp:
            proc, _ = sweep(GPU_VARIANT, tmp, "--dry-run",
                            env=self.fake_gpus(tmp, "GPU 0: NVIDIA H200 (UUID: GPU-0)"))
        self.assertEqual(proc.returncode, 0, proc.stdout + proc.stderr)
        plan = [l for l in proc.stdout.splitlines() if " W=" in l]
        self.assertEqual([l.split(":")[0].split() + [l.endswith("]")] for l in plan],
                         [["needs-gpu", "W=1", "np=1", False], ["needs-gpu", "W=2", "np=2", True],
                          ["shares-gpu", "W=1", "np=1", False],
                          ["shares-gpu", "W=2", "np=2", False]], proc.stdout)
        self.assertTrue(plan[1].endswith("  [skipped here: variant requires one GPU per rank: "
                                         "2 ranks, 1 GPU(s) on this host]"), plan[1])

    def test_one_gpu_runs_one_rank_and_skips_two(self):
        got, proc = self.run_with_gpus("GPU 0: NVIDIA H200 (UUID: GPU-0)")
        self.assertEqual(got, [(1, "ok", ""), (2, "skipped", "variant requires one GPU per rank: "
                                                       "2 ranks, 1 GPU(s) on this host"),
                               (1, "ok", ""), (2, "ok", "")], proc.stdout + proc.stderr)

    def test_cuda_visible_devices_limits_the_gpus_listed(self):
        # Two GPUs listed, one visible: as with one GPU.
        got, proc = self.run_with_gpus("GPU 0: NVIDIA H200 (UUID: GPU-0)\nGPU 1: NVIDIA H200 "
                                       "(UUID: GPU-1)", visible="1")
        self.assertEqual([g[1] for g in got], ["ok", "skipped", "ok", "ok"],
                         proc.stdout + proc.stderr)

    def test_gpus_flag_counts_the_allocation_not_this_host(self):
        # A login node without GPUs launching onto GPU nodes (srun): --gpus gives the total.
        got, proc = self.run_with_gpus(None, "--gpus", "2")
        self.assertEqual([g[1] for g in got], ["ok"] * 4, proc.stdout + proc.stderr)

    def test_no_gpu_skips_every_run(self):
        got, proc = self.run_with_gpus(None)
        self.assertEqual([g[1:] for g in got],
                         [("skipped", "variant requires a GPU and none was found")] * 4,
                         proc.stdout + proc.stderr)


class ShippedSweeps(unittest.TestCase):
    def test_sweep_files_use_only_known_flags(self):
        # `starring train --help` and `starring bench --help` once each, not twice per file
        # (34 starts of the binary took 21 s of the 58 s this file took at load 12)
        flags = {c: sweep_jobs.help_flags(BIN, c) for c in ("train", "bench")}
        self.assertIn("max-steps", flags["train"])
        self.assertIn("n", flags["bench"])
        files = sorted(glob.glob(os.path.join(REPO, "experiments", "sweeps", "*.ini")))
        self.assertTrue(any(f.endswith("main.ini") for f in files))
        with mock.patch.object(sweep_jobs, "help_flags", lambda binary, c: flags[c]):
            for path in files:
                for quick in (False, True):
                    _, tr, grid, variants, benches = driver.load_sweep(path, quick)
                    runs = driver.expand_runs(tr, grid, variants)
                    self.assertEqual(driver.unknown_flags(BIN, runs, benches), [], path)


if __name__ == "__main__":
    bin_main.main(sys.modules[__name__])
