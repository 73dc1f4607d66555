#!/usr/bin/env python3
"""Adds runs you launched yourself to a results folder, so `scripts/report.py DIR` reports them
beside (or instead of) a sweep's:

  scripts/add_run.py DIR SUMMARY.json [--metrics M.jsonl] [--trace 'T.%r.json'] [--label NAME]
  scripts/add_run.py DIR --bench BENCH.txt          # `starring bench [-model] --json` output
  scripts/report.py DIR

SUMMARY is a `starring train --summary-file` (schema starring.run.v1). Its files are copied into
DIR/runs/<id>/ (summary.json, metrics.jsonl, trace.<rank>.json and the merged trace.json), and
one record is appended to DIR/runs.jsonl in the sweep driver's format (status ok, or failed for
a run whose loss stopped being finite; the summary's fields; sweep "adhoc" unless --sweep says
otherwise), so every plot that a sweep's run gets, this run gets too. --label names the run's
line in the plots (default: the backend, e.g. "ring" or "ps S=2"); two runs with the same sweep,
label, workers and configuration count as repeats of one configuration (the report shows their
median and range). --bench takes the output of `starring bench --json` (the table lines, and
JSON rows that fail the bench-row checks, are skipped) and appends its rows to DIR/bench.jsonl,
which the bus-bandwidth plot and the cost model use; `starring bench-model --json` rows give the
cost model a compute time where the folder has no 1-worker run. DIR is created if needed.
"""
import argparse
import json
import os
import re
import shutil
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import starring_results as sr  # noqa: E402

# Summary fields that make up the run's configuration (the sweep driver's `config`: the flags).
CONFIG_KEYS = ("backend", "servers", "consistency", "staleness", "compress", "bucket_mb",
               "overlap", "straggler", "dataset", "batch", "accum", "lr", "epochs")


def fail(message):
    print(f"add_run.py: {message}", file=sys.stderr)
    sys.exit(2)


def load_json(path, what):
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except OSError as e:
        fail(f"cannot read the {what} {path}: {e.strerror}")
    except json.JSONDecodeError as e:
        fail(f"{path} is not a JSON file ({e}); give the file written by --summary-file")
    return None


def config_of(summary):
    cfg = {k.replace("_", "-"): summary[k] for k in CONFIG_KEYS
           if summary.get(k) not in (None, "", "none")}
    if summary.get("backend") != "ps":
        for k in ("servers", "consistency", "staleness"):
            cfg.pop(k, None)
    cfg["hidden"] = ",".join(str(w) for w in summary["model"]["widths"][1:-1])
    return {k: str(v).lower() if isinstance(v, bool) else str(v) for k, v in cfg.items()}


def roles_of(summary):
    w, s = summary["workers"], summary["num_servers"]
    if sr.is_colocated(summary):
        return {"worker": w, "server": 0, "colocated_server": w}
    return {"worker": w, "server": s if summary.get("backend") == "ps" else 0}


def next_index(out):
    runs, _ = sr.read_jsonl(os.path.join(out, "runs.jsonl"))
    return len(runs) + 1


def slug(text):
    return re.sub(r"[^A-Za-z0-9]+", "-", text).strip("-") or "run"


def add_summary(out, a):
    summary = load_json(a.summary, "summary")
    if not isinstance(summary, dict) or summary.get("schema") != sr.RUN_SCHEMA:
        fail(f"{a.summary} is not a `starring train --summary-file` summary (schema "
             f"{sr.RUN_SCHEMA}, one JSON object)")
    problems = sr.check_summary(summary, a.summary)
    if problems:
        fail("not a `starring train --summary-file` summary:\n  " + "\n  ".join(problems[:5]))
    # every input is checked before anything is written: a failure leaves no half-made run
    if a.metrics and not os.path.isfile(a.metrics):
        fail(f"no metrics file {a.metrics}" + (" (a stopped run leaves "
             f"{a.metrics}.partial)" if os.path.isfile(a.metrics + ".partial") else ""))
    traces = {}
    if a.trace:
        if "%r" not in a.trace:
            fail("--trace takes the pattern given to `starring train --trace`, with %r")
        traces = {rank: a.trace.replace("%r", str(rank)) for rank in range(summary["world_size"])}
        traces = {rank: src for rank, src in traces.items() if os.path.isfile(src)}
        if not traces:
            fail(f"no trace file matches {a.trace} for ranks 0..{summary['world_size'] - 1}")
    label = a.label or sr.backend_label(summary)
    run_id = sr.claim_unique_name(os.path.join(out, "runs"),
                                  f"{a.sweep}-{next_index(out):03d}-{slug(label)}-w{summary['workers']}")
    rdir = os.path.join(out, "runs", run_id)
    try:
        record_run(out, a, summary, run_id, rdir, label, traces)
    except BaseException:  # a full disk: no half-made run (cut copies, no record) is left
        shutil.rmtree(rdir, ignore_errors=True)
        raise
    print(f"add_run.py: {run_id} ({label}, W={summary['workers']}, np={summary['world_size']}, "
          f"{summary['samples_per_s']:,.0f} samples/s) -> {os.path.join(out, 'runs.jsonl')}")


def copy_file(src, dst):
    """shutil.copyfile, whose errors name the file they come from: a full disk named `src`."""
    with open(src, "rb") as fin, open(dst, "wb", buffering=0) as fout:
        while True:
            try:
                block = fin.read(1 << 20)
            except OSError as e:
                e.filename = src
                raise
            if not block:
                return
            view = memoryview(block)
            while view:
                try:
                    view = view[fout.write(view):]
                except OSError as e:
                    e.filename = dst
                    raise


def record_run(out, a, summary, run_id, rdir, label, traces):
    """add_summary's writes: the run's files into `rdir`, then its record."""
    rel = lambda p: os.path.relpath(p, out)  # noqa: E731
    rec = {"record_schema": sr.RECORD_SCHEMA, "sweep": a.sweep, "run_id": run_id,
           "variant": label, "config": config_of(summary), "grid_point": {},
           "np": summary["world_size"], "workers": summary["workers"],
           "num_servers": summary["num_servers"] if sr.is_dedicated_ps(summary) else 0,
           "roles": roles_of(summary), "command": f"(added by scripts/add_run.py from {a.summary})",
           "exit_code": 0, "elapsed_s": summary["wall_s"], "repeat": 1, "repeats": 1}
    for k, v in summary.items():
        if k not in ("status", "exit_code", "elapsed_s", "command", "config", "variant"):
            rec[k] = v
    rec["status"] = "ok"
    if summary.get("diverged_at_step") is not None:  # the run exited 1: not a measurement
        rec.update(status="failed", exit_code=1,
                   log_tail=f"loss not finite from step {summary['diverged_at_step']}\n")
    copy_file(a.summary, os.path.join(rdir, "summary.json"))
    rec["summary_file"] = rel(os.path.join(rdir, "summary.json"))
    if a.metrics:
        copy_file(a.metrics, os.path.join(rdir, "metrics.jsonl"))
        rec["metrics_file"] = rel(os.path.join(rdir, "metrics.jsonl"))
    if traces:
        copied = []
        for rank, src in traces.items():
            dst = os.path.join(rdir, f"trace.{rank}.json")
            copy_file(src, dst)
            copied.append(dst)
        rec["trace_files"] = [rel(p) for p in copied]
        merged = os.path.join(rdir, "trace.json")
        if sr.merge_traces(copied, merged):
            rec["trace_merged"] = rel(merged)
    sr.append_jsonl(os.path.join(out, "runs.jsonl"), rec)


def read_bench(a):
    try:
        with open(a.bench, encoding="utf-8", errors="replace") as f:
            lines = f.read().splitlines()
    except OSError as e:
        fail(f"cannot read {a.bench}: {e.strerror}")
    rows = []
    for line in lines:
        line = line.strip()
        if not line.startswith("{"):
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(row, dict) and "bench" in row and not sr.check_bench_row(row):
            rows.append(row)
    if not rows:
        fail(f"{a.bench} has no `starring bench --json` (or bench-model --json) rows (run the "
             "bench with --json)")
    return rows


def add_bench(out, a, rows):
    bench_id = f"{a.sweep}-bench-{next_index(out):03d}-{slug(os.path.basename(a.bench))}"
    for row in rows:
        row.setdefault("sweep", a.sweep)
        row.setdefault("bench_id", bench_id)
        row.setdefault("cores", host_cores())
        row.setdefault("oversubscribed", row.get("np", 1) > row["cores"])  # bench-model: 1
        row.setdefault("repeat", 1)
        row.setdefault("repeats", 1)
        sr.append_jsonl(os.path.join(out, "bench.jsonl"), row)
    print(f"add_run.py: {len(rows)} bench rows from {a.bench} -> "
          f"{os.path.join(out, 'bench.jsonl')}")


def host_cores():
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def main(argv=None):
    ap = argparse.ArgumentParser(prog="scripts/add_run.py",  # the text above, to its usage lines
                                 description="\n\n".join(__doc__.split("\n\n")[:2]),
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out", metavar="DIR", help="results folder (created if needed)")
    ap.add_argument("summary", nargs="?", help="a `starring train --summary-file` file")
    ap.add_argument("--metrics", help="the run's --metrics-file (loss curves)")
    ap.add_argument("--trace", help="the run's --trace pattern, with %%r (timelines)")
    ap.add_argument("--label", help="the run's name in the plots (default: its backend)")
    ap.add_argument("--sweep", default="adhoc", help="the record's sweep name (default adhoc)")
    ap.add_argument("--bench", help="`starring bench --json` (or bench-model --json) output to "
                    "add to DIR/bench.jsonl")
    a = ap.parse_args(argv)
    if not a.summary and not a.bench:
        ap.error("give a SUMMARY file, --bench FILE, or both")
    if not a.summary and (a.metrics or a.trace or a.label):
        ap.error("--metrics, --trace and --label describe a SUMMARY: give one")
    out = os.path.abspath(a.out)
    try:
        os.makedirs(out, exist_ok=True)
    except OSError as e:
        fail(f"cannot create the results folder {out}: {e.strerror}")
    rows = read_bench(a) if a.bench else None  # before anything is added: all or nothing
    try:  # a folder that takes no writes (a read-only mount, runs/ a plain file): one line
        if a.summary:
            add_summary(out, a)
        if rows:
            add_bench(out, a, rows)
    except OSError as e:  # an input it copies that cannot be read is named the same way
        fail(f"cannot add the run: {e.filename or out}: {e.strerror}")
    print(f"add_run.py: now `scripts/report.py {a.out}`")
    return 0


if __name__ == "__main__":
    sys.exit(main())
