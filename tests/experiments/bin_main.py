"""The `__main__` of the Python tests that run the `starring` executable: parses --bin, sets the
test module's BIN (and that of the modules in `shared`) to its absolute path, and runs the
module's unittest cases with the other arguments (unittest's own: -k, test names, ...).
  if __name__ == "__main__":
      bin_main.main(sys.modules[__name__])
Without such arguments, a test class whose `overlap` (or else the module's OVERLAP) is above 1
has up to that many cases run at once, with those of the classes next to it that allow it too
(threads; each case is its own TestCase instance and result; a class's setUpClass before its
cases, its tearDownClass after them): for cases that spend their time waiting on child processes
(a stopped rank, --timeout, a straggler's sleeps), which one ctest entry holding both cores would
otherwise run one after another. A class of overlap 1 runs alone, in the module's order; so does a
class whose `apart` is true, its cases up to `overlap` at once but beside no other class's (cases
timed from a fault against their own start-up: started together, their start-ups are alike, and
no other case's start-up falls in the wait they time).
A failure's traceback is printed as its case ends, and the cases still running are named every
STILL_RUNNING_S seconds in which none ended: a ctest entry killed at its TIMEOUT keeps both in
its log (they were printed only at the end, so such a log named neither the hung case nor the
failures before it).
"""
import argparse
import concurrent.futures
import inspect
import os
import sys
import time
import traceback
import unittest

STILL_RUNNING_S = 30  # with no case ended for this long, the running ones are named


def main(module, shared=()):
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    a, rest = ap.parse_known_args()
    for m in (module, *shared):
        m.BIN = os.path.abspath(a.bin)
    run(module, rest)


def run(module, rest):
    """Runs the module's cases as the file comment says; `rest`: unittest's own arguments."""
    classes = [c for _, c in inspect.getmembers(module, inspect.isclass)
               if issubclass(c, unittest.TestCase) and c.__module__ == module.__name__]
    default = getattr(module, "OVERLAP", 1)
    width = {c: max(1, getattr(c, "overlap", default)) for c in classes}
    if rest or max(width.values(), default=1) == 1:
        unittest.main(module=module, argv=[sys.argv[0]] + rest, verbosity=2)
        return
    # the classes in the order of the file, their cases in the order of the class; consecutive
    # classes that allow it share one pool, a class of overlap 1 runs alone
    classes.sort(key=lambda c: inspect.getsourcelines(c)[1])
    groups = []
    for c in classes:
        if (groups and width[c] > 1 and width[groups[-1][-1]] > 1 and
                not getattr(c, "apart", False) and not getattr(groups[-1][-1], "apart", False)):
            groups[-1].append(c)
        else:
            groups.append([c])
    t0 = time.monotonic()
    failed, ran = [], 0
    for group in groups:
        n, bad = run_overlapping(group, max(width[c] for c in group))
        ran += n
        failed += bad
    for name, _ in failed:  # their tracebacks were printed as they ended
        print(f"FAIL: {name}", flush=True)
    print("-" * 70 + f"\nRan {ran} tests in {time.monotonic() - t0:.1f} s "
          f"({'OK' if not failed else f'FAILED ({len(failed)})'})", flush=True)
    sys.exit(1 if failed else 0)


def run_one(case, started):
    result = unittest.TestResult()
    t0 = started[case.id()] = time.monotonic()
    case(result)
    return case, result, time.monotonic() - t0


def print_failure(name, text):
    print("=" * 70 + f"\nFAIL: {name}\n" + "-" * 70 + f"\n{text}", flush=True)


def run_overlapping(classes, width):
    """Runs the classes' cases, `width` at a time: a class's setUpClass first (in the pool too),
    then its cases, then its tearDownClass once they have all ended. Prints a line per case as it
    ends. Returns (cases run, [(name, traceback text)] of each failure or error)."""
    failed, ran = [], 0
    pool = concurrent.futures.ThreadPoolExecutor(width)
    setups = {pool.submit(c.setUpClass): c for c in classes}
    left = {c: [n for n in vars(c) if n.startswith("test") and callable(getattr(c, n))]
            for c in classes}
    names = {f: f"setUpClass ({c.__name__})" for f, c in setups.items()}
    started = dict.fromkeys(names.values(), time.monotonic())  # by name; run_one's own start
    pending = set(setups)

    def fail(name, text):
        failed.append((name, text))
        print_failure(name, text)

    while pending:
        done, pending = concurrent.futures.wait(pending, timeout=STILL_RUNNING_S,
                                                return_when="FIRST_COMPLETED")
        if not done:
            now = time.monotonic()
            running = sorted((started[names[f]], names[f]) for f in pending
                             if names[f] in started)
            print("still running: " + ", ".join(f"{n} ({now - t:.0f} s)" for t, n in running),
                  flush=True)
            continue
        # in the order submitted: the first class's cases go first whichever set-up ended first
        for f in sorted(done, key=list(names).index):
            if f in setups:
                c = setups[f]
                if f.exception() is not None:
                    fail(f"setUpClass ({c.__name__})",
                         "".join(traceback.format_exception(f.exception())))
                    continue
                for n in left[c]:
                    case = c(n)
                    g = pool.submit(run_one, case, started)
                    names[g] = case.id()
                    pending.add(g)
                continue
            case, result, took = f.result()
            ran += 1
            word = ("FAIL" if result.failures else "ERROR" if result.errors else
                    "skipped" if result.skipped else "ok")
            print(f"{case.id()} ... {word} ({took:.1f} s)", flush=True)
            for c, text in result.failures + result.errors:
                fail(str(c), text)
            c = type(case)
            left[c].remove(case._testMethodName)
            if not left[c]:
                try:
                    c.tearDownClass()
                except Exception:  # noqa: BLE001 - reported as the class's error, as unittest does
                    fail(f"tearDownClass ({c.__name__})", traceback.format_exc())
    pool.shutdown()
    return ran, failed
