#!/usr/bin/env python3
"""The sweep driver's recovery runs (`recovery = yes`, scripts/sweep_recovery.py) against the real
`starring` executable:
  test_sweep_recovery.py --bin build/bin/starring
A tiny recovery sweep (synthetic data, a 16-unit MLP, 40 steps, 2 workers, ring and PS with one
server): the baseline has no checkpoint, a checkpointing run writes every 10 steps, and a run
whose worker 1 is killed at step 25 is resumed by a second leg (the same command without the
fault, plus --resume auto) from step 20, or from step 0 without periodic checkpoints. Every
record is well formed, the legs add up, the steps lost are the fault step minus the step resumed
from, the resumed runs end with the baseline's accuracy and test loss, the metrics file holds
every step once, and the summary carries the checkpoints' count and time. A sweep file that sets
--checkpoint-dir itself is refused before any run.
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
SWEEP = os.path.join(REPO, "scripts", "sweep.sh")
sys.path.insert(0, os.path.join(REPO, "scripts"))
import starring_results as sr  # noqa: E402
import bin_main  # noqa: E402

BIN = None  # set from --bin

TINY = """
[sweep]
timeout_s = 60
report = no
recovery = yes

[train]
dataset = synthetic
synthetic-train = 512
synthetic-test = 128
synthetic-dim = 32
hidden = 16
batch = 16
epochs = 3
max-steps = 40
timeout = 5
progress = off

[grid]
workers = 2
fault = - kill:1:25
checkpoint-every = - 10

[variant ring]
backend = ring

[variant ps-1]
backend = ps
servers = 1

[variant ps-1-server]
backend = ps
servers = 1
fault = kill:2:25
checkpoint-every = 10
"""


def sweep(text, tmp):
    ini = os.path.join(tmp, "recovery_tiny.ini")
    with open(ini, "w") as f:
        f.write(text)
    out = os.path.join(tmp, "results")
    proc = subprocess.run([SWEEP, ini, "--out", out, "--bin", BIN], capture_output=True,
                          text=True, timeout=300)
    return proc, out


class TwoLegRecords(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="starring_recovery_test_")
        cls.proc, cls.out = sweep(TINY, cls.tmp)
        cls.runs, cls.bad = sr.read_jsonl(os.path.join(cls.out, "runs.jsonl"))
        cls.msg = cls.proc.stdout + cls.proc.stderr

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def of(self, variant, role, every):
        found = [r for r in self.runs if r["variant"] == variant
                 and r["recovery"]["role"] == role and r["recovery"]["checkpoint_every"] == every]
        self.assertEqual(len(found), 1, self.msg)
        return found[0]

    def test_every_run_is_ok_well_formed_and_counted(self):
        self.assertEqual(self.proc.returncode, 0, self.msg)
        self.assertEqual(self.bad, [])
        self.assertEqual(len(self.runs), 9, self.msg)
        for r in self.runs:
            self.assertEqual(r["status"], "ok", r.get("log_tail", "") + self.msg)
            self.assertEqual(sr.check_record(r, r["run_id"]), [])
            self.assertEqual(r["steps"], 40)
        self.assertIn("4 ok, 5 recovered", self.proc.stdout)

    def test_the_baseline_has_no_checkpoint(self):
        for v in ("ring", "ps-1"):
            b = self.of(v, "baseline", None)
            self.assertNotIn("--checkpoint-dir", b["command"])
            self.assertEqual(len(b["recovery"]["legs"]), 1)
            self.assertEqual(b["checkpoints"], 0)
            self.assertEqual(b["recovery"]["checkpoints_total"], 0)
            self.assertGreater(b["recovery"]["startup_s"], 0)
            self.assertNotIn("baseline_run_id", b["recovery"])

    def test_checkpoints_are_counted_timed_and_change_nothing(self):
        for v in ("ring", "ps-1"):
            c, base = self.of(v, "checkpoints", 10), self.of(v, "baseline", None)
            rv = c["recovery"]
            self.assertEqual(c["checkpoints"], 4)  # steps 10, 20, 30 and 40 (the end)
            self.assertEqual(rv["checkpoints_total"], 4)
            self.assertGreater(c["checkpoint_s"]["worker0"], 0)
            self.assertIsInstance(c["checkpoint_s"]["others_max"], float)
            self.assertEqual(sorted(os.listdir(os.path.join(self.out, "runs", c["run_id"],
                                                            "ckpt"))),
                             ["ckpt-0000000030.ckpt", "ckpt-0000000040.ckpt", "latest"])
            self.assertEqual(rv["baseline_run_id"], base["run_id"])
            self.assertAlmostEqual(rv["extra_s"], rv["total_s"] - base["recovery"]["total_s"],
                                   places=2)
            self.assertIs(rv["same_result"], True)
            # bit for bit: the checkpoints changed no parameter
            self.assertEqual((c["test_accuracy"], c["test_loss"]),
                             (base["test_accuracy"], base["test_loss"]))

    def test_a_killed_run_is_resumed_by_a_second_leg(self):
        for v, every, resumed in (("ring", 10, 20), ("ring", None, 0), ("ps-1", 10, 20),
                                  ("ps-1", None, 0)):
            r, base = self.of(v, "fault", every), self.of(v, "baseline", None)
            rv = r["recovery"]
            first, second = rv["legs"]
            self.assertNotEqual(first["exit_code"], 0)
            self.assertEqual(first["status"], "failed")
            self.assertIn("--fault kill:1:25", first["command"])
            self.assertEqual((second["exit_code"], second["status"]), (0, "ok"))
            self.assertNotIn("--fault", second["command"])
            self.assertTrue(second["command"].endswith("--resume auto"), second["command"])
            # both rounded to the millisecond in the record: 1 ms each way of slack
            self.assertGreaterEqual(second["start_unix"] + 0.002,
                                    first["start_unix"] + first["elapsed_s"])
            self.assertEqual(rv["fault"]["outcome"], "detected")
            self.assertNotIn("fault", r)  # not a faults-sweep record: the report keeps them apart
            self.assertEqual((rv["fault_step"], rv["resumed_at_step"], rv["steps_lost"]),
                             (25, resumed, 25 - resumed))
            self.assertEqual(r["resumed_at_step"], resumed)
            self.assertAlmostEqual(rv["total_s"], first["elapsed_s"] + second["elapsed_s"],
                                   places=2)
            self.assertEqual(r["elapsed_s"], rv["total_s"])
            self.assertGreater(rv["detect_s"], 0)
            self.assertGreater(rv["startup_s"], 0)
            self.assertLess(rv["startup_s"], second["elapsed_s"])
            self.assertEqual(r["log_file"], second["log_file"])
            self.assertIs(rv["same_result"], True)
            self.assertEqual((r["test_accuracy"], r["test_loss"]),
                             (base["test_accuracy"], base["test_loss"]))
            # Every checkpoint of the job: 10 and 20 before the kill, 30 and 40 after.
            self.assertEqual(rv["checkpoints_total"], 4 if every else 1)
            steps = [json.loads(line)["step"] for line in open(
                os.path.join(self.out, r["metrics_file"])) if '"loss"' in line]
            self.assertEqual(steps, list(range(1, 41)))

    def test_a_killed_server_is_resumed_and_compared_with_the_same_configuration(self):
        r, base = self.of("ps-1-server", "fault", 10), self.of("ps-1", "baseline", None)
        rv = r["recovery"]
        self.assertEqual((rv["fault"]["rank"], rv["fault"]["outcome"]), (2, "detected"))
        self.assertEqual((rv["resumed_at_step"], rv["steps_lost"]), (20, 5))
        self.assertEqual(rv["baseline_run_id"], base["run_id"])
        self.assertIs(rv["same_result"], True)

    def test_a_sweep_setting_the_checkpoint_folder_is_refused(self):
        with tempfile.TemporaryDirectory(prefix="starring_recovery_test_") as tmp:
            proc, out = sweep(TINY.replace("[variant ring]\n", "[variant ring]\n"
                                           "checkpoint-dir = ckpt\n"), tmp)
            self.assertEqual(proc.returncode, 2, proc.stdout + proc.stderr)
            self.assertIn("variant ring: 'checkpoint-dir' is set by the sweep driver",
                          proc.stderr)
            self.assertFalse(os.path.exists(out))


if __name__ == "__main__":
    bin_main.main(sys.modules[__name__])
