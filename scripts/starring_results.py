"""Shared helpers for StarRing's result files (see the formats in docs/REFERENCE.md / notes):
checking records against the agreed schema, naming a run's backend for plots, the theoretical
bytes each rank moves per step, and folding repeated runs into one. Reading and writing the
files (read_jsonl, append_jsonl, write_whole, claim_unique_name) live in result_files.py and
are re-exported here.

Standard library only, so the sweep driver and the tests can import it without matplotlib.
"""
import json
import math
import re

# Re-exported: callers write and read result files through this module (sr.write_whole, ...).
from result_files import (HOST_TAG, append_jsonl, check_writable_folder,  # noqa: F401
                          claim_unique_name, read_jsonl, remove_stale_tmp, tmp_name, unique_name,
                          write_text_whole, write_whole)

# Re-exported: callers read a trace and judge a fault's outcome through this module (sr.*).
from fault_outcome import FAULT_LINE, expected_failure, fault_outcome  # noqa: F401
import trace_merge  # noqa: E402
from trace_merge import TRACE_OBJECT_END, read_trace_events, trace_base  # noqa: F401

RUN_SCHEMA = "starring.run.v1"
RECORD_SCHEMA = "starring.sweep.v1"
STATUSES = ("ok", "failed", "timeout", "skipped")

# Fields the trainer's summary must carry (schema "starring.run.v1"), with their types.
_NUM = (int, float)
SUMMARY_FIELDS = {
    "schema": str, "run_name": str, "date": str, "host": str, "git": str, "backend": str,
    "consistency": str, "staleness": int, "compress": str, "bucket_mb": _NUM, "overlap": bool,
    "straggler": str, "world_size": int, "workers": int, "num_servers": int, "cores": int,
    "oversubscribed": bool, "dataset": str, "model": dict, "batch": int, "accum": int,
    "global_batch": int, "lr": _NUM, "epochs": int, "steps": int, "wall_s": _NUM,
    "samples_per_s": _NUM, "step_time": dict, "bytes_per_step": dict, "ranks": list,
    "test_accuracy": _NUM, "test_loss": _NUM, "final_train_loss": _NUM, "history": list,
    "staleness_hist": dict,
}
# Optional (runs recorded before they existed lack them): untimed_steps (int), the first steps
# left out of samples_per_s and step_time, samples_per_s_all_steps (number), and device ("cpu" |
# "cuda", where rank 0 computed after any fallback) with device_name; diverged_at_step (int, only
# in a run whose loss stopped being finite: the run then exits 1 after writing the summary);
# checkpoints (int) written by the run and checkpoint_s {worker0, others_max (null with one
# worker)}, the seconds spent in them outside wall_s and step_time; first_step_unix (number);
# job {legs, steps, train_s, leg_train_s (per run), samples_per_s, epochs_by_earlier_legs}: every
# run of a resumed job (top-level figures are the run's; null: resumed from an older checkpoint).
OPTIONAL_SUMMARY_FIELDS = {"untimed_steps": int, "samples_per_s_all_steps": _NUM, "device": str,
                           "device_name": str, "diverged_at_step": int, "checkpoints": int,
                           "checkpoint_s": dict, "first_step_unix": _NUM, "job": dict}
STEP_TIME_FIELDS = ("total_s", "compute_s", "comm_s", "wait_s")
BYTES_FIELDS = ("worker_sent", "worker_recv", "server_sent", "server_recv")
RANK_FIELDS = ("rank", "role", "bytes_sent_per_step", "bytes_recv_per_step", "compute_s",
               "comm_s", "wait_s", "busy_s")
# Fields the sweep driver adds to every record, whatever the run's outcome.
RECORD_FIELDS = {
    "record_schema": str, "sweep": str, "run_id": str, "variant": str, "config": dict,
    "np": int, "workers": int, "num_servers": int, "roles": dict, "command": str,
    "status": str, "exit_code": int, "elapsed_s": _NUM, "git": str, "host": str, "date": str,
    "cores": int, "oversubscribed": bool,
}
BENCH_FIELDS = {
    "bench": str, "backend": str, "np": int, "workers": int, "size": int, "count": int,
    "type": str, "time_us": _NUM, "algbw_GBps": _NUM, "busbw_GBps": _NUM, "wrong": int,
}
# `starring bench --mode overlap --json` rows (experiments/bench_overlap.h), "bench": "overlap".
OVERLAP_FIELDS = {
    "bench": str, "backend": str, "compute": str, "np": int, "workers": int, "size": int,
    "count": int, "sync_overlap": bool, "t_comm_us": _NUM, "t_compute_us": _NUM,
    "t_total_us": _NUM, "overlap_pct": _NUM,
}

# `starring bench-model --json` rows, "bench": "model" (the cost model's compute time per step
# when the folder has no 1-worker run).
MODEL_FIELDS = {
    "bench": str, "model": str, "widths": list, "params": int, "batch": int, "device": str,
    "step_ms": _NUM, "samples_per_s": _NUM,
}


def _type_ok(value, typ):
    types = typ if isinstance(typ, tuple) else (typ,)
    if isinstance(value, bool):  # bool is an int in Python: accept it only where bool is meant
        return bool in types
    return isinstance(value, types)


def _check_fields(obj, fields, where):
    problems = []
    for key, typ in fields.items():
        if key not in obj:
            problems.append(f"{where}: missing '{key}'")
        elif obj[key] is not None and not _type_ok(obj[key], typ):
            problems.append(f"{where}: '{key}' is {type(obj[key]).__name__}")
    return problems


def check_summary(s, where="summary"):
    """Problems (strings) with a train summary; empty when it follows starring.run.v1."""
    problems = _check_fields(s, SUMMARY_FIELDS, where)
    if problems:
        return problems
    problems += _check_fields(s, {k: t for k, t in OPTIONAL_SUMMARY_FIELDS.items() if k in s},
                              where)
    # null (a NaN written by the trainer, a hand-edited file) where the checks below compare
    nulls = [k for k in ("model", "step_time", "bytes_per_step", "ranks", "history", "workers",
                         "num_servers", "world_size", "test_accuracy", "samples_per_s", "wall_s")
             if s[k] is None]
    if nulls:
        return problems + [f"{where}: '{k}' is null" for k in nulls]
    if s["schema"] != RUN_SCHEMA:
        problems.append(f"{where}: schema is {s['schema']!r}, expected {RUN_SCHEMA!r}")
    for key in ("widths", "params", "bytes"):
        if key not in s["model"]:
            problems.append(f"{where}: model lacks '{key}'")
    for key in STEP_TIME_FIELDS:
        if not isinstance(s["step_time"].get(key), _NUM):
            problems.append(f"{where}: step_time lacks '{key}'")
    for key in BYTES_FIELDS:
        if not isinstance(s["bytes_per_step"].get(key), _NUM):
            problems.append(f"{where}: bytes_per_step lacks '{key}'")
    if len(s["ranks"]) != s["world_size"]:
        problems.append(f"{where}: {len(s['ranks'])} ranks listed, world_size {s['world_size']}")
    for r in s["ranks"]:
        for key in RANK_FIELDS:
            if key not in r:
                problems.append(f"{where}: rank entry lacks '{key}'")
                break
    if s["workers"] + (s["num_servers"] if s["backend"] == "ps" and s.get("servers") != "colocated"
                       else 0) != s["world_size"]:
        problems.append(f"{where}: workers {s['workers']} + servers {s['num_servers']} "
                        f"!= world_size {s['world_size']}")
    for h in s["history"]:
        for key in ("epoch", "wall_s", "train_loss", "test_accuracy"):
            if key not in h:
                problems.append(f"{where}: history entry lacks '{key}'")
                break
    if not 0.0 <= s["test_accuracy"] <= 1.0:
        problems.append(f"{where}: test_accuracy {s['test_accuracy']} outside [0, 1]")
    for key in ("samples_per_s", "wall_s"):
        if not (s[key] >= 0 and math.isfinite(s[key])):
            problems.append(f"{where}: {key} = {s[key]}")
    return problems


def check_record(rec, where="record"):
    """Problems with one runs.jsonl record; an "ok" record must also carry a valid summary."""
    problems = _check_fields(rec, RECORD_FIELDS, where)
    if problems:
        return problems
    if rec["record_schema"] != RECORD_SCHEMA:
        problems.append(f"{where}: record_schema {rec['record_schema']!r}")
    if rec["status"] not in STATUSES:
        problems.append(f"{where}: status {rec['status']!r} not in {STATUSES}")
    if rec["status"] == "ok":
        problems += check_summary(rec, where)
        if rec.get("world_size") != rec["np"]:
            problems.append(f"{where}: world_size {rec.get('world_size')} != np {rec['np']}")
    elif rec["status"] in ("failed", "timeout") and "log_tail" not in rec:
        problems.append(f"{where}: a {rec['status']} run should carry 'log_tail'")
    if "recovery" in rec:
        problems += check_recovery(rec, where)
    return problems


# A recovery sweep's `recovery` object (scripts/sweep_recovery.py): every run's, each leg's, and
# what a successful run that was killed and resumed adds.
RECOVERY_FIELDS = {"role": str, "legs": list, "total_s": _NUM}
LEG_FIELDS = {"exit_code": int, "status": str, "elapsed_s": _NUM, "start_unix": _NUM,
              "command": str, "log_file": str}
RESUMED_FIELDS = {"fault": dict, "fault_step": int, "detect_s": _NUM, "resumed_at_step": int,
                  "steps_lost": int, "startup_s": _NUM}


def check_recovery(rec, where="record"):
    rv = rec["recovery"]
    if not isinstance(rv, dict):
        return [f"{where}: 'recovery' is {type(rv).__name__}"]
    problems = _check_fields(rv, RECOVERY_FIELDS, f"{where} recovery")
    if problems:
        return problems
    if rv["role"] not in ("baseline", "checkpoints", "fault"):
        problems.append(f"{where}: recovery role {rv['role']!r}")
    for i, leg in enumerate(rv["legs"]):
        problems += _check_fields(leg, LEG_FIELDS, f"{where} leg {i + 1}")
    if not problems and abs(sum(leg["elapsed_s"] for leg in rv["legs"]) - rv["total_s"]) > 0.01:
        problems.append(f"{where}: recovery total_s {rv['total_s']} is not the legs' sum")
    if rv["role"] == "fault" and rec.get("status") == "ok":
        problems += _check_fields(rv, RESUMED_FIELDS, f"{where} recovery")
        if len(rv["legs"]) != 2:
            problems.append(f"{where}: a resumed run has {len(rv['legs'])} legs, expected 2")
    return problems


def table_ready(rec):
    """True when an "ok" record has what the report's table and scaling plots read (the model's
    size, the step-time breakdown, the bytes, samples/s, accuracy); one without them (a
    hand-edited file, a summary of another version) is left out of them, not a traceback."""
    def num(x):
        return _type_ok(x, _NUM)
    try:
        return (isinstance(rec.get("workers"), int) and num(rec.get("samples_per_s"))
                and num(rec.get("test_accuracy")) and num(rec["model"]["params"])
                and num(rec["model"]["bytes"])
                and all(num(rec["step_time"][k]) for k in STEP_TIME_FIELDS)
                and all(num(rec["bytes_per_step"][k]) for k in BYTES_FIELDS))
    except (KeyError, TypeError):
        return False


def check_bench_row(row, where="bench row"):
    if "status" in row and "size" not in row:  # a bench pass that failed: recorded, not a row
        return [] if row["status"] in STATUSES else [f"{where}: status {row['status']!r}"]
    if row.get("bench") == "overlap":
        problems = _check_fields(row, OVERLAP_FIELDS, where)
        if not problems and not 0 <= row["overlap_pct"] <= 100:
            problems.append(f"{where}: overlap_pct {row['overlap_pct']} outside [0, 100]")
        return problems
    if row.get("bench") == "model":
        return _check_fields(row, MODEL_FIELDS, where)
    return _check_fields(row, BENCH_FIELDS, where)


# A quarter of a CPU: other processes' use below it is the host's background (the sampler, a
# shell), not load. host_busy is the report's one notion of a busy host (the table's note, the
# wall-clock captions, the busbw fading, the cost model). The sweep's own [other work on the
# host] line counts from a quarter of the host's CPUs instead, 0.5 on 2 cores: it says the host
# was loaded, not that the job's ranks waited for a CPU.
HOST_BUSY_SLACK_CPUS = 0.25


def span_text(values, spec=".1f"):
    """'1.2-1.9': the smallest and the largest of `values` as printed with `spec`, or one figure
    where both print alike (other CPUs of 1.56 and 1.63 were captioned '1.6-1.6')."""
    lo, hi = f"{min(values):{spec}}", f"{max(values):{spec}}"
    return lo if lo == hi else f"{lo}-{hi}"


def host_busy(rec):
    """True when other processes kept so many CPUs busy during a job (`host_other_cpus`, the
    sweep's OtherLoad) that they and the job's ranks outnumbered the host's cores: the ranks then
    waited for a CPU, and a bench pass timed that wait (one on 2 cores with 1.46 other CPUs took
    12 ms for a 64 KiB ring all-reduce that took 0.24 ms in the next pass). False without the
    figure (a `bench --json` run by hand)."""
    other, cores = rec.get("host_other_cpus"), rec.get("cores")
    if not _type_ok(other, _NUM) or not _type_ok(cores, _NUM) or cores <= 0:
        return False
    ranks = rec.get("np") if _type_ok(rec.get("np"), _NUM) else 1
    return other > HOST_BUSY_SLACK_CPUS and ranks + other > cores + HOST_BUSY_SLACK_CPUS


# ---- naming and theory ------------------------------------------------------------------------

def backend_label(rec):
    """The name a run's backend gets in plots: the sweep's variant when it has one."""
    if rec.get("variant"):
        return rec["variant"]
    b = rec.get("backend", "?")
    if b == "ps":
        servers = rec.get("servers")
        label = "ps colocated" if servers == "colocated" else f"ps S={servers}"
        if rec.get("consistency", "bsp") != "bsp":
            label += f" {rec['consistency']}"
        return label
    return b


def is_colocated(rec):
    return rec.get("backend") == "ps" and str(rec.get("servers")) == "colocated"


def is_dedicated_ps(rec):
    return rec.get("backend") == "ps" and not is_colocated(rec)


def wire_bytes(rec):
    """D: the bytes of one copy of the gradients on the wire (model bytes, halved by fp16/bf16)."""
    d = float(rec["model"]["bytes"])
    return d / 2 if rec.get("compress", "none") in ("fp16", "bf16") else d


def theory_bytes(rec):
    """Theoretical bytes per rank per step, each direction: {"worker": x, "server": y|None}.

    Ring, MPI, NCCL and co-located PS: every rank sends and receives 2(N-1)/N * D.
    Dedicated PS with W workers and S servers: a worker pushes D and pulls D; a server receives
    W*D/S and sends W*D/S (balanced shards)."""
    d = wire_bytes(rec)
    w = rec["workers"]
    if is_dedicated_ps(rec):
        s = max(1, rec["num_servers"])
        return {"worker": d, "server": w * d / s}
    return {"worker": 2.0 * (w - 1) / w * d if w > 0 else 0.0, "server": None}


def busiest(rec, key):
    """bytes_per_step `key` ('server_recv', 'server_sent', 'worker_sent', 'worker_recv') of the
    rank that moved the most: the theory (W*D/S per dedicated server, 2(N-1)/N x D per
    co-located worker) holds for each rank only when the shards are balanced, and the mean
    hides --ps-partition tensor's imbalance (np 4 co-located: a mean 1411020 B, rank 1
    2556584). Records written before the summary carried it give the mean."""
    by = rec["bytes_per_step"]
    return by.get(key + "_busiest", by[key])


def deviation_pct(measured, theory):
    if theory is None or measured is None:
        return None
    if theory == 0:
        return 0.0 if measured == 0 else float("inf")
    return 100.0 * (measured - theory) / theory


def worker_rates(rec):
    """Samples/s each worker sustained over its own training loop: batch x accum x its steps /
    its training seconds (wall_s: the timed steps' loop, evaluation and checkpoints out; records
    without it: compute + wait, which leave out the loop's work between steps, step_time.other_s:
    on a time-shared machine 18-45% of worker 0's step (np 3), so the summed rates of a
    synchronous run read above the job's by as much), from the per-rank entries (totals over the
    timed steps). With a straggler under ASP/SSP the fast workers keep their own pace, but each
    trains a fixed share of every epoch and then waits for the slowest: the sum of these rates is
    that pace, not the job's throughput (the summary's samples_per_s, which the straggler plot
    draws). Returns [] when the ranks lack what is needed."""
    rates = []
    per_step = rec.get("batch", 0) * rec.get("accum", 1)
    for r in rec.get("ranks", []):
        if r.get("role") != "worker":
            continue
        t = r.get("wall_s")
        if not isinstance(t, (int, float)) or t <= 0:
            t = r.get("compute_s", 0.0) + r.get("wait_s", 0.0)
        if "steps" not in r or t <= 0:
            return []
        # compute_s and wait_s leave out the run's first untimed_steps steps, so do the steps
        rates.append(per_step * (r["steps"] - r.get("untimed_steps", 0)) / t)
    return rates


# ---- repeated runs ----------------------------------------------------------------------------

def _median_of(group, value):
    """The group's member whose value is the median (the lower one for an even count): a real
    run or row, so every other field stays consistent with the figure it is chosen by."""
    return sorted(group, key=value)[(len(group) - 1) // 2]


def _collapse(items, key, value, spread_field, also=None):
    groups, order = {}, []
    for it in items:
        k = key(it)
        if k not in groups:
            groups[k] = []
            order.append(k)
        groups[k].append(it)
    out = []
    for k in order:
        group = groups[k]
        if len(group) == 1:
            out.append(group[0])
            continue
        pick = dict(_median_of(group, value))
        pick[spread_field] = sorted(value(g) for g in group)
        if also:
            also(group, pick)
        out.append(pick)
    return out


def config_key(r):
    """What makes runs repeats of one configuration: sweep, variant, workers, flags and grid
    point (the round, commit, host and date may differ)."""
    return (r.get("sweep"), r.get("variant"), r.get("workers"),
            json.dumps(r.get("config", {}), sort_keys=True),
            json.dumps(r.get("grid_point", {}), sort_keys=True))


def pass_key(b):
    """What makes bench records (rows, a failed pass's record) ones of the same pass made again:
    sweep, bench_id without its round's -rN, and the pass's args where recorded."""
    return (b.get("sweep"), re.sub(r"-r\d+$", "", str(b.get("bench_id", ""))),
            b.get("bench_args"))


def odd_key_field(rec, bench=False):
    """The first field by which the report groups `rec` (config_key, pass_key, the bench key)
    that it cannot group by, a hand-edited "grid_point": null or "bench_args": ["a"] (a
    TypeError that ended the whole report), with what it is; None when there is none."""
    scalar = (str, int, float, bool, type(None))
    kinds = ({"bench_id": str, **dict.fromkeys(_BENCH_KEY + ("bench_args",), scalar)} if bench
             else {"config": dict, "grid_point": dict,
                   **dict.fromkeys(("sweep", "variant", "workers"), scalar)})
    for k, typ in kinds.items():
        if k in rec and not isinstance(rec[k], typ):
            return f"'{k}' is {json.dumps(rec[k])[:40]}"
    return None


def collapse_repeats(runs):
    """Successful runs of one configuration made several times (scripts/sweep.sh --repeat) ->
    one record each: the run with the median samples_per_s, carrying every repeat's figure in
    `repeat_samples_per_s` (sorted), and, when they come from several commits (the sweep run
    again with --out after a change), those commits in `repeat_git` (sorted). Runs of different
    configurations, and other statuses, pass through unchanged."""
    def commits(group, pick):
        gits = sorted({str(g.get("git")) for g in group})
        if len(gits) > 1:
            pick["repeat_git"] = gits

    ok = [r for r in runs if r.get("status") == "ok"]
    return _collapse(ok, config_key, lambda r: r["samples_per_s"], "repeat_samples_per_s",
                     commits) + \
        [r for r in runs if r.get("status") != "ok"]


_BENCH_KEY = ("sweep", "bench", "backend", "np", "workers", "servers", "size", "type", "compute",
              "sync_overlap", "compress")


def _bench_row_key(b):
    return tuple(b.get(k) for k in _BENCH_KEY) + (re.sub(r"-r\d+$", "", b.get("bench_id", "")),)


def superseded_bench_rows(rows):
    """The rows of a pass made again with other args (a [bench] section's `-n 5` changed to
    `-n 20`, then the sweep again into the folder) at a size the later pass measured too: not
    repeats of it (they were pooled into one median) nor a series of their own (one line per
    backend and np), they give way to the latest pass's rows (file order) at that size."""
    last = {}
    for b in rows:
        if "size" in b:
            last[_bench_row_key(b)] = b.get("bench_args")
    return [b for b in rows if "size" in b and b.get("bench_args") != last[_bench_row_key(b)]]


def collapse_bench_repeats(rows):
    """Bench rows of one pass made several times -> the median row of each (by busbw, the lower
    median for an even count; by overlap % for overlap rows), with every repeat's busbw (or
    overlap %) in `repeat_busbw_GBps` (`repeat_overlap_pct`); rows superseded_bench_rows
    names are left out. Failed-pass records pass through."""
    key = _bench_row_key
    old = {id(b) for b in superseded_bench_rows(rows)}
    sized = [b for b in rows if "size" in b and id(b) not in old]
    rest = [b for b in rows if "size" not in b]
    overlap = [b for b in sized if b.get("bench") == "overlap"]
    plain = [b for b in sized if b.get("bench") != "overlap"]
    return (_collapse(plain, key, lambda b: b.get("busbw_GBps") or 0.0, "repeat_busbw_GBps")
            + _collapse(overlap, key, lambda b: b.get("overlap_pct") or 0.0, "repeat_overlap_pct")
            + rest)


def merge_traces(paths, out, skipped=None):
    """Merges per-rank Chrome trace files (pid = rank; times in microseconds of the UTC day,
    common/trace.cc) into one file that Perfetto / chrome://tracing shows with one process per
    rank; a rank that died contributes its '<file>.partial' (read_trace_events; a file and its
    .partial both given count once). Missing or unreadable inputs are skipped (with a dict
    `skipped`, each such path maps to why); returns the list of files merged. The events are
    copied line by line, not loaded (scripts/trace_merge.py)."""
    return trace_merge.merge(paths, out, skipped)
