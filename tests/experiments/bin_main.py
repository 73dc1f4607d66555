"""The `__main__` of the Python tests that run the `starring` executable: parses --bin, sets the
test module's BIN to its absolute path, and runs the module's unittest cases with the other
arguments (unittest's own: -k, test names, ...).
  if __name__ == "__main__":
      bin_main.main(sys.modules[__name__])
"""
import argparse
import os
import sys
import unittest


def main(module):
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    a, rest = ap.parse_known_args()
    module.BIN = os.path.abspath(a.bin)
    unittest.main(module=module, argv=[sys.argv[0]] + rest, verbosity=2)
