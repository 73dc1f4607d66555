#!/usr/bin/env python3
"""scripts/add_run.py: runs launched by hand (a --summary-file, its metrics and traces, and
`starring bench --json` output) become records that scripts/report.py reports like a sweep's.
The summaries are the committed fixture's runs (tests/experiments/fixtures/results); no
`starring` binary needed."""
import json
import os
import re
import subprocess
import sys
import tempfile
import unittest
from unittest import mock

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
FIXTURE = os.path.join(HERE, "fixtures", "results")
ADD = os.path.join(REPO, "scripts", "add_run.py")
REPORT = os.path.join(REPO, "scripts", "report.py")
sys.path.insert(0, os.path.join(REPO, "scripts"))
import starring_results as sr  # noqa: E402

DRIVER_FIELDS = set(sr.RECORD_FIELDS) | {"grid_point", "metrics_file", "summary_file", "log_file",
                                         "quick", "repeat", "repeats", "sweep", "run_id"}


def fixture_run(run_id):
    with open(os.path.join(FIXTURE, "runs.jsonl"), encoding="utf-8") as f:
        for line in f:
            rec = json.loads(line)
            if rec["run_id"] == run_id:
                return rec
    raise KeyError(run_id)


def as_summary(rec):
    """What `starring train --summary-file` wrote for a fixture run: its record without the
    fields the sweep driver adds."""
    s = {k: v for k, v in rec.items() if k not in DRIVER_FIELDS or k in sr.SUMMARY_FIELDS}
    assert not sr.check_summary(s), sr.check_summary(s)
    return s


def add(*args):
    return subprocess.run([sys.executable, ADD, *args], capture_output=True, text=True,
                          timeout=60)


class AddRun(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory(prefix="starring_add_run_")
        self.dir = self.tmp.name
        self.out = os.path.join(self.dir, "results")

    def tearDown(self):
        self.tmp.cleanup()

    def write(self, name, obj):
        path = os.path.join(self.dir, name)
        with open(path, "w", encoding="utf-8") as f:
            f.write(obj if isinstance(obj, str) else json.dumps(obj))
        return path

    def test_hand_runs_make_a_report_with_throughput_bytes_and_timelines(self):
        for run_id in ("main-ring-w1", "main-ring-w2", "main-ps-1-w2"):
            rec = fixture_run(run_id)
            summary = self.write(run_id + ".json", as_summary(rec))
            metrics = os.path.join(FIXTURE, rec["metrics_file"])
            args = [self.out, summary, "--metrics", metrics]
            if run_id == "main-ring-w2":
                for rank in range(2):
                    self.write(f"t.{rank}.json", {"traceEvents": [
                        {"name": "forward", "ph": "X", "pid": rank, "tid": 0, "ts": 0, "dur": 5}]})
                args += ["--trace", os.path.join(self.dir, "t.%r.json")]
            p = add(*args)
            self.assertEqual(p.returncode, 0, p.stderr)
            self.assertIn("scripts/report.py", p.stdout)
        bench_rows, _ = sr.read_jsonl(os.path.join(FIXTURE, "bench.jsonl"))
        bench_rows = [b for b in bench_rows if "size" in b and b.get("bench") != "overlap"][:6]
        text = "# starring bench: ...\n   ring  1048576 ...\n" + "\n".join(
            json.dumps(b) for b in bench_rows) + "\n#  ring  Out of bounds values : 0 OK\n"
        p = add(self.out, "--bench", self.write("bench.txt", text))
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn(f"{len(bench_rows)} bench rows", p.stdout)

        runs, bad = sr.read_jsonl(os.path.join(self.out, "runs.jsonl"))
        self.assertEqual(bad, [])
        self.assertEqual([r["variant"] for r in runs], ["ring", "ring", "ps S=1"])
        for i, r in enumerate(runs):
            self.assertEqual(sr.check_record(r, r["run_id"]), [], r["run_id"])
            self.assertTrue(os.path.isfile(os.path.join(self.out, r["metrics_file"])))
            self.assertTrue(r["run_id"].startswith(f"adhoc-{i + 1:03d}-"))
        self.assertEqual(len(runs[1]["trace_files"]), 2)
        self.assertTrue(os.path.isfile(os.path.join(self.out, runs[1]["trace_merged"])))
        self.assertNotEqual(runs[0]["config"], runs[2]["config"])

        rep = subprocess.run([sys.executable, REPORT, self.out], capture_output=True, text=True,
                             timeout=300)
        self.assertEqual(rep.returncode, 0, rep.stderr)
        made = set(os.listdir(os.path.join(self.out, "report")))
        for png in ("throughput.png", "breakdown.png", "bytes_per_rank.png", "busbw.png",
                    "convergence.png"):
            self.assertIn(png, made)
        with open(os.path.join(self.out, "report", "report.html"), encoding="utf-8") as f:
            page = f.read()
        self.assertIn("Timelines", page)
        self.assertIn(runs[1]["run_id"], page)

    def test_label_names_the_line(self):
        summary = self.write("s.json", as_summary(fixture_run("main-ring-w2")))
        p = add(self.out, summary, "--label", "my ring")
        self.assertEqual(p.returncode, 0, p.stderr)
        runs, _ = sr.read_jsonl(os.path.join(self.out, "runs.jsonl"))
        self.assertEqual(runs[0]["variant"], "my ring")
        self.assertEqual(runs[0]["run_id"], "adhoc-001-my-ring-w2")

    def test_bench_model_rows_give_the_cost_model_its_compute_time(self):
        # The report's cost-model plot asks for "a 1-worker run (or bench-model row)", but
        # add_run.py refused `bench-model --json` output ("run the bench with --json") and the
        # report listed such rows as malformed bench rows.
        model = {"bench": "model", "model": "default", "widths": [784, 256, 128, 10],
                 "params": 235146, "batch": 64, "device": "cpu", "threads": 1,
                 "step_ms": 0.9, "samples_per_s": 71111.1, "model_gflops": 20.0,
                 "sgemm_gflops": 30.0, "ratio": 0.7, "optimizer_ms": 0.02, "steps_timed": 100}
        p = add(self.out, "--bench", self.write("model.txt", json.dumps(model) + "\n"))
        self.assertEqual(p.returncode, 0, p.stderr)
        bench_rows, _ = sr.read_jsonl(os.path.join(FIXTURE, "bench.jsonl"))
        text = "\n".join(json.dumps(b) for b in bench_rows if "size" in b) + "\n"
        self.assertEqual(add(self.out, "--bench", self.write("b.txt", text)).returncode, 0)
        rows, _ = sr.read_jsonl(os.path.join(self.out, "bench.jsonl"))
        self.assertEqual([sr.check_bench_row(r) for r in rows], [[]] * len(rows))
        self.assertEqual(rows[0]["oversubscribed"], False)
        rep = subprocess.run([sys.executable, REPORT, self.out], capture_output=True, text=True,
                             timeout=300)
        self.assertEqual(rep.returncode, 0, rep.stderr)
        self.assertNotIn("warning", rep.stderr)
        self.assertIn("cost_model_scaling.png", os.listdir(os.path.join(self.out, "report")))

    def test_a_run_never_overwrites_an_earlier_runs_files(self):
        # Ids count the records: with the first deleted from runs.jsonl (to drop it from the
        # report), the next run got the id, and so the folder, of the last one and overwrote it.
        for run in ("main-ring-w2", "main-ps-colocated-w2", "main-wide-ring-w2"):
            path = self.write(run + ".json", as_summary(fixture_run(run)))
            self.assertEqual(add(self.out, path, "--label", "mine").returncode, 0)
            if run == "main-ps-colocated-w2":
                with open(os.path.join(self.out, "runs.jsonl"), encoding="utf-8") as f:
                    kept = f.readlines()[1:]
                with open(os.path.join(self.out, "runs.jsonl"), "w", encoding="utf-8") as f:
                    f.writelines(kept)
        runs, _ = sr.read_jsonl(os.path.join(self.out, "runs.jsonl"))
        self.assertEqual(len({r["run_id"] for r in runs}), 2, [r["run_id"] for r in runs])
        for r in runs:
            with open(os.path.join(self.out, r["summary_file"]), encoding="utf-8") as f:
                self.assertEqual(json.load(f)["samples_per_s"], r["samples_per_s"], r["run_id"])

    def test_bad_inputs_are_one_line_and_exit_2(self):
        summary = self.write("s.json", as_summary(fixture_run("main-ring-w2")))
        cases = [
            ([self.write("m.jsonl", '{"step": 1}\n{"step": 2}\n')], "not a JSON file"),
            ([self.write("x.json", {"schema": "other"})], "not a `starring train --summary-file`"),
            ([os.path.join(self.dir, "absent.json")], "cannot read the summary"),
            ([summary, "--metrics", os.path.join(self.dir, "none.jsonl")], "no metrics file"),
            ([summary, "--trace", os.path.join(self.dir, "t.json")], "with %r"),
            (["--bench", self.write("b.txt", "# a table without --json\n")], "no `starring bench"),
            ([summary, "--trace", os.path.join(self.dir, "none.%r.json")], "no trace file"),
            ([summary, "--bench", os.path.join(self.dir, "b.txt")], "no `starring bench"),
        ]
        for args, message in cases:
            p = add(self.out, *args)
            self.assertEqual(p.returncode, 2, (args, p.stdout, p.stderr))
            self.assertIn(message, p.stderr, args)
            self.assertNotIn("Traceback", p.stderr)
            # nothing added, not even in part: a run folder without its record (the retry's
            # run then took the next name) or the run without the bench rows asked for with it
            self.assertFalse(os.path.exists(os.path.join(self.out, "runs")), args)
            self.assertFalse(os.path.exists(os.path.join(self.out, "runs.jsonl")), args)

    def test_a_folder_that_takes_no_writes_is_one_line(self):
        # DIR exists but its runs/ cannot be made (a read-only mount; here a plain file): it was
        # a traceback from os.makedirs
        summary = self.write("s.json", as_summary(fixture_run("main-ring-w2")))
        os.makedirs(self.out)
        open(os.path.join(self.out, "runs"), "w").close()
        p = add(self.out, summary)
        self.assertEqual(p.returncode, 2, (p.stdout, p.stderr))
        self.assertIn("cannot add the run: ", p.stderr)
        self.assertIn("runs", p.stderr)
        self.assertNotIn("Traceback", p.stderr)
        self.assertFalse(os.path.exists(os.path.join(self.out, "runs.jsonl")))


    def test_a_full_disk_leaves_no_half_made_run_and_names_the_file_written(self):
        # A file-size limit stands in for a full disk (EFBIG where ENOSPC would come). The
        # run's folder was left with a cut metrics.jsonl and no record, and the line named the
        # metrics file copied from, not the one it could not write.
        summary = self.write("s.json", as_summary(fixture_run("main-ring-w2")))
        metrics = self.write("m.jsonl", "".join(json.dumps({"step": i, "loss": 1.0 / (i + 1)})
                                                + "\n" for i in range(400)))
        self.assertGreater(os.path.getsize(metrics), 8192)

        def full_disk():
            import resource
            import signal
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
            resource.setrlimit(resource.RLIMIT_FSIZE, (8192, 8192))

        p = subprocess.run([sys.executable, ADD, self.out, summary, "--metrics", metrics],
                           capture_output=True, text=True, timeout=60, preexec_fn=full_disk)
        self.assertNotEqual(p.returncode, 0, p.stderr)
        self.assertNotIn("Traceback", p.stderr)
        self.assertRegex(p.stderr.strip(), r"^add_run.py: cannot add the run: "
                         + re.escape(os.path.join(self.out, "runs")) + r"/[^/]+/metrics\.jsonl: "
                         r"File too large$")
        self.assertEqual(os.listdir(os.path.join(self.out, "runs")), [])
        self.assertFalse(os.path.exists(os.path.join(self.out, "runs.jsonl")))
        self.assertEqual(add(self.out, summary, "--metrics", metrics).returncode, 0)  # retried

    def test_a_diverged_run_is_recorded_as_failed(self):
        # `starring train` exits 1 after writing the summary of a run whose loss stopped being
        # finite: its figures are no measurement, and the report must list it with the failures
        summary = as_summary(fixture_run("main-ring-w2"))
        summary["diverged_at_step"] = 17
        p = add(self.out, self.write("s.json", summary))
        self.assertEqual(p.returncode, 0, p.stderr)
        runs, _ = sr.read_jsonl(os.path.join(self.out, "runs.jsonl"))
        self.assertEqual((runs[0]["status"], runs[0]["exit_code"]), ("failed", 1))
        self.assertIn("loss not finite from step 17", runs[0]["log_tail"])
        self.assertEqual(sr.check_record(runs[0]), [])

    def test_every_ranks_trace_is_taken_servers_too(self):
        rec = fixture_run("main-ps-1-w2")  # 2 workers and 1 server: ranks 0..2
        self.assertEqual(rec["world_size"], 3)
        for rank in range(3):
            self.write(f"t.{rank}.json", {"traceEvents": [
                {"name": "step", "ph": "X", "pid": rank, "tid": 0, "ts": 0, "dur": 5}]})
        p = add(self.out, self.write("s.json", as_summary(rec)), "--trace",
                os.path.join(self.dir, "t.%r.json"))
        self.assertEqual(p.returncode, 0, p.stderr)
        runs, _ = sr.read_jsonl(os.path.join(self.out, "runs.jsonl"))
        self.assertEqual(len(runs[0]["trace_files"]), 3)
        with open(os.path.join(self.out, runs[0]["trace_merged"]), encoding="utf-8") as f:
            self.assertEqual(sorted(e["pid"] for e in json.load(f)["traceEvents"]), [0, 1, 2])

    def test_bench_rows_are_checked_and_told_apart_by_the_cores(self):
        # a row that lacks a field the report reads is left out, and a job of as many ranks as
        # the host has CPUs does not time-share them (the bench prints neither figure itself)
        cores = len(os.sched_getaffinity(0))
        row = {"bench": "allreduce", "backend": "ring", "workers": 2, "size": 1024,
               "count": 256, "type": "float", "time_us": 10.0, "algbw_GBps": 0.1,
               "busbw_GBps": 0.1, "wrong": 0}
        rows = [dict(row, np=cores), dict(row, np=cores + 1, size=2048),
                {k: v for k, v in dict(row, np=2, size=4096).items() if k != "time_us"}]
        p = add(self.out, "--bench", self.write("b.txt", "\n".join(map(json.dumps, rows))))
        self.assertEqual(p.returncode, 0, p.stderr)
        got, _ = sr.read_jsonl(os.path.join(self.out, "bench.jsonl"))
        self.assertEqual([(r["size"], r["cores"], r["oversubscribed"]) for r in got],
                         [(1024, cores, False), (2048, cores, True)])


    def test_bench_rows_take_the_sweep_name_given(self):
        row = {"bench": "allreduce", "backend": "ring", "np": 2, "workers": 2, "size": 1024,
               "count": 256, "type": "float", "time_us": 10.0, "algbw_GBps": 0.1,
               "busbw_GBps": 0.1, "wrong": 0}
        p = add(self.out, "--sweep", "mine", "--bench", self.write("b.txt", json.dumps(row)))
        self.assertEqual(p.returncode, 0, p.stderr)
        got, _ = sr.read_jsonl(os.path.join(self.out, "bench.jsonl"))
        self.assertEqual([(r["sweep"], r["bench_id"]) for r in got],
                         [("mine", "mine-bench-001-b-txt")])


class MergeTraces(unittest.TestCase):
    """scripts/merge_traces.py (used by add_run.py and the sweep): a rank killed mid-run leaves
    only '<trace>.partial' (common/trace.cc: JSON Array Format, one event per line, no closing
    ']', perhaps a last line cut by the kill); its events are merged with the others'."""

    def test_ranks_started_on_both_sides_of_a_midnight_line_up(self):
        # times count from 00:00 UTC of the process_name's args.utc_day (common/trace.cc): a rank
        # that started just after midnight is put on the earlier day's count (its times past a
        # day), where the merge copied both as they were, a day apart
        day_us = 86400e6

        def trace(path, rank, day, ts, head='{"traceEvents":['):
            lines = [json.dumps({"ph": "M", "name": "process_name", "pid": rank, "tid": 0,
                                 "args": {"name": f"rank {rank}", "utc_day": day}}),
                     json.dumps({"ph": "X", "name": "forward", "cat": "compute", "ts": ts,
                                 "dur": 3.0, "pid": rank, "tid": 0})]
            with open(path, "w", encoding="utf-8") as f:
                f.write(head + "\n" + ",\n".join(lines) + ("\n]}\n" if "{" in head else ""))

        with tempfile.TemporaryDirectory(prefix="starring_merge_") as tmp:
            paths = [os.path.join(tmp, f"t.{r}.json") for r in range(3)]
            trace(paths[0], 0, 20424, day_us - 2e6)  # 23:59:58
            trace(paths[1], 1, 20425, 1e6)           # 00:00:01, 3 s later
            trace(paths[2] + ".partial", 2, 20425, 2e6, head=" " * 15 + "[")  # killed
            out = os.path.join(tmp, "merged.json")
            self.assertEqual(sr.merge_traces(paths, out), paths)
            with open(out, encoding="utf-8") as f:
                events = json.load(f)["traceEvents"]
        ts = {e["pid"]: e["ts"] for e in events if e["ph"] == "X"}
        self.assertEqual(ts, {0: day_us - 2e6, 1: day_us + 1e6, 2: day_us + 2e6})
        days = {e["pid"]: e["args"]["utc_day"] for e in events if e["ph"] == "M"}
        self.assertEqual(days, {0: 20424, 1: 20424, 2: 20424})

    def test_a_killed_ranks_partial_trace_is_merged(self):
        ev = lambda rank, ts: {"ph": "X", "name": "forward", "cat": "compute",  # noqa: E731
                               "ts": ts, "dur": 1.5, "pid": rank, "tid": 0}
        with tempfile.TemporaryDirectory(prefix="starring_merge_") as tmp:
            with open(os.path.join(tmp, "t.0.json"), "w", encoding="utf-8") as f:
                json.dump({"traceEvents": [ev(0, 1), ev(0, 2)], "displayTimeUnit": "ms"}, f)
            lines = ",\n".join(json.dumps(ev(1, t)) for t in (1, 2, 3))
            with open(os.path.join(tmp, "t.1.json.partial"), "w", encoding="utf-8") as f:
                f.write(" " * 15 + "[\n" + lines + ',\n{"ph":"X","name":"back')  # cut
            out = os.path.join(tmp, "merged.json")
            p = subprocess.run([sys.executable, os.path.join(REPO, "scripts", "merge_traces.py"),
                                out, os.path.join(tmp, "t.0.json"), os.path.join(tmp, "t.1.json"),
                                os.path.join(tmp, "t.2.json")],
                               capture_output=True, text=True, timeout=60)
            self.assertEqual(p.returncode, 1, p.stderr)  # t.2.json: neither file nor .partial
            self.assertIn("merged 2 of 3 files", p.stdout)
            # ... and says which file was left out, and why (it said only "2 of 3")
            self.assertIn("t.2.json", p.stderr)
            self.assertIn("No such file", p.stderr)
            with open(out, encoding="utf-8") as f:
                events = json.load(f)["traceEvents"]
            self.assertEqual(sorted((e["pid"], e["ts"]) for e in events),
                             [(0, 1), (0, 2), (1, 1), (1, 2), (1, 3)])
            with open(os.path.join(tmp, "bad.json.partial"), "w", encoding="utf-8") as f:
                f.write("not a trace\n")
            with self.assertRaises(ValueError):
                sr.read_trace_events(os.path.join(tmp, "bad.json"))

    def test_the_merge_copies_events_without_loading_them(self):
        # A traced run of a small model that hit the sweep's 10 s bound left 610 MB of traces;
        # merging them (in the sweep driver, after the bound, before the run was recorded) took
        # 2.9 GB and 55 s. Files in trace.cc's layout are now copied line by line: the memory a
        # merge takes must stay far below the trace's size (here 1/10 of ~13 MB).
        import tracemalloc
        with tempfile.TemporaryDirectory(prefix="starring_merge_") as tmp:
            paths = []
            for rank in (0, 1):
                path = os.path.join(tmp, f"t.{rank}.json")
                lines = ",\n".join(json.dumps({"ph": "X", "name": "forward", "cat": "compute",
                                               "ts": 1e10 + i, "dur": 1.5, "pid": rank,
                                               "tid": 0}) for i in range(60000))
                with open(path + ("" if rank == 0 else ".partial"), "w", encoding="utf-8") as f:
                    if rank == 0:  # finished
                        f.write('{"traceEvents":[\n' + lines + '\n],"displayTimeUnit":"ms"}\n')
                    else:  # killed: no end, the last line cut
                        f.write(" " * 15 + "[\n" + lines + ',\n{"ph":"X","na')
                paths.append(path)
            size = sum(os.path.getsize(os.path.join(tmp, n)) for n in os.listdir(tmp))
            out = os.path.join(tmp, "merged.json")
            tracemalloc.start()
            try:
                self.assertEqual(sr.merge_traces(paths, out), paths)
                peak = tracemalloc.get_traced_memory()[1]
            finally:
                tracemalloc.stop()
            self.assertLess(peak, size / 10, (peak, size))
            with open(out, encoding="utf-8") as f:
                events = json.load(f)["traceEvents"]
            self.assertEqual(len(events), 120000)
            self.assertEqual(events[-1]["pid"], 1)

    def test_a_partial_beside_an_earlier_runs_trace_cc_file_is_the_one_merged(self):
        # as below, with the earlier run's file in trace.cc's own layout (one event a line), the
        # one the merge copies line by line instead of reading it whole through read_trace_events
        ev = lambda ts: json.dumps({"ph": "X", "name": "step", "cat": "compute",  # noqa: E731
                                    "ts": ts, "dur": 1.0, "pid": 1, "tid": 0})
        with tempfile.TemporaryDirectory(prefix="starring_merge_") as tmp:
            base = os.path.join(tmp, "t.1.json")
            with open(base, "w", encoding="utf-8") as f:
                f.write('{"traceEvents":[\n' + ",\n".join(ev(t) for t in (1, 2, 3))
                        + '\n],"displayTimeUnit":"ms"}\n')
            with open(base + ".partial", "w", encoding="utf-8") as f:
                f.write(" " * 15 + "[\n" + ev(10) + ",\n" + ev(11) + ",\n")
            out = os.path.join(tmp, "merged.json")
            self.assertEqual(sr.merge_traces([base], out), [base])
            with open(out, encoding="utf-8") as f:
                self.assertEqual([e["ts"] for e in json.load(f)["traceEvents"]], [10, 11])

    @staticmethod
    def one_event_trace(folder):
        """A finished trace file of one event, `folder`/t.0.json; returns its path."""
        trace = os.path.join(folder, "t.0.json")
        with open(trace, "w", encoding="utf-8") as f:
            f.write('{"traceEvents":[\n{"ph":"X","name":"s","ts":1,"dur":1,"pid":0,"tid":0}'
                    '\n],"displayTimeUnit":"ms"}\n')
        return trace

    def test_an_output_that_cannot_be_written_is_one_line_and_leaves_no_tmp(self):
        # merge_traces.py ended in a traceback when the output's folder was not there, and an
        # output that is a directory left '<out>.tmp' (the whole merged file) behind
        with tempfile.TemporaryDirectory(prefix="starring_merge_") as tmp:
            trace = self.one_event_trace(tmp)
            for out in (os.path.join(tmp, "no-such-folder", "merged.json"),
                        os.path.join(tmp, "a-folder")):
                if out.endswith("a-folder"):
                    os.mkdir(out)
                p = subprocess.run([sys.executable,
                                    os.path.join(REPO, "scripts", "merge_traces.py"), out, trace],
                                   capture_output=True, text=True, timeout=60)
                self.assertEqual(p.returncode, 1, p.stderr)
                self.assertNotIn("Traceback", p.stderr)
                self.assertIn(f"merge_traces.py: cannot write {out}: ", p.stderr)
                self.assertEqual([n for n in os.listdir(tmp) if n.endswith(".tmp")], [])

    def test_a_merge_writes_through_a_temporary_of_its_own(self):
        # merge() wrote '<out>.tmp', a name every writer of <out> shared: a second merge into the
        # same output (the sweep's and a hand-run merge_traces.py) truncated the first one's
        # half-written file and renamed it into place. Another writer's '<out>.tmp', mid-write,
        # stands in for it: it must stay untouched, and the output be this merge's whole file.
        with tempfile.TemporaryDirectory(prefix="starring_merge_") as tmp:
            trace = self.one_event_trace(tmp)
            out = os.path.join(tmp, "merged.json")
            others = [out + ".tmp", sr.tmp_name(out, os.getpid() + 1)]
            for other in others:
                with open(other, "w", encoding="utf-8") as f:
                    f.write('{"traceEvents":[\n{"ph":"X"')
            real_open, opened = open, []

            def spy(path, *a, **k):
                opened.append(path)
                return real_open(path, *a, **k)

            with mock.patch("builtins.open", spy):
                self.assertEqual(sr.merge_traces([trace], out), [trace])
            self.assertIn(sr.tmp_name(out), opened)
            for other in others:
                with open(other, encoding="utf-8") as f:
                    self.assertEqual(f.read(), '{"traceEvents":[\n{"ph":"X"', other)
            with open(out, encoding="utf-8") as f:
                self.assertEqual([e["name"] for e in json.load(f)["traceEvents"]], ["s"])
            self.assertEqual(sorted(os.listdir(tmp)),
                             sorted(["t.0.json", "merged.json"] + [os.path.basename(o)
                                                                   for o in others]))

    def test_a_file_with_a_line_that_is_no_event_is_left_out(self):
        # a finished file in trace.cc's layout with a stray line inside (copied, it made the
        # merged file invalid JSON) or a broken last event (only a killed rank's .partial may
        # end cut) is skipped whole, and merge_traces.py exits 1
        ev = lambda ts: json.dumps({"ph": "X", "name": "step", "ts": ts, "dur": 1.0,  # noqa
                                    "pid": 0, "tid": 0})
        with tempfile.TemporaryDirectory(prefix="starring_merge_") as tmp:
            good, bad = os.path.join(tmp, "t.0.json"), os.path.join(tmp, "t.1.json")
            cut = os.path.join(tmp, "t.2.json")  # finished, yet its last event is cut
            for path, middle, last in ((good, ev(2), ev(3)), (bad, "garbage", ev(3)),
                                       (cut, ev(2), '{"ph":"X","na')):
                with open(path, "w", encoding="utf-8") as f:
                    f.write('{"traceEvents":[\n' + ",\n".join([ev(1), middle, last])
                            + '\n],"displayTimeUnit":"ms"}\n')
            out = os.path.join(tmp, "merged.json")
            self.assertEqual(sr.merge_traces([good, bad, cut], out), [good])
            with open(out, encoding="utf-8") as f:
                self.assertEqual([e["ts"] for e in json.load(f)["traceEvents"]], [1, 2, 3])

    def test_a_partial_beside_an_earlier_runs_file_is_the_one_read(self):
        # The same --trace path run again and rank 1 killed: t.1.json is the earlier run's, the
        # .partial this run's (close() renames it away, so one that is there is the newer); the
        # merge took the stale file. Both names given (a glob 't.*.json*') count once.
        ev = lambda ts: {"ph": "X", "name": "step", "cat": "compute", "ts": ts,  # noqa: E731
                         "dur": 1.0, "pid": 1, "tid": 0}
        with tempfile.TemporaryDirectory(prefix="starring_merge_") as tmp:
            base = os.path.join(tmp, "t.1.json")
            with open(base, "w", encoding="utf-8") as f:
                json.dump({"traceEvents": [ev(1), ev(2), ev(3)], "displayTimeUnit": "ms"}, f)
            with open(base + ".partial", "w", encoding="utf-8") as f:
                f.write(" " * 15 + "[\n" + json.dumps(ev(10)))
            self.assertEqual([e["ts"] for e in sr.read_trace_events(base)], [10])
            out = os.path.join(tmp, "merged.json")
            self.assertEqual(sr.merge_traces([base, base + ".partial"], out),
                             [base, base + ".partial"])
            with open(out, encoding="utf-8") as f:
                self.assertEqual([e["ts"] for e in json.load(f)["traceEvents"]], [10])
            # completed in place (closing ']' and the object's end written), killed before
            # '{"traceEvents":' went over the leading spaces: every event, the last one too
            with open(base + ".partial", "w", encoding="utf-8") as f:
                f.write(" " * 15 + "[\n" + json.dumps(ev(10)) + ",\n" + json.dumps(ev(11))
                        + '\n],"displayTimeUnit":"ms"}\n')
            self.assertEqual([e["ts"] for e in sr.read_trace_events(base)], [10, 11])


if __name__ == "__main__":
    unittest.main()
