"""Runs of a `recovery = yes` sweep (scripts/sweep.py, experiments/sweeps/recovery.ini): what one
fault costs in lost time when the job is restarted from its last checkpoint, and what
checkpoints cost when nothing fails. Standard library only.

Under `recovery = yes` in [sweep]:
  - a run with `checkpoint-every` or a `fault` gets `--checkpoint-dir OUT/runs/<id>/ckpt`; a run
    with neither is the baseline of its configuration (no checkpoint at all), which must run
    before the others (`-` first in the grid's `fault` and `checkpoint-every` lists);
  - a run whose fault ended the job (the first leg failed after the fault was injected) is
    launched again in the same folder: the same command without `--fault`, plus `--resume auto`
    (the second leg). It resumes from the newest checkpoint, or starts afresh where the first
    leg wrote none. The fault is left out because it is one event of the job that had it: the
    injected one would fire again at the same step, and a real fault does not come back with the
    restart;
  - every run gets a `recovery` object: its role (baseline, checkpoints, fault), its legs
    (command, exit code, seconds, log), `total_s` (the legs' wall time, launch to exit, the
    restart included), `startup_s` (the last leg's job start to its first step), checkpoints
    over all legs (worker 0's metrics events), and for a faulted run the fault's outcome, the
    steps lost (fault step - the step it resumed from) and `detect_s` (fault to the first leg's
    exit). Every run but the baseline is compared with the baseline run recorded before it (same
    workers, repeat and flags, but no fault and no checkpoint-every): `extra_s` (time
    lost to the fault, or the checkpoints' overhead) and whether the final accuracy and test
    loss equal the baseline's (`same_result`, for synchronous training; null under asp/ssp).
"""
import json
import os
import time

import starring_results as sr
from sweep_jobs import launch, tail

# Flags the driver gives the runs of a recovery sweep itself.
RECOVERY_FLAGS = {"checkpoint-dir", "resume"}
# Flags that make a run other than its baseline: left out when matching them.
VARIED = {"fault", "checkpoint-every", "keep-checkpoints"}
# Synchronous training gives the same bits after a resume (tests/trainer/test_checkpoint_resume):
# accuracy and test loss must agree to the cross-backend equivalence tolerance (test_equivalence).
TOLERANCE = 1e-6


def enabled(sweep):
    return str(sweep.get("recovery", "no")).lower() in ("yes", "true", "on", "1")


def check_runs(runs):
    """One line per flag that a recovery sweep's file must not set (the driver gives it)."""
    problems = []
    for r in runs:
        for key in sorted(RECOVERY_FLAGS.intersection(r["flags"])):
            line = (f"sweep: variant {r['variant']}: '{key}' is set by the sweep driver in a "
                    "recovery sweep (OUT/runs/<id>/ckpt; the second leg adds --resume auto)")
            if line not in problems:
                problems.append(line)
    return problems


def role_of(flags):
    if flags.get("fault"):
        return "fault"
    return "checkpoints" if "checkpoint-every" in flags else "baseline"


def checkpoint_args(flags, rdir):
    """--checkpoint-dir for a run with checkpoints or a fault (none for the baseline)."""
    if role_of(flags) == "baseline":
        return []
    return ["--checkpoint-dir", os.path.join(rdir, "ckpt")]


def dry_run_note(flags):
    """What --dry-run adds to a run's line in a recovery sweep."""
    if role_of(flags) == "baseline":
        return "  [baseline]"
    note = "  [+ --checkpoint-dir OUT/runs/<id>/ckpt"
    return note + ("; then without --fault, plus --resume auto]" if flags.get("fault") else "]")


def second_leg_argv(argv):
    """The first leg's command without --fault, plus --resume auto."""
    out, skip = [], False
    for a in argv:
        if skip:
            skip = False
        elif a == "--fault":
            skip = True
        elif not a.startswith("--fault="):
            out.append(a)
    return out + ["--resume", "auto"]


def _leg(rc, status, elapsed, cmd, start_unix, log_path, out_dir):
    return {"exit_code": rc, "status": status, "elapsed_s": round(elapsed, 3),
            "start_unix": round(start_unix, 3), "command": cmd,
            "log_file": os.path.relpath(log_path, out_dir)}


def run_legs(rec, run, argv, files, ctx, rdir):
    """Launches the first leg, and the second where the fault ended the job; fills rec's status,
    exit_code, elapsed_s (both legs), command and log_file (the last leg's) and its `recovery`
    object. Returns the status of the last leg."""
    np_ = rec["np"]
    start = time.time()
    rc, status, elapsed, cmd = launch(np_, argv, files["log_file"], ctx)
    legs = [_leg(rc, status, elapsed, cmd, start, files["log_file"], ctx["out"])]
    rv = {"role": role_of(run["flags"]), "legs": legs,
          "checkpoint_every": _int(run["flags"].get("checkpoint-every"))}
    if run["flags"].get("fault"):
        fault = sr.fault_outcome(run["flags"]["fault"], tail(files["log_file"], 200),
                                 time.time(), status, rc)
        rv.update(fault=fault, fault_step=fault["step"], detect_s=fault["detect_s"])
        if status == "failed" and fault["injected"]:
            log2 = os.path.join(rdir, "log.resume.txt")
            start = time.time()
            rc, status, elapsed2, cmd = launch(np_, second_leg_argv(argv), log2, ctx)
            legs.append(_leg(rc, status, elapsed2, cmd, start, log2, ctx["out"]))
            files["log_file"] = log2
            rec["log_file"] = os.path.relpath(log2, ctx["out"])
        elif status == "ok":
            rec["reason"] = f"the fault {fault['spec']} did not end the job ({fault['outcome']})"
            status = "failed"
    rv["total_s"] = round(sum(leg["elapsed_s"] for leg in legs), 3)
    rec.update(status=status, exit_code=rc, elapsed_s=rv["total_s"], command=cmd, recovery=rv)
    return status


def _int(value):
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def _checkpoint_events(path):
    """Worker 0's checkpoint events in a metrics file: (count, seconds)."""
    records, _ = sr.read_jsonl(path)
    ck = [r for r in records if isinstance(r, dict) and r.get("event") == "checkpoint"]
    return len(ck), round(sum(float(r.get("save_s", 0.0)) for r in ck), 6)


def finish(rec, files, ctx):
    """After the summary is merged: start-up, steps lost, checkpoints over all legs, and the
    comparison with the baseline recorded before this run."""
    rv = rec["recovery"]
    if rec["status"] != "ok":
        return
    if isinstance(rec.get("first_step_unix"), (int, float)) and rec["first_step_unix"] > 0:
        rv["startup_s"] = round(rec["first_step_unix"] - rv["legs"][-1]["start_unix"], 3)
    if rv["role"] == "fault":
        resumed = rec.get("resumed_at_step") if rec.get("resumed_from") else 0
        rv["resumed_at_step"] = resumed
        if rv.get("fault_step") is not None and resumed is not None:
            rv["steps_lost"] = rv["fault_step"] - resumed
    rv["checkpoints_total"], rv["checkpoint_s_total"] = _checkpoint_events(files["metrics_file"])
    base = find_baseline(rec, ctx["out"])
    if rv["role"] == "baseline" or base is None:
        return
    rv["baseline_run_id"] = base["run_id"]
    rv["baseline_s"] = base["recovery"]["total_s"]
    rv["extra_s"] = round(rv["total_s"] - rv["baseline_s"], 3)
    rv["accuracy_delta"] = rec["test_accuracy"] - base["test_accuracy"]
    rv["test_loss_delta"] = rec["test_loss"] - base["test_loss"]
    rv["same_result"] = (abs(rv["accuracy_delta"]) <= TOLERANCE and abs(rv["test_loss_delta"])
                         <= TOLERANCE * max(1.0, abs(base["test_loss"]))) if synchronous(rec) \
        else None


def synchronous(rec):
    return not (rec.get("backend") == "ps" and rec.get("consistency") in ("asp", "ssp"))


def baseline_key(rec):
    """What a run shares with its baseline: the configuration but the fault and checkpoints
    (not the variant's name: a variant that kills the PS server compares with ps-1's)."""
    flags = {k: v for k, v in rec.get("config", {}).items() if k not in VARIED}
    return (rec.get("sweep"), rec.get("workers"), rec.get("repeat", 1),
            json.dumps(flags, sort_keys=True))


def find_baseline(rec, out_dir):
    """The newest successful baseline of rec's configuration in out_dir/runs.jsonl, or None."""
    runs, _ = sr.read_jsonl(os.path.join(out_dir, "runs.jsonl"))
    want = baseline_key(rec)
    found = [r for r in runs if isinstance(r, dict) and r.get("status") == "ok"
             and r.get("recovery", {}).get("role") == "baseline" and baseline_key(r) == want]
    return found[-1] if found else None


def count_key(rec):
    """How the sweep's tally counts a recovery run."""
    rv = rec["recovery"]
    if rec["status"] != "ok":
        return rec["status"]
    if rv.get("same_result") is False:
        return "result differs"
    return "recovered" if rv["role"] == "fault" else "ok"


def describe(rec):
    rv = rec["recovery"]
    if rec["status"] != "ok":
        return (f"{rec['status'].upper()} (exit {rec['exit_code']}) see {rec['log_file']}"
                + (f": {rec['reason']}" if rec.get("reason") else ""))
    text = f"ok {rv['total_s']:.1f}s"
    if rv["role"] == "fault":
        legs = " + ".join(f"{leg['elapsed_s']:.1f}" for leg in rv["legs"])
        text += f" ({legs} s), {rv.get('steps_lost', '?')} steps lost"
    if rv.get("extra_s") is not None:
        text += f", {rv['extra_s']:+.1f} s vs baseline"
    if rv.get("same_result") is not None:
        text += ", same result" if rv["same_result"] else ", RESULT DIFFERS from the baseline"
    return text + f"  acc {rec.get('test_accuracy', float('nan')):.4f}"
