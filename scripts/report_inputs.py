"""What scripts/report.py reads, and what in it did not succeed.

load() reads a results folder (runs.jsonl, bench.jsonl and the metrics files the runs name) and
lists the problems of its records, each naming the file's line. The rest names the runs and bench
passes that did not succeed: their lists (not_ok, failed_passes) and the scaling and busbw plots'
notes on them (not_drawn_note, passes_note).
"""
import collections
import os

import report_plots as rp
import starring_results as sr


def load(results):
    problems, kept = [], {}
    for name in ("runs.jsonl", "bench.jsonl"):
        lines = []
        items, bad = sr.read_jsonl(os.path.join(results, name), lines)
        problems += bad
        kept[name] = []
        for line, x in zip(lines, items):  # every problem names the file's line
            odd = isinstance(x, dict) and sr.odd_key_field(x, name == "bench.jsonl")
            if not isinstance(x, dict):  # a line that parses but is not a record (a list)
                problems.append(f"{name} line {line}: not a JSON object, left out")
            elif odd:  # a record the report cannot group by its keys (a null grid_point)
                problems.append(f"{name} line {line} ({x.get('run_id') or x.get('bench_id', '?')})"
                                f": {odd}, left out")
            else:
                kept[name].append((line, x))
    for line, r in kept["runs.jsonl"]:
        where = f"runs.jsonl line {line} ({r.get('run_id', '?')})"
        if r.get("status") == "ok" and not sr.table_ready(r):  # first: the terminal shows 10
            problems.append(f"{where}: left out of the tables and plots (it lacks what they read)")
        problems += sr.check_record(r, where)
    for line, b in kept["bench.jsonl"]:
        problems += sr.check_bench_row(b, f"bench.jsonl line {line}")
    runs = [r for _, r in kept["runs.jsonl"]]
    bench = [b for _, b in kept["bench.jsonl"]]
    old = collections.Counter((b.get("bench_id"), b.get("bench_args"))
                              for b in sr.superseded_bench_rows(bench))
    problems += [f"bench.jsonl: {n} rows of {pass_id} with args {args!r} left out: a later pass "
                 "of it, of other args, measured those sizes" for (pass_id, args), n in old.items()]
    metrics = {}
    for r in runs:
        if r.get("status") == "ok" and r.get("metrics_file"):
            path = os.path.join(results, r["metrics_file"])
            metrics[r["run_id"]], bad_m = sr.read_jsonl(path)
            problems += bad_m
    return runs, bench, metrics, problems


def not_ok(runs):
    """Runs that did not succeed, except those that failed as an injected fault meant them to."""
    return [r for r in runs if r.get("status") != "ok" and not sr.expected_failure(r)]


def failed_passes(bench):
    """Bench passes that did not succeed: the sweep records one line each, no rows (the busbw
    plot then lacked their series without a word, and no list named them)."""
    return [b for b in bench if "size" not in b and b.get("status") in ("failed", "timeout")]


def pass_words(b):
    return (f"bench pass {b.get('bench_id', '?')} (np {b.get('np', '?')}): {b.get('status')} "
            f"(exit {b.get('exit_code')})")


def has_log(r):
    """A skipped run was never launched and has no log (its record still names the file a run
    would have written)."""
    return r.get("status") != "skipped"


def not_ok_where(r):
    """Where to look for why a run did not succeed: its log, or why it was skipped."""
    return f"log {r.get('log_file')}" if has_log(r) else (r.get("reason") or "skipped")


def safe_note(note, records):
    """note(records), or a word that it could not be made: as a plot, a malformed record must
    not cost the rest of the report."""
    try:
        return note(records)
    except (KeyError, IndexError, TypeError, ValueError, ZeroDivisionError) as err:
        return f" (What did not succeed could not be told: {err!r}.)"


def not_drawn_note(runs):
    """The scaling plots' sentence on the configurations that were run but did not succeed:
    the plots draw successful runs only, so a backend's line ended at W=4 with no word that W=8
    failed, and a backend whose W=2 run failed read 'no backend was run at more than one worker
    count'. A configuration with a successful run too (another round, the sweep made again into
    the folder) is drawn: it is named apart, with how many of its runs did not succeed."""
    groups = {}
    for r in rp.scaling_runs(runs):
        if isinstance(r.get("workers"), int):
            groups.setdefault(sr.config_key(r), []).append(r)
    lost, partial = [], []
    for group in groups.values():
        bad = not_ok(group)
        if not bad:
            continue
        name = f"{sr.backend_label(bad[0])} W={bad[0]['workers']}"
        if any(r.get("status") == "ok" for r in group):
            partial.append(f"{name} ({len(bad)} of {len(group)} runs {status_words(bad)})")
        else:
            lost.append(f"{name} ({', '.join(dict.fromkeys(str(r.get('status')) for r in bad))})")
    return drawn_words(lost, partial, "runs")


def passes_note(bench):
    """The busbw plot's sentence on the bench passes that did not succeed (their series were
    missing without a word); a pass that failed in one round and gave rows in another is drawn,
    and named apart with how many of its passes failed."""
    failed = failed_passes(bench)  # `bench` as recorded: every round's rows, not their medians
    lost, partial = [], []
    for key in dict.fromkeys(sr.pass_key(b) for b in failed):
        mine = [b for b in failed if sr.pass_key(b) == key]
        # a pass's rows and its record of failure share its round and date
        made = {(b.get("repeat"), b.get("date")) for b in bench if sr.pass_key(b) == key}
        if any("size" in b and sr.pass_key(b) == key for b in bench):
            partial.append(f"bench pass {key[1]} (np {mine[0].get('np', '?')}: {len(mine)} of "
                           f"{len(made)} passes {status_words(mine)})")
        else:
            lost += [pass_words(b) for b in mine]
    return drawn_words(lost, partial, "passes")


def status_words(bad):
    """'failed', 'failed or timed out'...: how the runs or passes `bad` ended."""
    words = {"timeout": "timed out"}
    return " or ".join(dict.fromkeys(words.get(b.get("status"), str(b.get("status")))
                                     for b in bad))


def drawn_words(lost, partial, what):
    """' Not drawn, as they did not succeed: LOST. Drawn from the WHAT that succeeded: PARTIAL
    (see Runs that did not succeed).', either part alone, or '' with neither."""
    parts = ([f"Not drawn, as they did not succeed: {', '.join(lost)}"] if lost else []) + (
        [f"Drawn from the {what} that succeeded: {', '.join(partial)}"] if partial else [])
    return " " + ". ".join(parts) + " (see Runs that did not succeed)." if parts else ""
