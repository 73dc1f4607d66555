#!/usr/bin/env python3
"""The host's other load during a sweep's jobs (scripts/sweep_jobs.py OtherLoad): the CPUs that
processes other than the job kept busy, what the sweep prints of it, and the report's note on the
runs and bench passes it concerns (scripts/report.py load_note). A shared machine's builds and
tests made one quickstart's figures (load average 15-26 on 2 cores) unreadable while the report
said nothing of it."""
import json
import os
import subprocess
import sys
import tempfile
import unittest
from unittest import mock

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(HERE)), "scripts"))
import report  # noqa: E402
import sweep_jobs  # noqa: E402

FIXTURE = os.path.join(HERE, "fixtures", "results")  # the report's (make_fixture.py)
REPORT = os.path.join(os.path.dirname(os.path.dirname(HERE)), "scripts", "report.py")


class OtherLoadArithmetic(unittest.TestCase):
    def test_the_jobs_own_cpu_time_is_not_counted(self):
        # 10 s of wall time; the host was busy 17 s of CPU time, 9 of them the job's own
        busy, own, clock = iter([100.0, 117.0]), iter([5.0, 14.0]), iter([50.0, 60.0])
        with mock.patch.object(sweep_jobs, "host_busy_s", lambda: next(busy)), \
                mock.patch.object(sweep_jobs, "own_cpu_s", lambda: next(own)), \
                mock.patch.object(sweep_jobs.time, "monotonic", lambda: next(clock)):
            load = sweep_jobs.OtherLoad()
            self.assertEqual(load.cpus(), 0.8)

    def test_busy_is_all_but_idle_and_iowait(self):
        # /proc/stat's cpu line: user nice system idle iowait irq softirq steal guest guest_nice;
        # guest time is inside user time already, steal counts as busy, iowait does not
        line = "cpu  100 20 30 5000 700 4 6 50 40 0\n"
        with mock.patch("builtins.open", mock.mock_open(read_data=line)), \
                mock.patch.object(sweep_jobs.os, "sysconf", lambda name: 100):
            self.assertAlmostEqual(sweep_jobs.host_busy_s(), (100 + 20 + 30 + 4 + 6 + 50) / 100)

    def test_no_proc_stat_no_figure(self):
        with mock.patch.object(sweep_jobs, "host_busy_s", lambda: None):
            self.assertIsNone(sweep_jobs.OtherLoad().cpus())

    def test_a_job_of_its_own_is_not_other_load(self):
        # a child that burns 0.5 s of CPU, waited for: its time is the job's own, not other
        # load. Other engineers' work on a shared machine adds to the figure, so only the job's
        # own time is bounded: what remains is at most the host's other load, never negative.
        load = sweep_jobs.OtherLoad()
        own0 = sweep_jobs.own_cpu_s()
        subprocess.run([sys.executable, "-c",
                        "import time\nt=time.process_time()\n"
                        "while time.process_time()-t<0.5: pass"], check=True)
        self.assertGreaterEqual(sweep_jobs.own_cpu_s() - own0, 0.45)
        self.assertGreaterEqual(load.cpus(), 0.0)
        self.assertGreater(sweep_jobs.host_busy_s(), 0)

    def test_the_jobs_orphans_are_its_own(self):
        # The job's process starts a child that outlives it and burns 0.5 s of CPU, as
        # scripts/mpirun.sh's stderr filter outlives mpirun with no one waiting for it: launch()
        # waits for it, so its time is the job's own (before, it went to init and counted as
        # other processes' load).
        burn = ("import time\nt=time.process_time()\n"
                "while time.process_time()-t<0.5: pass")
        job = ("import subprocess, sys\n"
               f"subprocess.Popen([sys.executable, '-c', {burn!r}])\n")
        ctx = {"launcher": sys.executable, "timeout_s": 60}
        with tempfile.TemporaryDirectory() as tmp:
            own0 = sweep_jobs.own_cpu_s()
            try:
                rc, status, _, _ = sweep_jobs.launch(1, ["-c", job], os.path.join(tmp, "log"), ctx)
            finally:
                sweep_jobs.end_deferral(ctx)
        self.assertEqual((rc, status), (0, "ok"))
        self.assertGreaterEqual(sweep_jobs.own_cpu_s() - own0, 0.45)
        with self.assertRaises(ChildProcessError):  # nothing left behind
            os.waitpid(-1, os.WNOHANG)


class WhatIsSaid(unittest.TestCase):
    def test_the_sweep_line(self):
        self.assertEqual(sweep_jobs.other_load_words({"host_other_cpus": 0.4, "cores": 2}), "")
        self.assertEqual(sweep_jobs.other_load_words({"host_other_cpus": 1.43, "cores": 2}),
                         "  [other work on the host: 1.4 of 2 CPUs]")
        self.assertEqual(sweep_jobs.other_load_words({"cores": 2}), "")

    @staticmethod
    def fixture_runs(sweep, loads):
        """Successful runs of the committed report fixture, one per load (None: no figure)."""
        runs = [r for r in report.load(FIXTURE)[0] if r.get("sweep") == sweep
                and r.get("status") == "ok"][:len(loads)]
        for r, load in zip(runs, loads):
            r["cores"] = 2
            r.pop("host_other_cpus", None)
            if load is not None:
                r["host_other_cpus"] = load
        return runs

    def test_the_report_note_counts_what_the_table_and_plots_show(self):
        runs = self.fixture_runs("main", [0.1, 1.2, None])  # None: an older record
        # not in the table: a skipped run, a failed one
        runs += [{"run_id": "s", "sweep": "main", "status": "skipped", "cores": 2,
                  "host_other_cpus": 1.9},
                 {"run_id": "f", "sweep": "main", "status": "failed", "cores": 2,
                  "host_other_cpus": 1.9}]
        pass1 = {"bench_id": "x", "sweep": "main", "repeat": 1, "date": "d1", "cores": 2,
                 "host_other_cpus": 1.9}
        bench = [dict(pass1, size=1), dict(pass1, size=2),  # one pass, two rows
                 dict(pass1, size=1, repeat=2, date="d2", host_other_cpus=0.1),  # its repeat
                 {"bench_id": "y", "sweep": "main", "status": "failed", "cores": 2,
                  "host_other_cpus": 1.9}]  # a pass that gave no rows
        note = report.load_note(runs, bench)
        self.assertIn("2 of 5 runs and bench passes ran on a busy host: other processes kept "
                      "1.2-1.9 of the host's 2 CPUs busy", note)
        self.assertEqual(report.load_note(runs[:1], []), "")

    def test_a_range_whose_ends_print_alike_is_one_figure(self):
        # the quickstart's folder on a loaded machine: bench passes beside 1.56-1.63 other CPUs
        # were captioned 'kept 1.6-1.6 of the host's 2 CPUs', a range that is none
        import report_traffic as rt
        runs = self.fixture_runs("main", [1.56, 1.63])
        self.assertIn("2 of 2 runs and bench passes ran on a busy host: other processes kept "
                      "1.6 of the host's 2 CPUs busy", report.load_note(runs, []))
        # np 1 and 2 on 2 cores: 1 + 1.3 and 2 + 1.6 outnumber them
        self.assertIn("kept 1.3-1.6 of", report.load_note(self.fixture_runs("main", [1.3, 1.6]),
                                                          []))
        rows = [{"np": 3, "cores": 2, "host_other_cpus": x} for x in (1.56, 1.58, 1.63)]
        self.assertIn("other processes kept 1.6 of the host's 2 CPUs busy", rt.busy_note(rows))
        rows[0]["host_other_cpus"] = 1.26
        self.assertIn("other processes kept 1.3-1.6 of the host's", rt.busy_note(rows))

    def test_one_sweeps_terminal_table_has_its_own_note(self):
        # report.py --table-sweep main: the note under the table is the main sweep's
        runs = self.fixture_runs("main", [0.1, 0.2]) + self.fixture_runs("straggler", [1.5])
        bench = [{"bench_id": "x", "sweep": "bucket", "repeat": 1, "size": 1, "cores": 2,
                  "host_other_cpus": 1.9}]
        self.assertIn("2 of 4 runs and bench passes ran on", report.load_note(runs, bench))
        self.assertEqual(report.load_note(*report.sweep_scope(runs, bench, "main")), "")
        self.assertIn("1 of 1 runs and bench passes ran on a busy host: other processes kept 1.5 "
                      "of the host's 2 CPUs busy",
                      report.load_note(*report.sweep_scope(runs, bench, "straggler")))
        self.assertEqual(report.sweep_scope(runs, bench, None), (runs, bench))

    def test_report_py_puts_the_scoped_note_under_the_scoped_table(self):
        # `report.py --table-sweep main` (the quickstart's last step): the note under the main
        # sweep's table is the main sweep's; the busy straggler run is in summary.md's note
        runs = self.fixture_runs("main", [0.1, 0.2]) + self.fixture_runs("straggler", [1.5])
        with tempfile.TemporaryDirectory() as tmp:
            with open(os.path.join(tmp, "runs.jsonl"), "w", encoding="utf-8") as f:
                f.writelines(json.dumps(r) + "\n" for r in runs)
            for scope, noted in ((["--table-sweep", "main"], False), ([], True)):
                p = subprocess.run([sys.executable, REPORT, tmp, *scope], capture_output=True,
                                   text=True, timeout=300)
                self.assertEqual(p.returncode, 0, p.stderr)
                self.assertIn("MLP", p.stdout)  # the table
                self.assertEqual("other processes kept 1.5 of the host's 2 CPUs" in p.stdout,
                                 noted, (scope, p.stdout))
            with open(os.path.join(tmp, "report", "summary.md"), encoding="utf-8") as f:
                self.assertIn("other processes kept 1.5 of the host's 2 CPUs", f.read())


class OneBusyHost(unittest.TestCase):
    """The table's note, the wall-clock captions and the busbw plot's fading count the same jobs
    as on a busy host (sr.host_busy). The note counted from a quarter of the host's CPUs: a
    1-rank run beside 0.8 of 2 other CPUs was under the table and in no caption, a 4-rank run
    or pass beside 0.6 of 4 in the captions and faded, and not under the table."""
    CASES = [(1, 2, 0.8),   # the note's alone before: 1 + 0.8 < 2 cores
             (4, 4, 0.6),   # the captions' alone before: 0.6 < a quarter of 4, 4 + 0.6 > 4
             (2, 2, 1.5),   # both
             (2, 16, 5.0),  # the note's alone before: 5 > 4, 2 + 5 < 16
             (1, 2, 0.1)]   # neither

    def test_each_job_is_counted_alike_everywhere(self):
        import report_plots
        import report_traffic
        for np_, cores, other in self.CASES:
            rec = {"np": np_, "cores": cores, "host_other_cpus": other}
            run = dict(self.ok_run(), **rec)
            row = dict(rec, bench_id="b", repeat=1, date="d", size=1)
            with self.subTest(np=np_, cores=cores, other=other):
                noted = bool(report.load_note([run], []))
                self.assertEqual(noted, bool(report_plots.busy_runs_note([run])))
                self.assertEqual(bool(report.load_note([], [row])), noted)
                self.assertEqual(bool(report_traffic.busy_note([row])), noted)

    def test_the_counts_agree_on_a_mixed_folder(self):
        import report_plots
        runs = []
        for i, (np_, cores, other) in enumerate(self.CASES):
            runs.append(dict(self.ok_run(), run_id=f"r{i}", np=np_, cores=cores,
                             host_other_cpus=other))
        # the busy ones ran on 4 and 2 cores: 'of the host's 4 CPUs' was the largest count
        self.assertIn("2 of 5 runs and bench passes ran on a busy host: other processes kept "
                      "0.6-1.5 of the hosts' 2-4 CPUs busy", report.load_note(runs, []))
        self.assertIn("2 of these 5 runs ran while other processes kept 0.6-1.5 of the hosts' "
                      "2-4 CPUs busy", report_plots.busy_runs_note(runs))

    def test_a_run_on_a_smaller_host_is_not_given_the_larger_hosts_cpus(self):
        # a folder from two hosts: a run on a 2-core host beside 1.5 other CPUs was captioned
        # 'of the host's 4 CPUs', the other host's count
        import report_plots
        import report_traffic
        small = dict(self.ok_run(), run_id="small", host="a", np=2, cores=2,
                     host_other_cpus=1.5)
        big = dict(self.ok_run(), run_id="big", host="b", np=4, cores=4, host_other_cpus=0.1)
        self.assertIn("of the host's 2 CPUs busy", report.load_note([small, big], []))
        self.assertIn("1 of these 2 runs ran while other processes kept 1.5 of the host's 2 "
                      "CPUs busy", report_plots.busy_runs_note([small, big]))
        twin = dict(small, run_id="twin", host="c")
        self.assertIn("kept 1.5 of each host's 2 CPUs busy",
                      report_plots.busy_runs_note([small, twin, big]))
        rows = [dict(small, bench_id="b1", size=1), dict(big, bench_id="b2", size=1,
                                                         host_other_cpus=3.0)]
        self.assertIn("of the hosts' 2-4 CPUs busy", report_traffic.busy_note(rows))

    @staticmethod
    def ok_run():
        return next(r for r in report.load(FIXTURE)[0] if r.get("status") == "ok"
                    and r.get("sweep") == "main")


if __name__ == "__main__":
    unittest.main()
