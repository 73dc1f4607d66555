#!/usr/bin/env python3
"""Tests of how the sweep driver reads sweep files (no `starring` binary needed): the shipped
sweeps expand to the runs they promise, and the file format's rules hold (grid products, variant
overrides, `-` to leave a flag out, `servers = half`, [quick] and [quick SECTION] overrides)."""
import os
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(REPO, "scripts"))
import sweep as driver  # noqa: E402

SWEEPS = os.path.join(REPO, "experiments", "sweeps")


def expand(path, quick=False):
    sweep, train, grid, variants, benches = driver.load_sweep(path, quick)
    runs = driver.expand_runs(train, grid, variants)
    return sweep, runs, benches


def shape(runs):
    return [(r["variant"], r["workers"], driver.roles_of(r["flags"], r["workers"])[0])
            for r in runs]


class ShippedSweeps(unittest.TestCase):
    def test_main_is_the_readme_job(self):
        sweep, runs, benches = expand(os.path.join(SWEEPS, "main.ini"))
        self.assertEqual(shape(runs), [
            ("ring", 1, 1), ("ring", 2, 2), ("ring", 4, 4),
            ("ps-1", 1, 2), ("ps-1", 2, 3), ("ps-1", 4, 5),
            ("ps-colocated", 1, 1), ("ps-colocated", 2, 2), ("ps-colocated", 4, 4)])
        for r in runs:
            self.assertEqual(r["flags"]["dataset"], "fashion-mnist")
            self.assertIn(r["flags"]["backend"], ("ring", "ps"))
        self.assertTrue(benches)
        self.assertEqual(sweep["report"], "yes")
        _, quick, qbench = expand(os.path.join(SWEEPS, "main.ini"), quick=True)
        self.assertEqual(len(quick), 6)
        self.assertTrue(all("max-steps" in r["flags"] for r in quick))
        self.assertEqual(qbench["allreduce"]["np"], "2")  # [quick bench allreduce]

    def test_scaling_covers_every_backend_and_both_models(self):
        _, runs, _ = expand(os.path.join(SWEEPS, "scaling.ini"))
        variants = {r["variant"] for r in runs}
        self.assertEqual(variants, {"ring", "mpi", "ps-1", "ps-half", "ps-colocated", "nccl"})
        self.assertEqual({r["flags"]["preset"] for r in runs}, {"default", "wide"})
        self.assertEqual({r["workers"] for r in runs}, {1, 2, 4, 8})
        half = {r["workers"]: r["flags"]["servers"] for r in runs if r["variant"] == "ps-half"}
        self.assertEqual(half, {2: "1", 4: "2", 8: "4"})
        self.assertTrue(all(r["requires"] == "gpu" for r in runs if r["variant"] == "nccl"))

    def test_straggler_pairs_every_backend_with_and_without(self):
        _, runs, _ = expand(os.path.join(SWEEPS, "straggler.ini"))
        for v in ("ring", "ps-bsp", "ps-ssp", "ps-asp"):
            strag = sorted(r["flags"].get("straggler", "") for r in runs if r["variant"] == v)
            self.assertEqual(strag, ["", "1:50", "any:50"], v)  # none, persistent, moving

    def test_every_shipped_sweep_and_its_quick_variant_expand(self):
        for name in sorted(os.listdir(SWEEPS)):
            for quick in (False, True):
                sweep, runs, _ = expand(os.path.join(SWEEPS, name), quick)
                self.assertTrue(runs, name)
                self.assertGreater(float(sweep["timeout_s"]), 0)
                for r in runs:
                    self.assertNotIn("timeout_s", r["flags"], name)  # a misplaced sweep key


class FileFormat(unittest.TestCase):
    def write(self, text):
        fd, path = tempfile.mkstemp(suffix=".ini")
        with os.fdopen(fd, "w") as f:
            f.write(text)
        self.addCleanup(os.remove, path)
        return path

    def test_grid_variants_omission_and_quick(self):
        path = self.write("""
[sweep]
timeout_s = 50
[train]
epochs = 2          ; comment
[grid]
workers = 1 4
straggler = - 1:20
[variant a]
backend = ring
[variant b]
backend = ps
servers = half
workers = 2
[quick]
epochs = 1
timeout_s = 5
variants = b
[quick variant b]
workers = 8
""")
        sweep, runs, _ = expand(path)
        self.assertEqual(sweep["timeout_s"], "50")
        self.assertEqual([(r["variant"], r["workers"], r["flags"].get("straggler"))
                          for r in runs],
                         [("a", 1, None), ("a", 1, "1:20"), ("a", 4, None), ("a", 4, "1:20"),
                          ("b", 2, None), ("b", 2, "1:20")])
        self.assertEqual(runs[0]["flags"], {"epochs": "2", "backend": "ring"})
        self.assertEqual(runs[4]["flags"]["servers"], "1")
        self.assertEqual(shape(runs)[4], ("b", 2, 3))
        sweep, runs, _ = expand(path, quick=True)
        self.assertEqual(sweep["timeout_s"], "5")
        self.assertEqual([(r["variant"], r["workers"], r["flags"]["servers"]) for r in runs],
                         [("b", 8, "4"), ("b", 8, "4")])
        self.assertTrue(all(r["flags"]["epochs"] == "1" for r in runs))

    def test_roles(self):
        self.assertEqual(driver.roles_of({"backend": "ps"}, 4)[:2], (5, 1))  # trainer default
        self.assertEqual(driver.roles_of({"backend": "ps", "servers": "colocated"}, 4)[:2],
                         (4, 0))
        self.assertEqual(driver.roles_of({"backend": "ring", "servers": "3"}, 4)[:2], (4, 0))


if __name__ == "__main__":
    unittest.main(verbosity=2)
