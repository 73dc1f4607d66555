#!/usr/bin/env python3
"""`starring train --trace t.%r.json` as a user opening the files in Perfetto sees them, on small
synthetic runs of the real executable for every backend on the CPU (local, ring, ring-p2p, mpi,
ps with dedicated or co-located servers under bsp, ssp and asp, --accum, --resume):
  test_trace_cli.py --bin build/bin/starring
one whole JSON file per rank (no .partial left), pid = rank with the process (a PS rank's part
too) and every row named, times in microseconds on one clock for all ranks, an event for every
bucket or chunk of every step and for every server push, and rows whose intervals nest: Perfetto
drops an interval that starts inside another of its row and ends after it (its
`slice_drop_overlapping_complete_event`), and reads a number as llround(value * 1000) ns."""
import collections
import json
import os
import subprocess
import sys
import tempfile
import time
import unittest

import bin_main

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
MPIRUN = os.path.join(REPO, "scripts", "mpirun.sh")

BIN = None  # set from --bin
# Each case is one or two short jobs that mostly wait on mpirun's start: three at once.
OVERLAP = 3

STEPS = 6
# 32 inputs, hidden 64 and 32, 10 classes: 4522 parameters (18088 bytes of gradient a step),
# in several buckets (--bucket-mb) or chunks (--ps-chunk-bytes) of about 4 KB.
PARAMS = 32 * 64 + 64 + 64 * 32 + 32 + 32 * 10 + 10
MODEL = ["--dataset", "synthetic", "--synthetic-train", "1024", "--synthetic-test", "64",
         "--synthetic-dim", "32", "--hidden", "64,32", "--batch", "16", "--progress", "off"]
BUCKETS = ["--bucket-mb", "0.004"]
CHUNKS = ["--ps-chunk-bytes", "4K"]


def perfetto_ns(us):
    """A JSON number of microseconds as Perfetto's JSON importer reads it (json_utils.h
    CoerceToTs): llround(value * 1000) nanoseconds."""
    return int(round(us * 1000.0))


def partial_overlaps(events):
    """The X events Perfetto would drop: on one (pid, tid) row, starting inside an earlier
    interval and ending after it (rows must nest). Returns [(row, name, inside what)]."""
    rows = collections.defaultdict(list)
    for e in events:
        if e["ph"] == "X":
            start = perfetto_ns(e["ts"])
            rows[(e["pid"], e["tid"])].append((start, start + perfetto_ns(e["dur"]), e["name"]))
    dropped = []
    for row, spans in rows.items():
        spans.sort(key=lambda s: (s[0], -s[1]))
        stack = []
        for start, end, name in spans:
            while stack and stack[-1][1] <= start:
                stack.pop()
            if stack and end > stack[-1][1]:
                dropped.append((row, name, stack[-1][2]))
                continue
            stack.append((start, end, name))
    return dropped


class TracedRun:
    """One finished traced job: its folder, summary and each rank's events."""

    def __init__(self, case, np, flags, steps, out=None):
        self.out = out or tempfile.mkdtemp(dir=case.tmp)
        argv = ([BIN] if np == 0 else [MPIRUN, "-np", str(np), BIN]) + [
            "train", *MODEL, "--max-steps", str(steps), "--summary-file", "s.json",
            "--trace", "t.%r.json", *flags]
        t0 = time.monotonic()
        p = subprocess.run(argv, capture_output=True, text=True, cwd=self.out, timeout=120)
        self.wall_s = time.monotonic() - t0
        self.where = f"\n$ {' '.join(argv)}\nexit {p.returncode}\n{p.stdout}{p.stderr}"
        case.assertEqual(p.returncode, 0, self.where)
        with open(os.path.join(self.out, "s.json"), encoding="utf-8") as f:
            self.summary = json.load(f)
        self.ranks = max(np, 1)
        self.events = {}
        for rank in range(self.ranks):
            with open(os.path.join(self.out, f"t.{rank}.json"), encoding="utf-8") as f:
                self.events[rank] = json.load(f)["traceEvents"]

    def role(self, rank):
        return self.summary["ranks"][rank]["role"]

    def process_name(self, rank):
        """What the rank's process row should be called: a PS rank says its part."""
        if self.summary["backend"] != "ps":
            return f"rank {rank}"
        if self.role(rank) == "server":
            return f"rank {rank} (server {rank - self.summary['workers']})"
        colocated = self.summary["servers"] == "colocated"
        return f"rank {rank} (worker {rank}" + (f" + server {rank})" if colocated else ")")

    def spans(self, rank, name=None):
        return [e for e in self.events[rank] if e["ph"] == "X" and (name is None or
                                                                    e["name"] == name)]


class TraceFiles(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="starring_trace_cli_")

    def tearDown(self):
        subprocess.run(["rm", "-rf", self.tmp])

    def traced(self, np, *flags, steps=STEPS, out=None):
        """Runs the job and checks what every trace must show; returns the TracedRun."""
        run = TracedRun(self, np, flags, steps, out)
        where = run.where
        # one whole file per rank, nothing half-written beside them
        self.assertEqual(sorted(f for f in os.listdir(run.out) if f.startswith("t.")),
                         [f"t.{r}.json" for r in range(run.ranks)], where)
        firsts, lasts = [], []
        for rank, events in run.events.items():
            at = f"{where}\nrank {rank}"
            self.assertEqual({e["pid"] for e in events}, {rank}, at)
            names = {e["name"]: e["args"] for e in events if e["ph"] == "M" and e["tid"] == 0}
            self.assertEqual(names.get("process_name", {}).get("name"), run.process_name(rank), at)
            named = {e["tid"] for e in events if e["ph"] == "M" and e["name"] == "thread_name"}
            spans = run.spans(rank)
            self.assertTrue(spans, at)
            self.assertLessEqual({e["tid"] for e in spans}, named, at)  # every row named
            self.assertEqual(partial_overlaps(events), [], at)
            firsts.append(min(e["ts"] for e in spans))
            lasts.append(max(e["ts"] + e["dur"] for e in spans))
            # microseconds: the rank's timeline fits in the job's wall time and is not 1000x less
            # than its training time
            span_us = lasts[-1] - firsts[-1]
            self.assertLess(span_us, run.wall_s * 1e6, at)
            wall = run.summary["ranks"][rank]["all_steps_wall_s"]
            self.assertGreater(span_us, 0.3 * wall * 1e6, at)
        # one clock: the ranks' timelines (started apart by mpirun) overlap
        self.assertLess(max(firsts), min(lasts), where)
        for rank in range(run.ranks):
            if run.role(rank) == "worker":
                accum = int(flags[flags.index("--accum") + 1]) if "--accum" in flags else 1
                trained = run.summary["ranks"][rank]["steps"]
                for name in ("forward", "backward"):
                    self.assertEqual(len(run.spans(rank, name)), trained * accum, where)
                self.assert_flush_waits_traced(run, rank)
        return run

    def assert_flush_waits_traced(self, run, rank):
        """The wait for the last step's communication before each evaluation and checkpoint,
        and at the end, is on the compute row as `wait_flush` (the summary counts it as wait;
        until 2026-12-02 the row showed a gap there: 46 ms before `evaluate` at the end of a
        5-step ring run of a 2048-wide model)."""
        tids = [e["tid"] for e in run.events[rank]
                if e["ph"] == "M" and e["name"] == "thread_name" and e["args"]["name"] == "compute"]
        self.assertEqual(len(tids), 1, run.where)
        compute = sorted((e for e in run.spans(rank) if e["tid"] == tids[0]),
                         key=lambda e: (e["ts"], -e["dur"]))
        flushes = [e for e in compute if e["name"] == "wait_flush"]
        after = [e for e in compute if e["name"] in ("evaluate", "checkpoint")]
        self.assertEqual(len(flushes), len(after) + 1, run.where)
        for e in after:  # the compute row's interval right before it is its flush
            before = [x for x in compute if x["ts"] + x["dur"] <= e["ts"] and x is not e]
            self.assertEqual(before[-1]["name"] if before else None, "wait_flush", (e, run.where))
            self.assertEqual(before[-1]["cat"], "wait", run.where)

    def assert_every_bucket(self, run, steps):
        """Each worker traces the all-reduce of every bucket of every step, with the bucket's
        bytes adding up to the gradient."""
        for rank in range(run.ranks):
            by_step = collections.defaultdict(dict)
            for e in run.spans(rank):
                if e["name"].startswith("allreduce bucket "):
                    by_step[e["args"]["step"]][e["name"]] = e["args"]["bytes"]
            self.assertEqual(len(by_step), steps, run.where)
            for step, buckets in by_step.items():
                self.assertGreater(len(buckets), 1, run.where)
                self.assertEqual(sum(buckets.values()), PARAMS * 4, (step, buckets))
            optimizer = [e for e in run.spans(rank) if e["name"].startswith("optimizer bucket ")]
            self.assertEqual(len(optimizer), sum(map(len, by_step.values())), run.where)

    def assert_every_chunk(self, run, steps, consistency):
        """Each worker traces every chunk's push and pull of every step on that chunk's own
        row, each bucket's push on its comm row (empty until 2026-12-02) and each step's push and
        pull phases on a row of their own; the servers trace every push, the one that completes a
        round as push+apply (bsp: one of the workers' pushes, ssp/asp: each)."""
        workers = [r for r in range(run.ranks) if run.role(r) == "worker"]
        chunks = None
        for rank in workers:
            rows = {e["tid"]: e["args"]["name"] for e in run.events[rank]
                    if e["ph"] == "M" and e["name"] == "thread_name"}
            seen = collections.Counter()
            for e in run.spans(rank, "push_pull"):
                seen[(e["args"]["chunk"], e["args"]["step"])] += 1
                self.assertEqual(rows[e["tid"]], f"push_pull chunk {e['args']['chunk']:.0f}",
                                 run.where)
            mine = {c for c, _ in seen}
            chunks = chunks or mine
            self.assertEqual(mine, chunks, run.where)
            self.assertGreater(len(chunks), 1, run.where)
            self.assertEqual(set(seen.values()), {1}, run.where)
            self.assertEqual(len(seen), len(chunks) * steps, run.where)
            by_row = collections.defaultdict(collections.Counter)
            for e in run.spans(rank):
                by_row[rows[e["tid"]]][(e["name"], e.get("args", {}).get("step"))] += 1
            # one bucket (the default --bucket-mb): its push in every step, then the step's phases
            self.assertEqual(by_row["comm"], {("push bucket 0", t): 1 for t in
                                              range(1, steps + 1)}, run.where)
            self.assertEqual(by_row["push_pull step"], {(p, t): 1 for t in range(1, steps + 1)
                                                        for p in ("push", "pull")}, run.where)
        pushes = collections.Counter()
        for rank in range(run.ranks):
            for e in run.spans(rank):
                if e["cat"] == "server":
                    pushes[e["name"]] += 1
        total = len(workers) * len(chunks) * steps
        applies = total if consistency != "bsp" else len(chunks) * steps
        self.assertEqual(pushes["push+apply"], applies, (pushes, run.where))
        self.assertEqual(pushes["push"], total - applies, (pushes, run.where))

    def test_local(self):
        self.traced(0, "--backend", "local")

    def test_ring(self):
        for backend in ("ring", "ring-p2p"):
            with self.subTest(backend):
                self.assert_every_bucket(self.traced(2, "--backend", backend, *BUCKETS), STEPS)

    def test_mpi(self):
        self.assert_every_bucket(self.traced(2, "--backend", "mpi", *BUCKETS), STEPS)

    def test_ring_accum(self):
        run = self.traced(2, "--backend", "ring", "--accum", "2", *BUCKETS)
        self.assert_every_bucket(run, STEPS)

    def test_ps_dedicated(self):
        for consistency in ("bsp", "ssp", "asp"):
            with self.subTest(consistency):
                run = self.traced(3, "--backend", "ps", "--servers", "1", "--consistency",
                                  consistency, *CHUNKS)
                self.assert_every_chunk(run, STEPS, consistency)
                self.assertEqual(run.role(2), "server")

    def test_ps_colocated(self):
        for consistency in ("bsp", "asp"):
            with self.subTest(consistency):
                run = self.traced(2, "--backend", "ps", "--servers", "colocated",
                                  "--consistency", consistency, *CHUNKS)
                self.assert_every_chunk(run, STEPS, consistency)

    def test_resume_replaces_the_trace(self):
        # a resumed run writes its own timeline over the earlier run's file (the steps it trains)
        first = self.traced(2, "--backend", "ring", "--checkpoint-dir", "ck",
                            "--checkpoint-every", "3", steps=3)
        run = self.traced(2, "--backend", "ring", "--checkpoint-dir", "ck", "--resume", "latest",
                          steps=STEPS, out=first.out)
        steps = {e["args"]["step"] for e in run.spans(0) if "step" in e.get("args", {})}
        self.assertEqual(len(steps), STEPS - 3, run.where)
        self.assertEqual(len(run.spans(0, "forward")), STEPS - 3, run.where)


if __name__ == "__main__":
    bin_main.main(sys.modules[__name__])
