"""The `__main__` of the Python tests that run the `starring` executable: parses --bin, sets the
test module's BIN (and that of the modules in `shared`) to its absolute path, and runs the
module's unittest cases with the other arguments (unittest's own: -k, test names, ...).
  if __name__ == "__main__":
      bin_main.main(sys.modules[__name__])
Without such arguments, a test class whose `overlap` is above 1 has that many of its cases run at
once (threads; each case is its own TestCase instance and result): for cases that spend their
time waiting on child processes (a stopped rank, --timeout, a straggler's sleeps), which one
ctest entry holding both cores would otherwise run one after another. The classes themselves run
one after another, in the module's order, each between its setUpClass and tearDownClass.
"""
import argparse
import concurrent.futures
import inspect
import os
import sys
import time
import traceback
import unittest


def main(module, shared=()):
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    a, rest = ap.parse_known_args()
    for m in (module, *shared):
        m.BIN = os.path.abspath(a.bin)
    classes = [c for _, c in inspect.getmembers(module, inspect.isclass)
               if issubclass(c, unittest.TestCase) and c.__module__ == module.__name__]
    if rest or not any(getattr(c, "overlap", 1) > 1 for c in classes):
        unittest.main(module=module, argv=[sys.argv[0]] + rest, verbosity=2)
        return
    # the classes in the order of the file; their cases in the order of the class
    classes.sort(key=lambda c: inspect.getsourcelines(c)[1])
    sys.exit(0 if run_overlapping(classes) else 1)


def run_one(case):
    result = unittest.TestResult()
    t0 = time.monotonic()
    case(result)
    return case, result, time.monotonic() - t0


def run_overlapping(classes):
    """Runs each class's cases, `overlap` at a time; prints a line per case as it ends, then the
    failures as unittest does. True if every case passed (or was skipped)."""
    t0 = time.monotonic()
    failed, ran = [], 0
    for cls in classes:
        names = [n for n in vars(cls) if n.startswith("test") and callable(getattr(cls, n))]
        try:
            cls.setUpClass()
        except Exception:  # noqa: BLE001 - reported as the class's error, as unittest does
            failed.append((f"setUpClass ({cls.__name__})", traceback.format_exc()))
            continue
        width = max(1, getattr(cls, "overlap", 1))
        with concurrent.futures.ThreadPoolExecutor(width) as pool:
            futures = [pool.submit(run_one, cls(n)) for n in names]
            for f in concurrent.futures.as_completed(futures):
                case, result, took = f.result()
                ran += 1
                bad = result.failures + result.errors
                word = ("FAIL" if result.failures else "ERROR" if result.errors else
                        "skipped" if result.skipped else "ok")
                print(f"{case.id()} ... {word} ({took:.1f} s)", flush=True)
                failed += [(str(c), text) for c, text in bad]
        try:
            cls.tearDownClass()
        except Exception:  # noqa: BLE001
            failed.append((f"tearDownClass ({cls.__name__})", traceback.format_exc()))
    for name, text in failed:
        print("=" * 70 + f"\nFAIL: {name}\n" + "-" * 70 + f"\n{text}", flush=True)
    print("-" * 70 + f"\nRan {ran} tests in {time.monotonic() - t0:.1f} s "
          f"({'OK' if not failed else f'FAILED ({len(failed)})'})", flush=True)
    return not failed
