#!/usr/bin/env python3
"""What `starring train` says about the ranks of a job, in its summary file and its end-of-run
lines, on small synthetic runs of the real executable:
  test_train_summary.py --bin build/bin/starring
the busiest server and co-located worker beside the mean (--ps-partition tensor unbalances the
shards), time-sharing judged host by host from the CPUs the ranks may use, and which ranks take
a GPU under --device cuda."""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest

import bin_main

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
MPIRUN = os.path.join(REPO, "scripts", "mpirun.sh")

BIN = None  # set from --bin
# Each case is one to three short training jobs read for their figures and lines, not their speed
# (a straggler's sleeps only lengthen steps): five at once (bin_main.py).
OVERLAP = 5


def train(launcher, *flags, steps=4):
    """Runs a 16-unit MLP on synthetic data for `steps` steps with `launcher` (a list ending in
    the rank count); returns the process and the summary file's JSON."""
    with tempfile.TemporaryDirectory(prefix="starring_summary_test_") as tmp:
        summary = os.path.join(tmp, "s.json")
        p = subprocess.run(
            launcher + [BIN, "train", "--dataset", "synthetic", "--synthetic-train", "512",
                        "--synthetic-test", "64", "--synthetic-dim", "32", "--hidden", "16",
                        "--max-steps", str(steps), "--batch", "16", "--progress", "off",
                        "--summary-file", summary, *flags],
            capture_output=True, text=True, timeout=120)
        if p.returncode != 0:
            raise AssertionError(f"exit {p.returncode}\n{p.stdout}{p.stderr}")
        with open(summary, encoding="utf-8") as f:
            return p, json.load(f)


class BusiestRanks(unittest.TestCase):
    def test_unbalanced_servers_name_their_busiest(self):
        # --ps-partition tensor puts whole tensors on servers round-robin: the line printed the
        # mean over servers (W x D/S, the balanced theory) and hid a server with most of the load
        p, j = train([MPIRUN, "-np", "4"], "--backend", "ps", "--servers", "2",
                     "--ps-partition", "tensor")
        b = j["bytes_per_step"]
        loads = sorted(r["bytes_recv_per_step"] for r in j["ranks"] if r["role"] == "server")
        self.assertEqual(b["server_recv_busiest"], loads[-1])
        self.assertEqual(b["server_recv"], sum(loads) / 2)
        self.assertGreater(loads[-1], 1.2 * loads[0])
        self.assertIn(f"(mean of 2; busiest, rank {b['server_busiest_rank']}: recv "
                      f"{b['server_recv_busiest']:.0f}  sent {b['server_sent_busiest']:.0f})",
                      p.stdout)

    def test_unbalanced_colocated_workers_name_their_busiest(self):
        # co-located shards under --ps-partition tensor are unbalanced the same way: the line and
        # the summary gave the mean over workers, the theory 2(N-1)/N x D (np 3, this model:
        # rank 0 moved 4944 bytes a step against a mean of 3808)
        colocated = ([MPIRUN, "-np", "3"], "--backend", "ps", "--servers", "colocated")
        p, j = train(*colocated, "--ps-partition", "tensor")
        b = j["bytes_per_step"]
        sent = {r["rank"]: r["bytes_sent_per_step"] for r in j["ranks"]}
        top = max(sent, key=sent.get)
        self.assertEqual((b["worker_busiest_rank"], b["worker_sent_busiest"]), (top, sent[top]))
        self.assertEqual(b["worker_recv_busiest"], j["ranks"][top]["bytes_recv_per_step"])
        self.assertAlmostEqual(b["worker_sent"], sum(sent.values()) / 3)
        self.assertGreater(sent[top], 1.2 * b["worker_sent"])
        self.assertIn(f"bytes per worker per step: sent {b['worker_sent']:.0f}  recv "
                      f"{b['worker_recv']:.0f} (mean of 3; busiest, rank {top}: sent "
                      f"{sent[top]:.0f}  recv {b['worker_recv_busiest']:.0f})\n", p.stdout)
        # balanced shards (range): one figure, the busiest equal to the mean within 1%
        p, j = train(*colocated, "--ps-partition", "range")
        b = j["bytes_per_step"]
        self.assertLess(b["worker_sent_busiest"], 1.01 * b["worker_sent"])
        self.assertIn(f"bytes per worker per step: sent {b['worker_sent']:.0f}  recv "
                      f"{b['worker_recv']:.0f}\n", p.stdout)


class ServerRecords(unittest.TestCase):
    """What every host of a parameter-server shard reports about it: its staleness record and the
    time it spent on pushes."""

    def test_staleness_record_counts_every_push_of_every_shard(self):
        # bsp, 4 steps, this model in one bucket and one chunk per shard: every shard sees W x 4
        # pushes, all at staleness 0. The summary sums the ranks' records (each host reports its
        # shard once): 3 co-located shards of 3 workers 36, one dedicated server of 2 workers 8.
        for launcher, servers, shards, workers in (([MPIRUN, "-np", "3"], "colocated", 3, 3),
                                                   ([MPIRUN, "-np", "3"], "1", 1, 2)):
            with self.subTest(servers=servers):
                p, j = train(launcher, "--backend", "ps", "--servers", servers)
                pushes = workers * 4 * shards
                self.assertEqual(j["staleness_hist"], {"0": pushes}, p.stdout)
                hosts = [r for r in j["ranks"] if r["role"] == "server" or servers == "colocated"]
                self.assertEqual(len(hosts), shards)
                for r in hosts:
                    self.assertEqual(r["staleness_hist"], {"0": workers * 4}, r)
                    # the time the shard spent handling pushes: some (a dedicated server's and a
                    # co-located worker's own shard's alike)
                    self.assertGreater(r["busy_s"], 0.0, r)

    def test_busy_time_leaves_out_the_untimed_steps_as_the_workers_times_do(self):
        # ranks[].busy_s, like compute_s comm_s wait_s, is over the timed steps: the shard's
        # pushes of the first --untimed-steps steps are not in it. Each push's busy time lies
        # inside its trace event ("push" / "push+apply", args.step), so busy_s is at most the
        # events' durations over the timed steps. It was the whole run's: a ps np 3 run of 200
        # steps (2026-12-02) spent 1.32 ms a step on the server in the 5 untimed steps and 0.31
        # after, 10% of its busy_s.
        for servers in ("1", "colocated"):
            with self.subTest(servers=servers), tempfile.TemporaryDirectory() as tmp:
                trace = os.path.join(tmp, "t.%r.json")
                p, j = train([MPIRUN, "-np", "3"], "--backend", "ps", "--servers", servers,
                             "--untimed-steps", "4", "--trace", trace, steps=16)
                hosts = [r for r in j["ranks"] if r["role"] == "server" or servers == "colocated"]
                self.assertTrue(hosts)
                for r in hosts:
                    with open(trace.replace("%r", str(r["rank"])), encoding="utf-8") as f:
                        events = json.load(f)
                    events = events["traceEvents"] if isinstance(events, dict) else events
                    pushes = [e for e in events if e.get("cat") == "server" and e.get("ph") == "X"
                              and e.get("name") in ("push", "push+apply")]
                    timed = [e for e in pushes if e["args"]["step"] > 4]
                    self.assertEqual(len(pushes), 2 * 16 if servers == "1" else 3 * 16, r)
                    timed_s = sum(e["dur"] for e in timed) * 1e-6
                    self.assertGreater(r["busy_s"], 0.0, r)
                    self.assertLessEqual(r["busy_s"], timed_s + 1e-9 * len(timed),
                                         (r, sum(e["dur"] for e in pushes) * 1e-6))

    def test_ssp_bound_holds_and_asp_is_recorded_through_the_summary(self):
        # worker 1 sleeps 60 ms a step: under ssp --staleness 1 worker 0 runs ahead by exactly
        # the bound and never more; under asp further (2026-12-02, 30 steps: up to 21; 60 ms, not
        # 20: worker 0's steps must stay shorter on a loaded machine, or asp reads 1). Every
        # push is in the record (2 workers x 12 steps, one chunk). The servers' own records are
        # held to this in-process (test_ps_inproc); here: what the summary file says of them.
        for consistency, flags in (("ssp", ["--staleness", "1"]), ("asp", [])):
            with self.subTest(consistency=consistency):
                p, j = train([MPIRUN, "-np", "3"], "--backend", "ps", "--servers", "1",
                             "--consistency", consistency, *flags, "--momentum", "0.5",
                             "--straggler", "1:60", steps=12)
                hist = {int(k): v for k, v in j["staleness_hist"].items()}
                self.assertEqual(sum(hist.values()), 2 * 12, p.stdout)
                if consistency == "ssp":
                    self.assertEqual(max(hist), 1, hist)
                else:
                    self.assertGreater(max(hist), 1, hist)


class TimeSharing(unittest.TestCase):
    """The summary's oversubscribed and the 'time-shared:' line."""

    @unittest.skipUnless(shutil.which("taskset"), "needs taskset")
    def test_time_sharing_is_said_where_it_happens(self):
        # 2 ranks allowed one CPU: the end-of-run lines did not say that they time-shared it (only
        # the summary's `oversubscribed`, which compared the world size with rank 0's host's
        # CPUs: wrong on several hosts and under taskset)
        cpu = str(min(os.sched_getaffinity(0)))
        p, j = train(["taskset", "-c", cpu, MPIRUN, "-np", "2"], "--backend", "ring", steps=2)
        self.assertEqual([(r["cpus"], r["host"]) for r in j["ranks"]], [(1, j["host"])] * 2)
        self.assertTrue(j["oversubscribed"])
        self.assertIn(f"time-shared: 2 ranks on 1 cpus of {j['host']}", p.stdout)

    def test_ranks_bound_to_cores_of_their_own_do_not_time_share(self):
        # mpirun --bind-to core (Open MPI's default at np 2; srun --cpu-bind=cores) gives each
        # rank one CPU of its own: the host judged by its busiest rank's count read
        # 'time-shared: 2 ranks on 1 cpus'; the CPUs its ranks may use together are 2
        root = ["--allow-run-as-root"] if os.geteuid() == 0 else []
        p, j = train(["mpirun"] + root + ["--bind-to", "core", "-np", "2"], "--backend", "ring",
                     steps=2)
        ids = [r["cpu_ids"] for r in j["ranks"]]
        self.assertEqual([len(i) for i in ids], [1, 1], ids)
        self.assertNotEqual(ids[0], ids[1])
        self.assertFalse(j["oversubscribed"])
        self.assertNotIn("time-shared", p.stdout)
        self.assertEqual(j["cores"], 2)  # the host's, not rank 0's one core (the captions)


class StepFigures(unittest.TestCase):
    """The summary's step time and throughput: what each figure is made of, and the end-of-run
    lines printing the summary's figures in their units."""

    def test_step_time_is_each_parts_mean_over_the_workers_timed_steps(self):
        # step_time: per worker, its compute / backend comm / wait on the backend / wall seconds
        # over its timed steps (without the first --untimed-steps), then the mean over workers.
        # Each part carried another's figure (comm and wait swapped, the wait folded into comm)
        # or total taken from the whole loop's wall time, and every test passed.
        p, j = train([MPIRUN, "-np", "2"], "--backend", "ring", "--untimed-steps", "2", steps=8)
        workers = [r for r in j["ranks"] if r["role"] == "worker"]
        self.assertEqual([(r["steps"], r["untimed_steps"]) for r in workers], [(8, 2)] * 2)
        st = j["step_time"]
        for part, key in (("compute_s", "compute_s"), ("comm_s", "comm_s"),
                          ("wait_s", "wait_s"), ("total_s", "wall_s")):
            want = sum(r[key] / 6 for r in workers) / 2
            self.assertAlmostEqual(st[part], want, delta=1e-9 * max(want, 1e-9), msg=part)
        # other: the rest of the step, so that the parts add up to total (the line read "total =
        # compute + wait" with up to 44% of worker 0's step in neither, under time-sharing)
        want = sum((r["wall_s"] - r["compute_s"] - r["wait_s"]) / 6 for r in workers) / 2
        self.assertAlmostEqual(st["other_s"], want, delta=1e-9 * max(abs(want), 1e-9))
        self.assertAlmostEqual(st["compute_s"] + st["wait_s"] + st["other_s"], st["total_s"],
                               delta=1e-12)
        # the line: ms, in the order its words name them
        self.assertIn(f"step time {st['total_s'] * 1e3:.2f} ms = compute "
                      f"{st['compute_s'] * 1e3:.2f} + wait {st['wait_s'] * 1e3:.2f} + other "
                      f"{st['other_s'] * 1e3:.2f} ms  "
                      f"(backend comm {st['comm_s'] * 1e3:.2f} ms, may overlap)\n", p.stdout)
        self.assertIn(f"throughput {j['samples_per_s']:.0f} samples/s (steps after the first 2; "
                      f"all steps: {j['samples_per_s_all_steps']:.0f})", p.stdout)

    def test_global_batch_counts_every_worker(self):
        # 2 workers x 16 x accum 2: the summary's global_batch read 32 (one worker's) with the
        # printed parts still right, and every test passed; samples/s is over the global batch
        p, j = train([MPIRUN, "-np", "2"], "--backend", "ring", "--accum", "2", steps=4)
        self.assertEqual((j["workers"], j["batch"], j["accum"], j["global_batch"]), (2, 16, 2, 64))
        self.assertIn("global batch 64 (2 workers x 16 x accum 2)\n", p.stdout)
        # --untimed-steps (default 5) is capped at a quarter of the run's 4 steps: 1
        self.assertEqual(j["untimed_steps"], 1)
        slowest = max(r["wall_s"] for r in j["ranks"] if r["role"] == "worker")
        trained = 64 * (4 - j["untimed_steps"])
        self.assertAlmostEqual(j["samples_per_s"] * slowest / trained, 1.0, places=6)


class CheckpointCost(unittest.TestCase):
    def test_checkpoint_seconds_are_worker_0s_and_the_others_longest_wait(self):
        # worker 0 writes (checkpoint_s.worker0, its rank's checkpoint_s), the others wait at
        # barriers (others_max: the longest of theirs); the line gives the wait in ms. Printed
        # in seconds under the 'ms' ('waited up to 0 ms' after 8 ms here) passed every test.
        with tempfile.TemporaryDirectory(prefix="starring_summary_ckpt_") as tmp:
            p, j = train([MPIRUN, "-np", "2"], "--backend", "ring", "--checkpoint-dir",
                         os.path.join(tmp, "ck"), "--checkpoint-every", "2", steps=8)
        self.assertEqual(j["checkpoints"], 4)
        c = j["checkpoint_s"]
        by_rank = {r["rank"]: r for r in j["ranks"]}
        self.assertEqual([by_rank[r]["checkpoints"] for r in (0, 1)], [4, 4])
        self.assertEqual((c["worker0"], c["others_max"]),
                         (by_rank[0]["checkpoint_s"], by_rank[1]["checkpoint_s"]))
        self.assertIn(f"checkpoints 4: {c['worker0']:.3f} s on worker 0, the others waited up "
                      f"to {int(c['others_max'] * 1000 + 0.5)} ms (outside the wall time above)\n",
                      p.stdout)


class StragglerOption(unittest.TestCase):
    def test_the_straggler_sleeps_once_a_step_on_its_worker_only(self):
        # --straggler 1:MS: worker 1 sleeps MS once per optimizer step, whatever --accum; read
        # from each rank's --trace (its straggler_sleep events), not from the clock. A sleep in
        # every micro-batch (accum x MS a step) passed every test.
        with tempfile.TemporaryDirectory(prefix="starring_summary_straggler_") as tmp:
            train([MPIRUN, "-np", "2"], "--backend", "ring", "--accum", "3", "--straggler",
                  "1:5", "--trace", os.path.join(tmp, "t%r.json"), steps=4)
            sleeps = []
            for r in (0, 1):
                with open(os.path.join(tmp, f"t{r}.json"), encoding="utf-8") as f:
                    events = json.load(f)
                events = events["traceEvents"] if isinstance(events, dict) else events
                sleeps.append([e["dur"] for e in events if e.get("name") == "straggler_sleep"])
                self.assertEqual(sum(e.get("name") == "backward" for e in events), 4 * 3)
        self.assertEqual(sleeps[0], [])
        self.assertEqual(len(sleeps[1]), 4, sleeps)
        self.assertTrue(all(d >= 5000 for d in sleeps[1]), sleeps)  # microseconds


class DeviceChoice(unittest.TestCase):
    def test_a_dedicated_server_takes_no_gpu(self):
        # --device cuda with a dedicated parameter server: the server computes no model (its
        # shard's optimizer runs on the host), so it makes no Device on a GPU. It made one, with
        # a CUDA context and a cuBLAS handle, on GPU local-rank % count: servers are the last
        # ranks, so on a node with a GPU per worker it sat on a worker's GPU (and could take it
        # from that worker in EXCLUSIVE_PROCESS mode). Seen here (no GPU) by its fallback line:
        # the workers, local ranks 0 and 1, say they use the CPU; the server said so too.
        p, j = train([MPIRUN, "-np", "3"], "--backend", "ps", "--servers", "1",
                     "--device", "cuda")
        said = sorted(re.findall(r"\[starring\] local rank (\d+): no usable CUDA device",
                                 p.stderr))
        self.assertNotIn("2", said, p.stderr)
        if j["device"] == "cpu":  # no GPU: each worker says so once
            self.assertEqual(said, ["0", "1"], p.stderr)


if __name__ == "__main__":
    bin_main.main(sys.modules[__name__])
