#!/usr/bin/env python3
"""Tests of how the sweep driver reads sweep files (no `starring` binary needed): the shipped
sweeps expand to the runs they promise, and the file format's rules hold (grid products, variant
overrides, `-` to leave a flag out, `servers = half`, [quick] and [quick variant|bench NAME]
overrides); the signals it stops on (test_sweep_records.py: what it records of a job, and
--resume; test_sweep_time_bound.py: every job's time bound)."""
import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(REPO, "scripts"))
import starring_results as sr  # noqa: E402
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

    def test_quick_descriptions_state_the_quick_shape(self):
        # the line printed at the start named the full sweep's workers ("(4 workers)") over runs
        # of 2 workers
        for name, full, quick in (("crossover", "(4 workers)", "quick: 2 workers"),
                                  ("main", "1/2/4 workers", "quick: 1/2 workers")):
            sweep, _, _ = expand(os.path.join(SWEEPS, name + ".ini"))
            self.assertIn(full, sweep["description"])
            qsweep, qruns, _ = expand(os.path.join(SWEEPS, name + ".ini"), quick=True)
            self.assertIn(quick, qsweep["description"])
            self.assertEqual(sorted({r["workers"] for r in qruns}),
                             [2] if name == "crossover" else [1, 2])
            self.assertTrue(all("description" not in r["flags"] for r in qruns))

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

    def test_faults_hit_a_worker_and_a_server_of_every_backend(self):
        for quick in (False, True):
            _, runs, _ = expand(os.path.join(SWEEPS, "faults.ini"), quick)
            for r in runs:
                kind, rank, step = r["flags"]["fault"].split(":")
                np_, servers, _ = driver.roles_of(r["flags"], r["workers"])
                # the server variant faults the server rank (the last), the others a worker
                self.assertEqual(int(rank) >= np_ - servers and servers > 0,
                                 r["variant"].endswith("-server"), r)
                self.assertLess(int(rank), np_)
            self.assertEqual(sorted({r["flags"]["fault"].split(":")[0] for r in runs}),
                             ["hang", "kill"])
            self.assertEqual(sorted({r["variant"] for r in runs}),
                             ["mpi", "ps-1", "ps-1-server", "ps-colocated", "ring"])

    def test_every_shipped_sweep_and_its_quick_variant_expand(self):
        for name in sorted(os.listdir(SWEEPS)):
            for quick in (False, True):
                sweep, runs, _ = expand(os.path.join(SWEEPS, name), quick)
                self.assertTrue(runs, name)
                self.assertGreater(float(sweep["timeout_s"]), 0)
                for r in runs:
                    self.assertNotIn("timeout_s", r["flags"], name)  # a misplaced sweep key


class FaultOutcome(unittest.TestCase):
    LINE = "[starring] {who}: --fault {what} at step 30 (unix time 1795970000.500000)\n"

    def outcome(self, who, what, errors, status="failed", rc=1, spec="hang:1:30"):
        log = "step 29 ...\n" + self.LINE.format(who=who, what=what) + "\n".join(errors)
        return sr.fault_outcome(spec, log, 1795970008.75, status, rc)

    def test_a_named_silent_worker(self):
        f = self.outcome("rank 1", "hang: going silent",
                         ["starring: error: rank 0: timeout after 5.0 s in recv from rank 1 (tag 7)"])
        self.assertEqual((f["kind"], f["rank"], f["step"], f["injected"]), ("hang", 1, 30, True))
        self.assertAlmostEqual(f["detect_s"], 8.25)
        self.assertEqual((f["names_rank"], f["outcome"]), (True, "detected"))

    def test_the_reporting_rank_alone_is_not_a_name_for_the_faulty_one(self):
        f = self.outcome("rank 1", "hang: going silent",
                         ["starring: error: rank 0: timeout after 5.0 s in MPI_Iallreduce",
                          "mpirun: job stopped: rank 0 called MPI_Abort (error code 1)"])
        self.assertEqual((f["names_rank"], f["outcome"]), (False, "detected, rank not named"))
        f = self.outcome("rank 1", "hang: going silent", ["starring: error: rank 10: timeout"])
        self.assertFalse(f["names_rank"])  # rank 10 is not rank 1
        # a silenced server that nobody noticed ends the job itself, naming itself
        f = self.outcome("server rank 4", "hang: going silent",
                         ["starring: error: rank 4: server rank 4: --fault hang:4:30 injected"],
                         spec="hang:4:30")
        self.assertEqual((f["names_rank"], f["outcome"]), (False, "detected, rank not named"))

    def test_a_killed_server_hung_missed_and_never_reached(self):
        kill = ["mpirun: job stopped: rank 4 on node vm was killed by signal 9 (Killed)"]
        f = self.outcome("server rank 4", "kill", kill, rc=137, spec="kill:4:30")
        self.assertEqual((f["rank"], f["outcome"]), (4, "detected"))
        self.assertEqual(self.outcome("rank 1", "hang: going silent", [], status="timeout",
                                      rc=124)["outcome"], "hung")
        self.assertEqual(self.outcome("rank 1", "kill", [], status="ok", rc=0)["outcome"],
                         "missed")
        f = sr.fault_outcome("kill:1:30", "no fault line\n", 0.0, "ok", 0)
        self.assertEqual((f["injected"], f["detect_s"], f["outcome"]), (False, None, "not injected"))
        rec = {"status": "failed", "fault": self.outcome("rank 1", "kill", kill)}
        self.assertEqual(rec["fault"]["outcome"], "detected, rank not named")  # rank 4 named
        self.assertTrue(sr.expected_failure(rec))  # still the failure the fault was meant to cause
        rec = {"status": "timeout", "fault": self.outcome("rank 1", "kill", [], "timeout", 124)}
        self.assertFalse(sr.expected_failure(rec))


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

    def test_quick_workers_are_the_worker_counts_without_a_grid(self):
        # `[quick] workers = 2` in a sweep whose workers are not a [grid] key became the train
        # flag `--workers 2`, and the sweep stopped on "'workers' is not a `starring train`
        # option" (in the shipped files workers is always a grid key)
        path = self.write("[variant a]\nbackend = ring\n[quick]\nworkers = 1 2\n")
        self.assertEqual([(r["workers"], r["flags"]) for r in expand(path, quick=True)[1]],
                         [(1, {"backend": "ring"}), (2, {"backend": "ring"})])
        self.assertEqual([r["workers"] for r in expand(path)[1]], [1])

    def test_roles(self):
        self.assertEqual(driver.roles_of({"backend": "ps"}, 4)[:2], (5, 1))  # trainer default
        self.assertEqual(driver.roles_of({"backend": "ps", "servers": "colocated"}, 4)[:2],
                         (4, 0))
        self.assertEqual(driver.roles_of({"backend": "ring", "servers": "3"}, 4)[:2], (4, 0))


class BadSweepFiles(unittest.TestCase):
    """A sweep file the driver cannot use is one line and exit 2 before any run (these were
    Python tracebacks; a bench pass's bad `np` surfaced only after every training run)."""
    CASES = [
        ("[variant a]\nbackend = ring\n[variant a]\nbackend = mpi\n", "already exists"),
        ("[sweep]\nthis is not a key\n", "this is not a key"),
        ("backend = ring\n", "no section headers"),
        ("[grid]\nworkers = 1 two\n", "workers = two"),
        ("[bench x]\nnp = two\n", "bench x: np = two"),
        ("[sweep]\ntimeout_s = soon\n", "timeout_s = soon"),
        ("[bench x]\nargs = --backends \"ring\n", "bench x: args: No closing quotation"),
        # sections and keys the driver does not read were skipped without a word: a typo lost
        # a variant, and a `starring train --config` file ran as one default run
        ("[varaint ring]\nbackend = ring\n", "section [varaint ring] is not one the driver"),
        ("[data]\ndataset = synthetic\n[sync]\nbackend = ring\n", "section [data]"),
        ("[sweep]\ntimeout = 30\n", "[sweep] timeout: not a key of that section"),
        ("[bench x]\nargs = -b 1K\nnps = 2\n", "[bench x] nps: not a key"),
        ("[variant a]\n[quick variant b]\nmax-steps = 2\n", "[quick variant b] names no"),
        # a stop request announces nothing and exits 75: recorded as a failed run whose fault
        # was "not injected"
        ("[variant s]\nbackend = ring\nfault = stop:0:3\n", "variant s: fault = stop:0:3: a stop"),
        # `inf` passed the >= 1 check, then int(inf) was an OverflowError traceback at the
        # first run, after its folder was made
        ("[sweep]\ntimeout_s = inf\n", "timeout_s = inf"),
        # a grid key with no values made no run at all: "0 train runs", exit 0
        ("[grid]\nworkers = 1 2\nhidden =\n", "[grid] hidden: no values"),
        ("[variant a]\nworkers =\n", "variant a: workers: no values"),
        # a yes/no key with another word was read as no: `trace = y` gave no traces
        ("[sweep]\ntrace = y\n", "[sweep] trace = y: expected yes or no (or true/false, on/off, "
         "1/0)"),  # the words it takes, all of them
        # not a flag: the number of worker ranks ("'workers' is not a `starring train` option")
        ("[train]\nworkers = 4\n", "[train] workers: the worker counts go in [grid] or a "
         "[variant NAME]"),
        ("[quick]\nreport = maybe\n", "[sweep] report = maybe: expected yes or no"),
    ]
    # command-line values: (arguments, message)
    ARG_CASES = [(["--timeout", "0.5"], "--timeout 0.5"), (["--timeout", "inf"], "--timeout inf")]

    def test_one_line_and_exit_2(self):
        cases = [(text, message, []) for text, message in self.CASES] + [
            ("[bench x]\nargs = -b 1K\n", message, args) for args, message in self.ARG_CASES]
        for text, message, extra in cases:
            with self.subTest(text=text, args=extra), tempfile.TemporaryDirectory() as tmp:
                path = os.path.join(tmp, "bad.ini")
                with open(path, "w") as f:
                    f.write(text)
                p = subprocess.run([sys.executable, os.path.join(REPO, "scripts", "sweep.py"),
                                    path, "--dry-run", "--quick", *extra], capture_output=True,
                                   text=True, timeout=60)
                self.assertEqual(p.returncode, 2, p.stderr)
                self.assertEqual(len(p.stderr.strip().splitlines()), 1, p.stderr)
                self.assertIn(message, p.stderr)

    def test_a_launcher_that_cannot_start_a_run_is_one_line_before_any_run(self):
        # {n} was a KeyError traceback after the first run's folder was made; a program that is
        # not there failed every run (exit 127). --dry-run checks only the placeholder.
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "ok.ini")
            with open(path, "w") as f:
                f.write("[grid]\nworkers = 1\n")
            for launcher, dry, message in [("srun -n {n}", True, "KeyError('n')"),
                                           ("srun -n {np", False, "ValueError"),
                                           ("no-such-launcher -n {np}", False, "no program")]:
                out = os.path.join(tmp, "out")
                p = subprocess.run([sys.executable, os.path.join(REPO, "scripts", "sweep.py"),
                                    path, "--out", out, "--launcher", launcher]
                                   + (["--dry-run"] if dry else []),
                                   capture_output=True, text=True, timeout=60)
                self.assertEqual(p.returncode, 2, p.stderr)
                self.assertEqual(len(p.stderr.strip().splitlines()), 1, p.stderr)
                self.assertIn(message, p.stderr)
                self.assertFalse(os.path.exists(out))
            p = subprocess.run([sys.executable, os.path.join(REPO, "scripts", "sweep.py"), path,
                                "--launcher", "no-such-launcher -n {np}", "--dry-run"],
                               capture_output=True, text=True, timeout=60)
            self.assertEqual(p.returncode, 0, p.stderr)  # planning a cluster's sweep elsewhere

    def test_a_missing_binary_names_the_build_command(self):
        # it said `cmake -S . -B build && cmake --build build --target starring`, where the
        # README's way is scripts/build.sh (what the quickstart runs)
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "ok.ini")
            with open(path, "w") as f:
                f.write("[grid]\nworkers = 1\n")
            out = os.path.join(tmp, "out")
            p = subprocess.run([sys.executable, os.path.join(REPO, "scripts", "sweep.py"), path,
                                "--out", out, "--bin", os.path.join(tmp, "no-starring")],
                               capture_output=True, text=True, timeout=60)
            self.assertEqual(p.returncode, 2, p.stderr)
            self.assertEqual(len(p.stderr.strip().splitlines()), 1, p.stderr)
            self.assertIn("is not an executable: build it first (scripts/build.sh --target "
                          "starring)", p.stderr)
            self.assertFalse(os.path.exists(out))

    def test_a_bench_without_np_runs_and_counts_on_2_ranks(self):
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "b.ini")
            with open(path, "w") as f:
                f.write("[bench x]\nargs = -b 1K\n")
            _, _, _, _, benches = driver.load_sweep(path, False)
            self.assertEqual(benches["x"]["np"], "2")


class DefaultFolder(unittest.TestCase):
    def test_a_previous_folder_is_moved_aside_even_with_one_of_its_second_there(self):
        # results/NAME moved to results/NAME.<its time>: a folder of that name there already
        # (two sweeps within a second) made the rename an OSError traceback
        from unittest import mock
        with tempfile.TemporaryDirectory() as tmp, mock.patch.object(driver, "REPO", tmp):
            out = os.path.join(tmp, "results", "s")
            os.makedirs(os.path.join(out, "runs"))
            os.utime(out, (1e9, 1e9))
            os.makedirs(os.path.join(tmp, "results", "s.20010909-014640", "runs"))
            self.assertEqual(driver.default_out("s", False), out)
            self.assertEqual(sorted(os.listdir(os.path.join(tmp, "results"))),
                             ["s.20010909-014640", "s.20010909-014640-2"])


class GpuCount(unittest.TestCase):
    """The GPUs a run may use (sweep_jobs.gpu_count, which decides whether a GPU variant runs or
    is skipped): nvidia-smi's list, cut at the first CUDA_VISIBLE_DEVICES entry that is not a
    GPU, as CUDA reads it."""

    def test_visible_devices_end_at_the_first_non_gpu_entry(self):
        import sweep_jobs
        from unittest import mock
        smi = subprocess.CompletedProcess([], 0, stdout="GPU 0: H100 (UUID: a)\n"
                                          "GPU 1: H100 (UUID: b)\nGPU 2: H100 (UUID: c)\n")
        with mock.patch.object(sweep_jobs.subprocess, "run", lambda *a, **k: smi):
            for visible, count in ((None, 3), ("0,1", 2), ("1,-1,0", 1), ("-1", 0), ("", 0),
                                   ("0,1,2,3", 3)):
                env = {} if visible is None else {"CUDA_VISIBLE_DEVICES": visible}
                with mock.patch.dict(os.environ, env, clear=False):
                    if visible is None:
                        os.environ.pop("CUDA_VISIBLE_DEVICES", None)
                    self.assertEqual(sweep_jobs.gpu_count(), count, visible)


class BenchFlags(unittest.TestCase):
    def test_a_bench_flag_with_its_value_after_an_equals_sign_is_known(self):
        import sweep_jobs
        from unittest import mock
        with mock.patch.object(sweep_jobs, "help_flags", lambda binary, command: {"iters", "b"}):
            self.assertEqual(sweep_jobs.unknown_flags("starring", [], {
                "x": {"args": "--iters=5 -b 1K"}}), [])
            self.assertEqual(sweep_jobs.unknown_flags("starring", [], {
                "x": {"args": "--iter=5"}}), ["sweep: bench x: '--iter' is not a `starring "
                                              "bench` option (see starring bench --help)"])


class StopSignals(unittest.TestCase):
    """SIGTERM and SIGHUP stop a sweep as Ctrl-C does (test_sweep_interrupt.py), except where the
    driver was started to ignore one: `nohup scripts/sweep.sh scaling &` ignores SIGHUP, and a
    logout then stopped that sweep (the handler replaced the ignore, and the report's SIG_DFL
    after it killed the driver)."""

    def test_an_ignored_signal_stays_ignored_and_the_rest_are_put_back(self):
        import signal
        saved = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGHUP)}
        try:
            signal.signal(signal.SIGHUP, signal.SIG_IGN)  # as nohup leaves it
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            before = driver.stop_as_ctrl_c({})
            self.assertEqual(signal.getsignal(signal.SIGHUP), signal.SIG_IGN)
            self.assertTrue(callable(signal.getsignal(signal.SIGTERM)))
            driver.restore_signals(before)
            self.assertEqual(signal.getsignal(signal.SIGHUP), signal.SIG_IGN)
            self.assertEqual(signal.getsignal(signal.SIGTERM), signal.SIG_DFL)
        finally:
            for s, h in saved.items():
                signal.signal(s, h)


if __name__ == "__main__":
    unittest.main(verbosity=2)
