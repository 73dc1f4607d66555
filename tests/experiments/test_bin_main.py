#!/usr/bin/env python3
"""bin_main.py's overlapping runner (no binary): a failing case, an error in setUpClass and a case
that hangs, each in a module of their own run as a child (`--bin` of no use here):
  test_bin_main.py
Every failure fails the run (exit 1), and one killed at its time limit (ctest's TIMEOUT) has
already printed the failures' tracebacks and named the case still running."""
import os
import subprocess
import sys
import tempfile
import textwrap
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))

HEAD = f"""
import sys, time, unittest
sys.path.insert(0, {HERE!r})
import bin_main
OVERLAP = 2
BIN = None
"""
TAIL = """
if __name__ == "__main__":
    bin_main.STILL_RUNNING_S = 0.3
    bin_main.main(sys.modules[__name__])
"""


def run_module(body, limit):
    """Runs a test module of `body` through bin_main.main; killed after `limit` s as ctest would
    (SIGKILL). Returns (exit code, its output)."""
    with tempfile.TemporaryDirectory(prefix="starring_bin_main_") as tmp:
        path = os.path.join(tmp, "mod.py")
        with open(path, "w") as f:
            f.write(HEAD + textwrap.dedent(body) + TAIL)
        p = subprocess.Popen([sys.executable, path, "--bin", "/bin/true"],
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        try:
            out, _ = p.communicate(timeout=limit)
        except subprocess.TimeoutExpired:
            p.kill()
            out, _ = p.communicate()
        return p.returncode, out


class Runner(unittest.TestCase):
    def test_a_failure_fails_the_run(self):
        code, out = run_module("""
            class Cases(unittest.TestCase):
                def test_fails(self):
                    self.assertEqual(1, 2, "the failure's own message")

                def test_passes(self):
                    pass
            """, 20)
        self.assertEqual(code, 1, out)
        self.assertIn("the failure's own message", out)
        self.assertIn("Ran 2 tests", out)

    def test_an_error_in_set_up_class_fails_the_run(self):
        code, out = run_module("""
            class Cases(unittest.TestCase):
                @classmethod
                def setUpClass(cls):
                    raise RuntimeError("no fixture")

                def test_never_runs(self):
                    pass
            """, 20)
        self.assertEqual(code, 1, out)
        self.assertIn("RuntimeError: no fixture", out)

    def test_a_hung_case_is_named_and_earlier_failures_printed(self):
        code, out = run_module("""
            class Cases(unittest.TestCase):
                def test_fails(self):
                    self.assertEqual(1, 2, "the failure's own message")

                def test_hangs(self):
                    time.sleep(60)
            """, 2)
        self.assertNotEqual(code, 0, out)
        self.assertIn("the failure's own message", out)  # before: printed only at the end
        self.assertIn("still running: __main__.Cases.test_hangs", out)

    def test_a_class_apart_overlaps_no_other(self):
        # Timed: its 2 cases together, the other class's 2 together, never one beside the other
        code, out = run_module("""
            SPANS = []

            def span(name):
                t0 = time.monotonic()
                time.sleep(0.3)
                SPANS.append((name[0], t0, time.monotonic()))

            class Timed(unittest.TestCase):
                overlap = 2
                apart = True

                def test_a(self):
                    span("t")

                def test_b(self):
                    span("t")

            class Loose(unittest.TestCase):
                def test_c(self):
                    span("l")

                def test_d(self):
                    span("l")

                @classmethod
                def tearDownClass(cls):
                    t = [s for s in SPANS if s[0] == "t"]
                    l = [s for s in SPANS if s[0] == "l"]
                    assert max(e for _, _, e in t) <= min(b for _, b, _ in l), SPANS
                    for group in (t, l):  # each class's own cases overlapped
                        assert max(b for _, b, _ in group) < min(e for _, _, e in group), SPANS
                    print("spans checked", flush=True)
            """, 20)
        self.assertEqual(code, 0, out)
        self.assertIn("spans checked", out)
        self.assertIn("Ran 4 tests", out)


if __name__ == "__main__":
    unittest.main(verbosity=2)
