"""--resume's bookkeeping for the sweep driver (scripts/sweep.py): what makes a run or a bench
pass the same one again (run_key, bench_key), which of them a results folder already holds and
how each ended (recorded_jobs, count_key), skipping those (skip_recorded) and marking them in a
dry run's plan (resume_note). scripts/sweep.py re-exports these names."""
import json
import os
import re

import starring_results as sr
import sweep_recovery as recovery

RECORDED = "recorded before (--resume)"
RECORDED_BAD = "recorded before, did not succeed (--resume)"
# the tally's keys (count_key) of jobs that went as they should: any other fails the sweep
SUCCEEDED = ("ok", "skipped", "bench ok", "fault detected", "recovered")


def count_key(rec):
    """How the sweep's tally counts a run's record: its status, a faulted run's outcome, a
    recovery run's (sweep_recovery.count_key)."""
    if rec.get("recovery"):
        return recovery.count_key(rec)
    return "fault " + rec["fault"]["outcome"] if rec.get("fault") else rec["status"]


def run_key(sweep, variant, workers, config, point, rep):
    """What makes a run the same one again for --resume: sweep, variant, workers, flags, grid
    point and round."""
    return json.dumps([sweep, variant, workers, config, point, rep], sort_keys=True)


def bench_key(bench_id, rep, args, quick):
    """What makes a bench pass the same one again for --resume: its id (sweep, bench, np), round,
    args and --quick (the id alone took a --quick pass's rows for the full sweep's, of other
    message sizes). The id without its "-rN" (written only with --repeat 2 or more; the round is
    `rep`), as run_key has no id: a sweep resumed with another --repeat made round 1's pass again
    but not its runs."""
    return json.dumps(["bench", re.sub(r"-r\d+$", "", str(bench_id)), rep, args, bool(quick)])


def recorded_jobs(out):
    """The runs (run_key) and bench passes (bench_key) OUT's records hold, for --resume, each
    with its tally key (count_key; a bench pass's "bench ok", "bench failed"...; a job's last
    record where it was made more than once): the exit code counts one that did not succeed.
    A failed or timed-out run is a result (run it again without --resume), a skipped one is not
    (it was never launched: `requires = gpu` on a host without GPUs, then resumed with --gpus or
    on a GPU node, runs). A line that does not parse (cut by a kill) is no record, nor is a bench
    row without bench_args (written before the rows said their args: made again)."""
    runs, _ = sr.read_jsonl(os.path.join(out, "runs.jsonl"))
    bench, _ = sr.read_jsonl(os.path.join(out, "bench.jsonl"))
    keys = {}
    for r in runs:
        if isinstance(r, dict) and r.get("status") != "skipped":
            try:
                outcome = count_key(r)
            except (KeyError, TypeError, AttributeError):  # a hand-edited record
                outcome = str(r.get("status"))
            keys[run_key(r.get("sweep"), r.get("variant"), r.get("workers"), r.get("config"),
                         r.get("grid_point"), r.get("repeat", 1))] = outcome
    for b in bench:
        if isinstance(b, dict) and "bench_args" in b:
            keys[bench_key(b.get("bench_id"), b.get("repeat", 1), b["bench_args"],
                           b.get("quick"))] = "bench " + ("ok" if "size" in b else
                                                          str(b.get("status")))
    return keys


def skip_recorded(key, done, counts):
    """With --resume, a job `done` holds is not made again: counted (one that did not succeed
    apart) and said. True when skipped."""
    if key not in done:
        return False
    ok = done[key] in SUCCEEDED
    tally = RECORDED if ok else RECORDED_BAD
    counts[tally] = counts.get(tally, 0) + 1
    print("recorded before" + ("" if ok else f" ({done[key]})") + ": skipped (--resume)",
          flush=True)
    return True


def resume_note(keys, ctx):
    """'  [recorded: --resume skips it]' on a dry run's line of a job (or jobs: each round, each
    np of a bench) that --resume would skip, naming which and how the ones that did not succeed
    ended; '' without --resume or when none is recorded."""
    done = ctx.get("recorded", {})
    got = [(what, done[k]) for what, k in keys if k in done]
    if not got:
        return ""
    if ctx["repeats"] == 1:  # no rounds to name
        got = [(what.replace("round 1", "").strip(), o) for what, o in got]
    which = f" {', '.join(what for what, _ in got)}" if len(keys) > 1 else ""
    bad = sorted({o for _, o in got if o not in SUCCEEDED})
    return (f"  [recorded{which}" + (f" ({', '.join(bad)})" if bad else "")
            + f": --resume skips {'it' if len(got) == 1 else 'them'}]")
