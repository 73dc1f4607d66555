#!/usr/bin/env python3
"""`starring bench` under scripts/mpirun.sh with ops on fewer ranks than the job (the @N suffix:
a sub-communicator, MPI_Comm_create_group for the mpi op) beside a dedicated parameter server,
rows checked against the closed form and the bytes against the theory; and
`starring bench-model` (single-worker training throughput against OpenBLAS's own sgemm on the
same shapes): the default, wide and custom models each get a row, and the row's figures agree
with each other and with the model's shapes (parameter count from the widths, samples/s from the
step time, model GFLOP/s = 6 * batch * sum(in*out) / step, ratio = step GFLOP/s / sgemm GFLOP/s),
as JSON lines and as the table. Speed itself is not checked: this machine is shared and noisy.
  test_bench_cli.py --bin build/bin/starring
"""
import json
import os
import re
import subprocess
import sys
import time
import unittest

import bin_main

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MPIRUN = os.path.join(REPO, "scripts", "mpirun.sh")
BIN = None  # set from --bin
# Its cases check what the rows say and that the figures agree with each other, not how fast
# anything ran: four at once (bin_main.py), bench-model's two first (each times every model for
# 2 s at least: 10 s a case at load 13, the script's longest).
OVERLAP = 4


def bench_model(*args):
    p = subprocess.run([BIN, "bench-model", "-n", "2", "-w", "1", "--batch", "8", *args],
                       capture_output=True, text=True, timeout=120)
    return p.returncode, p.stdout, p.stderr


def params_of(widths):
    return sum(a * b + b for a, b in zip(widths, widths[1:]))


def step_gemm_flops(widths, batch):
    """The GEMM FLOPs one training step executes: forward, every layer's dW, and dX of all but
    the first layer (6 * batch * sum(in*out) less layer 0's dX)."""
    macs = [a * b for a, b in zip(widths, widths[1:])]
    return 2 * batch * (2 * sum(macs) + sum(macs[1:]))


class BenchModel(unittest.TestCase):
    def test_json_rows_are_self_consistent(self):
        rc, out, err = bench_model("--json", "--hidden", "32", "--run-name", "m1")
        self.assertEqual(rc, 0, out + err)
        rows = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
        self.assertEqual([r["model"] for r in rows], ["default", "wide", "custom"], out)
        widths = {"default": [784, 256, 128, 10], "wide": [784, 4096, 4096, 10],
                  "custom": [784, 32, 10]}
        for r in rows:
            with self.subTest(model=r["model"]):
                self.assertEqual(r["bench"], "model")
                self.assertEqual(r["run_name"], "m1")
                self.assertEqual(r["device"], "cpu")
                self.assertEqual(r["batch"], 8)
                self.assertEqual(r["optimizer"], "sgd")
                self.assertEqual(r["widths"], widths[r["model"]])
                self.assertEqual(r["params"], params_of(r["widths"]))
                self.assertGreater(r["steps_timed"], 0)
                self.assertGreater(r["step_ms"], 0)
                self.assertLessEqual(r["step_ms_best"], r["step_ms"])
                self.assertAlmostEqual(r["samples_per_s"], 8 / (r["step_ms"] / 1e3),
                                       delta=1e-6 * r["samples_per_s"])
                flops = 6 * 8 * sum(a * b for a, b in zip(r["widths"], r["widths"][1:]))
                self.assertAlmostEqual(r["model_gflops"], flops / (r["step_ms"] / 1e3) / 1e9,
                                       delta=1e-6 * r["model_gflops"])
                self.assertAlmostEqual(r["ratio"], r["step_gemm_gflops"] / r["sgemm_gflops"],
                                       delta=1e-9)
                # The step skips layer 0's dX, which the model count includes.
                self.assertLess(r["step_gemm_gflops"], r["model_gflops"])
                # The bare GEMMs are the step's own shapes at 2 FLOPs a multiply-add: step and
                # sgemm GFLOP/s are that count over the step's and over the GEMMs' own time.
                gemm = step_gemm_flops(r["widths"], 8)
                self.assertAlmostEqual(r["step_gemm_gflops"], gemm / (r["step_ms"] / 1e3) / 1e9,
                                       delta=1e-6 * r["step_gemm_gflops"])
                self.assertAlmostEqual(r["sgemm_gflops"], gemm / (r["sgemm_ms"] / 1e3) / 1e9,
                                       delta=1e-6 * r["sgemm_gflops"])
                self.assertGreater(r["optimizer_ms"], 0)
                self.assertLess(r["optimizer_ms"], r["step_ms"])
        self.assertGreater(rows[1]["params"], 19_000_000)  # the ~20M-parameter preset

    def test_a_preset_times_that_model_alone(self):
        # --preset default|wide was accepted and ignored: both presets were timed every time
        for preset, widths in (("default", [784, 256, 128, 10]), ("wide", [784, 4096, 4096, 10])):
            with self.subTest(preset=preset):
                rc, out, err = bench_model("--json", "--preset", preset)
                self.assertEqual(rc, 0, out + err)
                rows = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
                self.assertEqual([(r["model"], r["widths"]) for r in rows], [(preset, widths)],
                                 out)

    def test_table_and_optimizer(self):
        rc, out, err = bench_model("--optimizer", "adamw")
        self.assertEqual(rc, 0, out + err)
        self.assertIn("optimizer adamw", out)
        table = [line.split() for line in out.splitlines() if not line.startswith("#")]
        self.assertEqual([t[0] for t in table], ["default", "wide"], out)
        self.assertEqual([int(t[1]) for t in table], [235146, params_of([784, 4096, 4096, 10])])
        # each column is its figure, from the printed times (which are rounded to 1 us: that
        # share of each, 0.5 % more, and the column's last digit)
        for t, widths in zip(table, ([784, 256, 128, 10], [784, 4096, 4096, 10])):
            step_s, sgemm_s = float(t[3]) / 1e3, float(t[7]) / 1e3
            step_r, sgemm_r = 0.005 + 1e-6 / step_s, 0.005 + 1e-6 / sgemm_s
            model = 6 * 8 * sum(a * b for a, b in zip(widths, widths[1:]))
            gemm = step_gemm_flops(widths, 8)
            for col, name, want, rel, digit in (
                    (2, "samples/s", 8 / step_s, step_r, 1),
                    (4, "model-GF/s", model / step_s / 1e9, step_r, 0.1),
                    (5, "step-GF/s", gemm / step_s / 1e9, step_r, 0.1),
                    (6, "sgemm-GF/s", gemm / sgemm_s / 1e9, sgemm_r, 0.1),
                    (8, "ratio", sgemm_s / step_s, step_r + sgemm_r, 0.001)):
                self.assertAlmostEqual(float(t[col]), want, delta=rel * want + digit,
                                       msg=f"{t[0]} {name}: {out}")
        self.assertIn("# ratio = step GEMM FLOP/s / bare sgemm FLOP/s", out)


class Bench(unittest.TestCase):
    def rows(self, np_, env=None):
        p = subprocess.run([MPIRUN, "-np", str(np_), BIN, "bench", "--backends", "ring", "-b",
                            "4K", "-e", "4K", "-n", "1", "-w", "0", "--json"],
                           capture_output=True, text=True, timeout=120,
                           env=dict(os.environ, **(env or {})))
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        rows = [json.loads(line) for line in p.stdout.splitlines() if line.startswith("{")]
        self.assertEqual(len(rows), 1, p.stdout)
        return rows[0]

    def test_rows_say_whether_the_job_time_shared_host_by_host(self):
        # as train's summary does: the sweep driver had only its own host's CPUs against np, so
        # a pass over two hosts of 2 CPUs at np 4 read as time-shared (test_sweep_records)
        cpus = len(os.sched_getaffinity(0))
        r = self.rows(cpus + 1)  # one host, one rank more than its CPUs
        self.assertEqual((r["hosts"], r["cores"], r["oversubscribed"]), (1, cpus, True), r)
        self.assertIn(f"{cpus + 1} ranks on {cpus} cpus", r["oversubscribed_where"])
        if cpus >= 2:  # two test hosts (common/test_hosts.h) of 2 ranks each, each seeing cpus
            r = self.rows(4, {"STARRING_TEST_HOSTS": "0,0,1,1"})
            self.assertEqual((r["hosts"], r["cores"], r["oversubscribed"]), (2, cpus, False), r)
            self.assertNotIn("oversubscribed_where", r)

    def test_ops_on_fewer_ranks_beside_a_dedicated_server(self):
        # 3 ranks: ps with 1 dedicated server (2 workers), and ring, MPI_Allreduce and co-located
        # PS on the first 2 ranks only, in one run.
        p = subprocess.run([MPIRUN, "-np", "3", BIN, "bench", "--servers", "1", "--backends",
                            "ps,ring@2,mpi@2,ps-colocated@2", "-b", "4K", "-e", "64K", "-f", "4",
                            "-n", "2", "-w", "1", "--json"],
                           capture_output=True, text=True, timeout=120)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        rows = [json.loads(line) for line in p.stdout.splitlines() if line.startswith("{")]
        self.assertEqual(len(rows), 4 * 3, p.stdout)
        for r in rows:
            with self.subTest(backend=r["backend"], size=r["size"]):
                d = r["size"]
                self.assertEqual((r["np"], r["workers"], r["wrong"]), (3, 2, 0))
                self.assertEqual(r["count"] * 4, d)
                self.assertAlmostEqual(r["algbw_GBps"], d / (r["time_us"] * 1e3),
                                       delta=1e-9 * r["algbw_GBps"])
                bus = {"ps": 2.0}.get(r["backend"], 1.0)  # max(1, W/S) or 2(W-1)/W at W = 2
                self.assertAlmostEqual(r["busbw_GBps"], r["algbw_GBps"] * bus,
                                       delta=1e-9 * r["busbw_GBps"])
                # Each worker moves D each way in every op here (headers aside); MPI_Allreduce's
                # bytes are the ring's theory, not measured.
                self.assertEqual(r["bytes_measured"], r["backend"] != "mpi@2")
                for k in ("bytes_sent_per_rank", "bytes_recv_per_rank"):
                    self.assertGreaterEqual(r[k], d)
                    self.assertLessEqual(r[k], d + 64)
                # The servers' bytes count what the workers' do: a push message carries a
                # 32-byte chunk header (one chunk a shard here), a reply none. They counted the
                # floats alone, 32 bytes a push below the workers' bytes_sent.
                if r["backend"] == "ps":
                    self.assertEqual(r["servers"], 1)
                    self.assertEqual(r["server_bytes_in"], [2 * (d + 32)])
                    self.assertEqual(r["server_bytes_out"], [2 * d])
                    self.assertEqual(r["server_push_payload_in"], [2 * d])
                    self.assertEqual(r["server_chunks"], [1])
                    self.assertEqual(2 * r["bytes_sent_per_rank"], sum(r["server_bytes_in"]))
                    self.assertEqual(2 * r["bytes_recv_per_rank"], sum(r["server_bytes_out"]))
                elif r["backend"] == "ps-colocated@2":
                    self.assertEqual(r["servers"], "colocated")
                    self.assertEqual(r["server_bytes_in"], [d / 2 + 32, d / 2 + 32])
                    self.assertEqual(r["server_bytes_out"], [d / 2, d / 2])
                    # a rank sends its push to the other shard and its own shard's reply
                    self.assertEqual(2 * r["bytes_sent_per_rank"],
                                     sum(r["server_bytes_in"]) + sum(r["server_bytes_out"]))
                else:
                    self.assertEqual(r["bench"], "allreduce")
        # Shapes: ps runs 2 workers + 1 server on 3 ranks, the @2 ops 2 workers on 2 ranks. The
        # base (ps, the first backend: no plain mpi) is compared with no row of another shape:
        # their busbw counts other links, their time other ranks.
        for r in rows:
            with self.subTest(backend=r["backend"], size=r["size"]):
                self.assertEqual(r["ranks_used"], 3 if r["backend"] == "ps" else 2)
                self.assertEqual(r["base"], "ps")
                self.assertEqual(r["vs_base"], 1.0 if r["backend"] == "ps" else None)
        table = [line.split() for line in p.stdout.splitlines() if " float " in line
                 and not line.startswith("{")]
        self.assertEqual(len(table), 4 * 3, p.stdout)
        for cols in table:  # backend shape size count float ... vs-base
            shape = {"ps": "W=2,S=1", "ps-colocated@2": "W=2,co"}.get(cols[0], "W=2")
            self.assertEqual((cols[1], cols[-1]), (shape, "base" if cols[0] == "ps" else "-"),
                             p.stdout)
        # the '#  ps (...)' lines: every server's bytes, measured / theory, agree
        pairs = re.findall(r"server \d+ in (\d+) / (\d+) out (\d+) / (\d+)", p.stdout)
        self.assertEqual(len(pairs), 3 * 3, p.stdout)  # 3 sizes: 1 server + 2 shards
        for got_in, want_in, got_out, want_out in pairs:
            self.assertEqual((got_in, got_out), (want_in, want_out), p.stdout)

    def test_ranks_given_other_options_are_one_line_before_the_table(self):
        # mpirun's MPMD form (or a --config file that differs between hosts): rank 1 ran other
        # sizes and failed late ('corrupt shared-memory ring message' with another -b, a timeout
        # after --timeout with another -e)
        common = [BIN, "bench", "--backends", "ring", "-n", "1", "-w", "0", "-e", "16K"]
        p = subprocess.run([MPIRUN, "-np", "1", *common, "-b", "4K", ":", "-np", "1", *common,
                            "-b", "8K"], capture_output=True, text=True, timeout=120)
        self.assertEqual(p.returncode, 2, p.stdout + p.stderr)
        errors = [line for line in p.stderr.splitlines() if line.startswith("starring: error")]
        self.assertEqual(errors, ["starring: error: bench options differ between ranks: rank 1 "
                                  "was given -b/--min-bytes 8K, rank 0 4K (every rank must run "
                                  "the same sizes, iterations and backends: give every rank the "
                                  "same options)"], p.stderr)
        self.assertNotIn("starring bench", p.stdout)  # before the table's header

    def test_compressed_rows_say_so(self):
        # --compress bf16 halves the bytes on the wire, but its rows (size, algbw, busbw of the
        # float32 data) read like an uncompressed run's: bench.jsonl could not tell them apart.
        # Also: a backend name longer than the column (ps-colocated@2) kept the table aligned.
        p = subprocess.run([MPIRUN, "-np", "2", BIN, "bench", "--backends", "ring",
                            "--compress", "bf16", "-b", "64K", "-e", "64K", "-n", "2", "-w", "1",
                            "--json"], capture_output=True, text=True, timeout=120)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        self.assertIn("float32 (bf16 on the wire: --compress)", p.stdout)
        rows = [json.loads(line) for line in p.stdout.splitlines() if line.startswith("{")]
        self.assertEqual([(r["compress"], r["bytes_sent_per_rank"]) for r in rows],
                         [("bf16", 32768)])  # 2(N-1)/N x 64K / 2
        # --run-name labels the rows (it was accepted and dropped: "copied into metrics and
        # summaries", of which bench writes neither)
        p = subprocess.run([MPIRUN, "-np", "2", BIN, "bench", "--backends", "ring,ps-colocated@2",
                            "-b", "64K", "-e", "64K", "-n", "1", "-w", "0", "--json",
                            "--run-name", "base"], capture_output=True, text=True, timeout=120)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        rows = [json.loads(line) for line in p.stdout.splitlines() if line.startswith("{")]
        self.assertEqual([("compress" in r, r["run_name"]) for r in rows], [(False, "base")] * 2)
        p = subprocess.run([MPIRUN, "-np", "2", BIN, "bench", "--mode", "overlap", "--backends",
                            "ring", "--compress", "fp16", "--compute", "serial", "-b", "64K",
                            "-e", "64K", "-n", "1", "-w", "0", "--json", "--run-name", "ov"],
                           capture_output=True, text=True, timeout=120)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        self.assertIn("--compress fp16", p.stdout.splitlines()[1])
        rows = [json.loads(line) for line in p.stdout.splitlines() if line.startswith("{")]
        self.assertEqual([(r["bench"], r["compress"], r["run_name"]) for r in rows],
                         [("overlap", "fp16", "ov")])
        table = [line for line in p.stdout.splitlines() if line.startswith("   ")]
        self.assertEqual(len({line.index(" 65536 ") for line in table}), 1, table)

    def test_a_bad_overlap_backend_is_refused_before_the_table(self):
        # every --backends name is checked first: a table was printed (ring's rows measured)
        # before 'frob' was found unknown
        for names, said in (("ring,frob", "unknown backend 'frob'"),
                            ("ring,ring@3", "'ring@3' on 3 ranks")):
            p = subprocess.run([MPIRUN, "-np", "2", BIN, "bench", "--mode", "overlap",
                                "--backends", names, "--compute", "serial", "-b", "64K", "-e",
                                "64K", "-n", "1", "-w", "0"],
                               capture_output=True, text=True, timeout=120)
            self.assertEqual(p.returncode, 2, p.stdout + p.stderr)
            self.assertIn(said, p.stderr)
            self.assertEqual(p.stdout, "")

    def test_sizes_it_rounds_are_accepted_with_one_note_each_from_rank_0(self):
        # -b 1001: rows of whole floats (1000, 2000, 4004 bytes, as the size column says);
        # segments of whole 16-float blocks, chunks of whole floats (common/config_use.cc)
        p = subprocess.run([MPIRUN, "-np", "2", BIN, "bench", "--backends", "ring-p2p,ps-colocated",
                            "-b", "1001", "-e", "4004", "--segment-bytes", "100",
                            "--ps-chunk-bytes", "6", "-n", "1", "-w", "0", "--json"],
                           capture_output=True, text=True, timeout=120)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        notes = [line for line in p.stderr.splitlines() if line.startswith("[starring] note: ")]
        self.assertEqual(len(notes), 3, p.stderr)  # rank 0 only
        self.assertIn("-b/--min-bytes 1001 is used as 1000 bytes", notes[0])
        self.assertIn("the nearest valid values are 1000 and 1004", notes[0])
        self.assertIn("--segment-bytes 100 is used as 64 bytes", notes[1])
        self.assertIn("--ps-chunk-bytes 6 is used as 4 bytes", notes[2])
        rows = [json.loads(line) for line in p.stdout.splitlines() if line.startswith("{")]
        self.assertEqual(sorted((r["backend"], r["size"], r["wrong"]) for r in rows),
                         [(b, d, 0) for b in ("ps-colocated", "ring-p2p")
                          for d in (1000, 2000, 4004)])
        plain = subprocess.run([MPIRUN, "-np", "2", BIN, "bench", "--backends", "ring-p2p",
                                "-b", "1000", "-e", "4000", "-n", "1", "-w", "0"],
                               capture_output=True, text=True, timeout=120)
        self.assertEqual(plain.returncode, 0, plain.stdout + plain.stderr)
        self.assertNotIn("note:", plain.stderr)

    def test_a_message_smaller_than_the_shards_names_the_smallest_size(self):
        # 1 float over 3 co-located shards: the error said "use fewer servers", which a bench
        # with --servers colocated cannot do; the fix is a larger -b.
        p = subprocess.run([MPIRUN, "-np", "3", BIN, "bench", "--backends", "ring,ps-colocated",
                            "-b", "4", "-e", "64", "-n", "1", "-w", "0"],
                           capture_output=True, text=True, timeout=120)
        self.assertEqual(p.returncode, 2, p.stdout + p.stderr)
        errors = [line for line in p.stderr.splitlines() if line.startswith("starring: error")]
        self.assertEqual(len(errors), 1, p.stderr)
        self.assertIn("4 B (1 floats) cannot be split over 3 parameter-server shards: give -b 12",
                      errors[0])
        # refused before the table: found in prepare(), the header had been printed and ring's
        # 4-B row run (and thrown away), and ps's busbw line printed above the error
        self.assertEqual(p.stdout, "")

    def test_bad_input_only_an_at_n_op_finds_is_one_line_at_once(self):
        # ps@3 with --servers 3 on 4 ranks: ranks 0-2 find that no worker is left, rank 3 sits
        # the op out. Every rank agrees before the bench's first barrier; rank 3 waited there
        # for 120 s, then the job ended by MPI_Abort.
        # With ring after it, rank 3 went on to make ring alone and hung in its MPI_Comm_dup.
        # --mode overlap's memory check made the group on ranks 0-2 alone: two lines, MPI_Abort.
        for backends, mode in (("ring,ps@3", "bandwidth"), ("ps@3,ring", "bandwidth"),
                               ("ps@3", "overlap")):
            with self.subTest(backends=backends, mode=mode):
                t0 = time.monotonic()
                p = subprocess.run([MPIRUN, "-np", "4", BIN, "bench", "--mode", mode,
                                    "--backends", backends, "--servers", "3", "-b", "1M", "-e",
                                    "1M", "--timeout", "60"],
                                   capture_output=True, text=True, timeout=120)
                self.assertLess(time.monotonic() - t0, 30, p.stderr)
                self.assertEqual(p.returncode, 2, p.stdout + p.stderr)
                errors = [line for line in p.stderr.splitlines()
                          if line.startswith("starring: error")]
                self.assertEqual(len(errors), 1, p.stderr)
                self.assertIn("bench op on the first 3 of 4 ranks (@3): --servers 3 needs at "
                              "least 4 ranks", errors[0])
                self.assertNotIn("MPI_Abort", p.stderr)

    def test_tensor_partition_over_several_shards_is_one_line(self):
        # The bench pushes one tensor: whole-tensor placement leaves all shards but one empty.
        # The workers found it in prepare(), after the header: two error lines and MPI_Abort.
        for args in (["--backends", "ps", "--servers", "2"], ["--backends", "ps-colocated"]):
            with self.subTest(args=args):
                p = subprocess.run([MPIRUN, "-np", "4", BIN, "bench", "--ps-partition", "tensor",
                                    "-b", "1M", "-e", "1M", "-n", "1", "-w", "0"] + args,
                                   capture_output=True, text=True, timeout=120)
                self.assertEqual(p.returncode, 2, p.stdout + p.stderr)
                errors = [line for line in p.stderr.splitlines()
                          if line.startswith("starring: error")]
                self.assertEqual(len(errors), 1, p.stderr)
                self.assertIn("--ps-partition tensor places whole tensors", errors[0])
                self.assertNotIn("MPI_Abort", p.stderr)
                self.assertNotIn("starring bench", p.stdout)  # before the table's header

    def overlap_json(self, np_, *args):
        """bench --mode overlap --json on np_ ranks, which must succeed: (process, JSON rows)."""
        p = subprocess.run([MPIRUN, "-np", str(np_), BIN, "bench", "--mode", "overlap", "--json"]
                           + list(args), capture_output=True, text=True, timeout=120)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        return p, [json.loads(line) for line in p.stdout.splitlines() if line.startswith("{")]

    def test_overlap_rows_table_and_footer_agree(self):
        # bench --mode overlap, 2 sizes x (sleep, serial): each JSON row's overlap_pct is OSU's
        # formula of its own times, the compute's time inside an iteration is part of that
        # iteration's time, the table prints the JSON rows' figures in its columns, and the
        # footer's averages are the rows' means. (Wrong figures here read as plausible numbers.)
        p, rows = self.overlap_json(2, "--backends", "ring", "--compute", "sleep,serial", "-b",
                                    "64K", "-e", "256K", "-f", "4", "-n", "2", "-w", "1")
        self.assertEqual([(r["size"], r["compute"]) for r in rows],
                         [(d, k) for d in (65536, 262144) for k in ("sleep", "serial")], p.stdout)
        table = [line.split() for line in p.stdout.splitlines() if line.startswith("   ")]
        self.assertEqual(len(table), len(rows), p.stdout)
        for r, cols in zip(rows, table):
            with self.subTest(size=r["size"], compute=r["compute"]):
                self.assertEqual((r["np"], r["workers"], r["count"] * 4), (2, 2, r["size"]))
                osu = 100 * (1 - (r["t_total_us"] - r["t_compute_us"]) / r["t_comm_us"])
                self.assertAlmostEqual(r["overlap_pct"], min(100.0, max(0.0, osu)), delta=1e-6)
                self.assertLess(r["t_inside_us"], r["t_total_us"])
                self.assertEqual(cols[:3], [str(r["size"]), "ring", r["compute"]])
                for col, k in zip(cols[3:], ("t_comm_us", "t_compute_us", "t_total_us",
                                             "overlap_pct")):
                    self.assertEqual(col, "%.1f" % r[k], k)
        for k in ("sleep", "serial"):
            avg = re.search(r"#  ring +%s +Avg overlap : +([\d.]+) %%" % k, p.stdout)
            self.assertIsNotNone(avg, p.stdout)
            mean = sum(r["overlap_pct"] for r in rows if r["compute"] == k) / 2
            self.assertEqual(avg.group(1), "%.1f" % mean, k)

    def test_overlap_rows_count_workers_not_servers(self):
        # ps with a dedicated server on 3 ranks: 2 workers (the row's means are over them)
        _, rows = self.overlap_json(3, "--backends", "ps", "--servers", "1", "--compute",
                                    "serial", "-b", "64K", "-e", "64K", "-n", "1", "-w", "0")
        self.assertEqual([(r["np"], r["workers"], r["servers"]) for r in rows], [(3, 2, 1)])
        # and say, as bandwidth rows do, whether the job time-shared host by host (the sweep
        # driver's own guess from its host's CPUs was all overlap rows had)
        cpus = len(os.sched_getaffinity(0))
        self.assertEqual((rows[0]["hosts"], rows[0]["cores"], rows[0]["oversubscribed"]),
                         (1, cpus, 3 > cpus), rows[0])


if __name__ == "__main__":
    bin_main.main(sys.modules[__name__])
