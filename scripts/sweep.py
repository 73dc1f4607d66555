"""The sweep driver behind scripts/sweep.sh (run that; see its header for usage).

A sweep file (experiments/sweeps/<name>.ini) lists what to run:

  [sweep]            description, timeout_s (per run; default 600), trace (yes/no; default
                     no), report (yes/no; default yes), repeats (how many times every run and
                     bench pass is made; default 1), recovery (yes/no, default no: checkpoint
                     folders per run, and a faulted run resumed with --resume auto in a second
                     leg; see scripts/sweep_recovery.py)
  [train]            flags given to every `starring train` run: `key = value` -> `--key value`
                     (`key =` with no value: `--key` alone)
  [grid]             lists (space separated); every combination is one run of every variant.
                     `workers` is the number of worker ranks; other keys are train flags.
  [variant NAME]     one backend configuration = one line in the plots. Its keys are train flags;
                     a key that is also a grid dimension replaces that dimension's list for this
                     variant. `servers = half` means max(1, workers/2); `requires = gpu` skips
                     the variant where the host has fewer GPUs than the run has ranks (NCCL),
                     `requires = shared-gpu` where it has none (ranks share a GPU for compute
                     and sync through host backends); skips are recorded, with the reason.
  [bench NAME]       one `starring bench --json` pass per value of `np` (default 2), with `args`.
  [quick]            --quick overrides for keys of [sweep], [train] and [grid] (new keys become
                     train flags, but `workers`, a grid key); `variants = a b` /
                     `benches = a b|none` keep only those.
  [quick variant NAME], [quick bench NAME]
                     --quick overrides for keys of that [variant NAME] or [bench NAME].

Any other section, or another key in [sweep] and [bench NAME], stops the sweep (exit 2).
A value `-` leaves the flag out (e.g. `straggler = - 1:200` runs without and with a straggler).
Launch: `scripts/mpirun.sh -np N build/bin/starring train ...` under `timeout` (--launcher
changes the first part, e.g. 'srun -n {np} --mpi=pmix' under Slurm); ranks are
W workers plus S dedicated servers for `backend = ps` with a numeric `servers`.
With repeats = N (or --repeat N) the whole list runs N times in rounds (every configuration
once, then again), so that drift in a shared machine's load spreads over all of them; each
record carries `repeat` (1..N) and `repeats`, and the report shows the median run of each
configuration with the spread of the others.
Every run appends one record to OUT/runs.jsonl (status ok / failed / timeout / skipped, with the
train summary merged in when there is one); bench rows go to OUT/bench.jsonl. A run with
`fault = KIND:RANK:STEP` (kill or hang; a stop request is refused) is expected to fail: its record
gets a `fault` object (time from the fault to the job's end, the error lines, whether they name the
rank; see starring_results.fault_outcome), and it counts as a success when the job failed naming
the rank.
"""
import argparse
import datetime
import json
import os
import shlex
import signal
import socket
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import starring_results as sr  # noqa: E402
from sweep_jobs import (DRIVER_FLAGS, OtherLoad, bench_id_of, check_launcher,  # noqa: E402,F401
                        cores, end_deferral, git_commit, gpu_count, help_flags, launch,
                        other_load_words, repeat_suffix, run_bench, run_report,
                        stopped_job_words, tail, timeout_reason, timeout_words, unknown_flags,
                        usage_error, utc_now)
import sweep_recovery as recovery  # noqa: E402
from sweep_file import YES, expand_runs, load_sweep, roles_of  # noqa: E402
from sweep_resume import (RECORDED, RECORDED_BAD, SUCCEEDED, bench_key,  # noqa: E402,F401
                          count_key, recorded_jobs, resume_note, run_key, skip_recorded)

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LAUNCHER = os.path.join(REPO, "scripts", "mpirun.sh") + " -np {np}"


# ---- running ----------------------------------------------------------------------------------

def flag_args(flags):
    args = []
    for k, v in flags.items():
        args += [f"--{k}"] + ([v] if v != "" else [])
    return args


def gpu_skip_reason(run, np_, ctx):
    """Why a `requires = gpu|shared-gpu` run is skipped with ctx's GPUs (None: it runs)."""
    if run["requires"] == "shared-gpu" and ctx["gpus"] == 0:
        return "variant requires a GPU and none was found"
    if run["requires"] == "gpu" and ctx["gpus"] < np_:
        # NCCL takes one GPU per rank: a run with more ranks than GPUs would only show the
        # ConfigError (tested in tests/gpu), not a measurement.
        return ("variant requires a GPU and none was found" if ctx["gpus"] == 0 else
                f"variant requires one GPU per rank: {np_} ranks, "
                f"{ctx['gpus']} GPU(s) {ctx['gpus_where']}")
    return None


def run_train(run, idx, ctx, rep=1):
    run_id = sr.claim_unique_name(os.path.join(ctx["out"], "runs"),
                                  f"{ctx['name']}-{idx:03d}-{run['variant']}-w{run['workers']}"
                                  + repeat_suffix(ctx, rep))
    rdir = os.path.join(ctx["out"], "runs", run_id)
    ctx["job_files"] = rdir  # until the record is written (interrupted() names what it kept)
    np_, nserv, roles = roles_of(run["flags"], run["workers"])
    files = {"summary_file": os.path.join(rdir, "summary.json"),
             "metrics_file": os.path.join(rdir, "metrics.jsonl"),
             "log_file": os.path.join(rdir, "log.txt")}
    rec = {"record_schema": sr.RECORD_SCHEMA, "sweep": ctx["name"], "run_id": run_id,
           "variant": run["variant"], "config": run["flags"], "grid_point": run["point"],
           "np": np_, "workers": run["workers"], "num_servers": nserv, "roles": roles,
           "git": ctx["git"], "host": ctx["host"], "date": utc_now(), "cores": ctx["cores"],
           "oversubscribed": np_ > ctx["cores"], "quick": ctx["quick"],
           "repeat": rep, "repeats": ctx["repeats"]}
    rec.update({k: os.path.relpath(v, ctx["out"]) for k, v in files.items()})
    skip = gpu_skip_reason(run, np_, ctx)
    if skip:
        rec.update(status="skipped", exit_code=0, elapsed_s=0.0, command="", reason=skip)
        return rec
    argv = [ctx["bin"], "train"] + flag_args(run["flags"]) + [
        "--summary-file", files["summary_file"], "--metrics-file", files["metrics_file"],
        "--run-name", run_id]
    if ctx["trace"]:
        argv += ["--trace", os.path.join(rdir, "trace.%r.json")]
        rec["trace_files"] = [os.path.relpath(os.path.join(rdir, f"trace.{r}.json"), ctx["out"])
                              for r in range(np_)]
    load = OtherLoad()
    if ctx.get("recovery"):  # checkpoint folders, a faulted run resumed (sweep_recovery.py)
        argv += recovery.checkpoint_args(run["flags"], rdir)
        status = recovery.run_legs(rec, run, argv, files, ctx, rdir)
    else:
        rc, status, elapsed, cmd = launch(np_, argv, files["log_file"], ctx)
        rec.update(status=status, exit_code=rc, elapsed_s=round(elapsed, 3), command=cmd)
    rec["host_other_cpus"] = load.cpus()  # CPUs other processes kept busy meanwhile
    if run["flags"].get("fault") and not ctx.get("recovery"):  # how the job ended is the result
        rec["fault"] = sr.fault_outcome(run["flags"]["fault"], tail(files["log_file"], 200),
                                        time.time(), status, rc)
    if ctx["trace"]:  # one file with every rank, to open in Perfetto
        merged = os.path.join(rdir, "trace.json")
        if sr.merge_traces([os.path.join(ctx["out"], t) for t in rec["trace_files"]], merged):
            rec["trace_merged"] = os.path.relpath(merged, ctx["out"])
    summary = None
    if status == "ok":
        try:
            with open(files["summary_file"], encoding="utf-8") as f:
                summary = json.load(f)
        except (OSError, json.JSONDecodeError) as e:
            rec.update(status="failed", reason=f"exit 0 but no readable summary: {e}")
    if summary is not None:
        for k, v in summary.items():
            # the driver's own fields win; "git" too: it says whether the tree was dirty
            if k not in ("status", "exit_code", "elapsed_s", "command", "config", "variant",
                         "git"):
                rec[k] = v
    if ctx.get("recovery"):
        recovery.finish(rec, files, ctx)
    if rec["status"] == "timeout":
        rec.setdefault("reason", timeout_reason(ctx, rec["exit_code"]))
    if rec["status"] != "ok":
        rec["log_tail"] = tail(files["log_file"])
    return rec


def describe(rec):
    if rec.get("recovery"):
        return recovery.describe(rec)
    f = rec.get("fault")
    if f:
        ended = f"{f['detect_s']:.1f} s after the fault" if f["detect_s"] is not None else ""
        return f"fault {f['spec']}: {f['outcome']} {ended} (exit {rec['exit_code']})"
    if rec["status"] == "timeout":
        return timeout_words(rec["exit_code"], rec.get("reason", ""), rec["log_file"])
    if rec["status"] != "ok":
        return f"{rec['status'].upper()} (exit {rec['exit_code']}) see {rec['log_file']}" \
            if rec["status"] != "skipped" else f"skipped: {rec.get('reason', '')}"
    return (f"ok {rec['elapsed_s']:.1f}s  {rec.get('samples_per_s', 0):,.0f} samples/s  "
            f"acc {rec.get('test_accuracy', float('nan')):.4f}" + other_load_words(rec))


def known_sweeps():
    """The names of experiments/sweeps/*.ini, sorted."""
    return sorted(f[:-4] for f in os.listdir(os.path.join(REPO, "experiments", "sweeps"))
                  if f.endswith(".ini"))


def resolve_sweep(arg):
    if os.path.exists(arg):
        return os.path.abspath(arg), os.path.splitext(os.path.basename(arg))[0]
    path = os.path.join(REPO, "experiments", "sweeps", arg + ".ini")
    if not os.path.exists(path):
        usage_error(f"sweep: no sweep file '{arg}' (known: {', '.join(known_sweeps())})")
    return path, arg


def default_out(name, quick):
    """results/<name>[-quick]; a previous folder there is kept, renamed with its time stamp."""
    out = os.path.join(REPO, "results", name + ("-quick" if quick else ""))
    if os.path.exists(out):
        stamp = datetime.datetime.fromtimestamp(os.path.getmtime(out), datetime.timezone.utc)
        # -2, -3...: two folders of one second (a sweep of skipped runs takes less) made the
        # rename an OSError traceback, "Directory not empty"
        old = os.path.join(os.path.dirname(out), sr.unique_name(
            os.path.dirname(out), f"{os.path.basename(out)}.{stamp:%Y%m%d-%H%M%S}"))
        os.rename(out, old)
        print(f"[sweep] previous results moved to {old}", flush=True)
    return out


def parse_args(argv):
    """The command line, its values checked (--launcher too, unless --dry-run)."""
    ap = argparse.ArgumentParser(prog="scripts/sweep.sh",
                                 description="Run a sweep of `starring train` configurations "
                                 "and `starring bench` passes; append JSON records to a folder.")
    ap.add_argument("sweep", help="a sweep file, or the name of one in experiments/sweeps/: "
                    f"{', '.join(known_sweeps())} (docs/REFERENCE.md says what each runs)")
    ap.add_argument("--out", help="results folder; records are appended to what it holds "
                    "(default: a fresh results/<name>, or results/<name>-quick with --quick; a "
                    "previous one is renamed <folder>.<time>)")
    ap.add_argument("--quick", action="store_true", help="apply the sweep's [quick] overrides")
    ap.add_argument("--bin", default=os.path.join(REPO, "build", "bin", "starring"),
                    help="the starring executable (default: build/bin/starring)")
    ap.add_argument("--timeout", type=float, help="per-run time bound in seconds "
                    "(default: the sweep's timeout_s)")
    ap.add_argument("--launcher", default=LAUNCHER,
                    help="how to start N ranks, with {np} for N (default: scripts/mpirun.sh -np "
                    "{np}; under Slurm e.g. 'srun -n {np} --mpi=pmix')")
    ap.add_argument("--repeat", type=int, metavar="N",
                    help="make every run and bench pass N times, in rounds (default: the sweep's "
                    "repeats, 1); the report shows each configuration's median run and the spread")
    ap.add_argument("--gpus", type=int, metavar="N",
                    help="GPUs the runs may use in all, for `requires = gpu|shared-gpu` "
                    "(default: this host's, from nvidia-smi -L and CUDA_VISIBLE_DEVICES); give "
                    "the allocation's total when --launcher spreads ranks over several nodes or "
                    "the sweep runs on a login node without GPUs")
    ap.add_argument("--resume", action="store_true",
                    help="skip the runs and bench passes the results folder already has a record "
                    "of (this sweep, the same flags, the same round; a bench pass: the same "
                    "args and --quick): finishes an interrupted sweep (with --out DIR, or the "
                    "default folder, which is then kept)")
    ap.add_argument("--no-bench", action="store_true", help="skip the bench passes")
    ap.add_argument("--no-report", action="store_true", help="do not run scripts/report.py")
    ap.add_argument("--dry-run", action="store_true", help="print the runs, launch nothing")
    a = ap.parse_args(argv)
    if a.gpus is not None and a.gpus < 0:
        usage_error(f"sweep: --gpus {a.gpus}: expected a count >= 0")
    if a.timeout is not None and not (1 <= a.timeout < float("inf")):  # `timeout 0`: no bound
        usage_error(f"sweep: --timeout {a.timeout:g}: expected seconds >= 1")
    check_launcher(a.launcher, not a.dry_run)
    return a


def make_context(a, sweep, name):
    """What every run and bench pass needs: the options, the sweep's settings, this host."""
    out = os.path.abspath(a.out) if a.out else os.path.join(
        REPO, "results", name + ("-quick" if a.quick else ""))
    given = a.repeat if a.repeat is not None else sweep["repeats"]
    try:
        repeats = int(given)
    except ValueError:
        repeats = 0
    if repeats < 1:
        usage_error(f"sweep: repeats must be a whole number >= 1, got {given!r}")
    return {"name": name, "out": out, "bin": os.path.abspath(a.bin), "quick": a.quick,
            "repeats": repeats,
            "launcher": a.launcher,
            "timeout_s": a.timeout or float(sweep["timeout_s"]), "git": git_commit(),
            "host": socket.gethostname(), "cores": cores(),
            "gpus": gpu_count() if a.gpus is None else a.gpus,
            "gpus_where": "on this host" if a.gpus is None else "in all (--gpus)",
            "trace": sweep["trace"].lower() in YES,
            "recovery": recovery.enabled(sweep)}


def print_dry_run(runs, benches, ctx):
    """The runs it would launch; then the flags against the binary's --help where it is built,
    so a typo shows in the plan (exit 2) and not only when the sweep is started."""
    try:
        print_plan(runs, benches, ctx)
    except BrokenPipeError:  # `--dry-run | head`: the reader has seen what it wanted
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    if not os.access(ctx["bin"], os.X_OK):
        print(f"[sweep] flags not checked: {ctx['bin']} is not built", flush=True)
        return 0
    check_flags(runs, benches, ctx)
    return 0


def print_plan(runs, benches, ctx):
    rounds = range(1, ctx["repeats"] + 1)
    jobs = []  # (what, key) of every job, for --resume's notes
    for r in runs:  # a run the sweep would skip here says so (the scaling plan listed nccl runs)
        np_, _, _ = roles_of(r["flags"], r["workers"])
        skip = gpu_skip_reason(r, np_, ctx)
        keys = [(f"round {rep}", run_key(ctx["name"], r["variant"], r["workers"], r["flags"],
                                         r["point"], rep)) for rep in rounds]
        jobs += keys
        print(f"  {r['variant']:>14} W={r['workers']} np={np_}: "
              f"{shlex.join(flag_args(r['flags']))}"
              + (recovery.dry_run_note(r["flags"]) if ctx["recovery"] else "")
              + (f"  [skipped here: {skip}]" if skip else "") + resume_note(keys, ctx))
    for bname, b in benches.items():
        keys = [(f"np {np_} round {rep}", bench_key(bench_id_of(bname, np_, ctx, rep), rep,
                                                    b.get("args", ""), ctx["quick"]))
                for np_ in b.get("np", "").split() for rep in rounds]
        jobs += keys
        print(f"  bench {bname}: np {b.get('np', '')}: {b.get('args', '')}"
              + resume_note(keys, ctx))
    if "recorded" in ctx:
        done = [ctx["recorded"][k] for _, k in jobs if k in ctx["recorded"]]
        bad = sum(1 for o in done if o not in SUCCEEDED)
        print(f"[sweep] --resume: {len(done)} of the {len(jobs)} runs and bench passes are "
              f"recorded in {ctx['out']} and would be skipped"
              + (f" ({bad} of them did not succeed: the exit code counts them)" if bad else ""))


def check_before_running(runs, benches, ctx):
    """The binary and every flag of the sweep, before the first run (exit 2 naming each)."""
    if not os.access(ctx["bin"], os.X_OK):
        usage_error(f"sweep: {ctx['bin']} is not an executable: build it first "
                 "(scripts/build.sh --target starring)")
    check_flags(runs, benches, ctx)


def check_flags(runs, benches, ctx):
    """Every flag of the sweep against the binary's --help (exit 2 naming each unknown one)."""
    problems = unknown_flags(ctx["bin"], runs, benches)
    if ctx.get("recovery"):
        problems += recovery.check_runs(runs)
    if problems:
        usage_error("\n".join(problems))


def interrupted(counts, out, ctx):
    """Ctrl-C during the runs: say what is recorded and what the stopped job (if any) left, then
    end by SIGINT. A run that had ended when Ctrl-C came is recorded first (defer_ctrl_c)."""
    done = sum(counts.values())
    job = ctx.pop("job_files", None)
    what = stopped_job_words(job, out) if job else "no job was running"
    sig = ctx.get("stop_signal", signal.SIGINT)
    name = "Ctrl-C" if sig == signal.SIGINT else signal.Signals(sig).name
    print(f"\n[sweep] interrupted ({name}): {what}; {done} run(s) and bench pass(es) are "
          f"recorded in {out} (`scripts/report.py {out}` draws them; the same command with "
          f"`--out {out} --resume` makes the rest)",
          file=sys.stderr, flush=True)
    # End by the signal itself, not exit 130: a calling shell script (scripts/quickstart.sh)
    # stops only when its child died of the signal, else it goes on to its next command.
    signal.signal(sig, signal.SIG_DFL)
    os.kill(os.getpid(), sig)
    return 128 + sig


def stop_as_ctrl_c(ctx):
    """SIGTERM or SIGHUP (a batch system, `timeout N scripts/sweep.sh`) stops the sweep as Ctrl-C
    does: the job in progress stopped, what is recorded said. They ended the driver at once,
    without a word, and the job it ran went on to its end, orphaned. A signal the driver was
    started to ignore stays ignored (`nohup scripts/sweep.sh ...` ignores SIGHUP: a logout must
    not stop that sweep). Returns the dispositions before, for restore_signals."""
    def handler(signum, _frame):
        ctx["stop_signal"] = signum
        os.kill(os.getpid(), signal.SIGINT)  # to whichever SIGINT handler is in place now
    before = {}
    for sig in (signal.SIGTERM, signal.SIGHUP):
        before[sig] = signal.getsignal(sig)
        if before[sig] != signal.SIG_IGN:
            signal.signal(sig, handler)
    return before


def restore_signals(before):
    """Puts back what stop_as_ctrl_c replaced (an ignored SIGHUP stays ignored for the report)."""
    for sig, disposition in before.items():
        signal.signal(sig, signal.SIG_DFL if disposition is None else disposition)


def main(argv=None):
    a = parse_args(argv)
    path, name = resolve_sweep(a.sweep)
    sweep, train, grid, variants, benches = load_sweep(path, a.quick)
    runs = expand_runs(train, grid, variants)
    if a.no_bench:
        benches = {}
    ctx = make_context(a, sweep, name)
    out, repeats = ctx["out"], ctx["repeats"]
    nbench = sum(len(b["np"].split()) for b in benches.values())
    times = f" x {repeats} repeats" if repeats > 1 else ""
    print(f"[sweep] {name}{' (quick)' if a.quick else ''}: {len(runs)} train runs, {nbench} bench "
          f"passes{times}, at most {ctx['timeout_s']:.0f} s each -> {out}", flush=True)
    if sweep["description"]:
        print(f"[sweep] {sweep['description']}", flush=True)
    if a.resume:  # a dry run marks the jobs it would skip
        ctx["recorded"] = recorded_jobs(out)
    if a.dry_run:
        return print_dry_run(runs, benches, ctx)
    check_before_running(runs, benches, ctx)
    if not a.out and not a.resume:
        default_out(name, a.quick)
    try:
        os.makedirs(out, exist_ok=True)
    except OSError as e:  # before any run, not as a traceback
        sys.exit(f"sweep: cannot create the results folder {out}: {e.strerror}")
    try:  # ... and one that exists but takes no runs (a read-only mount): not after the first
        sr.check_writable_folder(os.path.join(out, "runs"))
    except OSError as e:
        sys.exit(f"sweep: cannot write in the results folder {out}: {e.strerror}"
                 f" ({e.filename or out})")
    counts = {}
    t0 = time.monotonic()
    signals_before = stop_as_ctrl_c(ctx)
    try:
        run_all(runs, benches, ctx, counts)
    except KeyboardInterrupt:
        return interrupted(counts, out, ctx)
    except OSError as e:  # a full disk, a failed launch: one line naming the file, not a trace
        print(f"\nsweep: stopped: {e.filename or out}: {e.strerror}; "
              f"{sum(counts.values())} run(s) and bench pass(es) are recorded in {out}",
              file=sys.stderr, flush=True)
        return 1
    finally:  # the report is not a job: SIGTERM ends it as before
        restore_signals(signals_before)
    print(f"[sweep] done in {time.monotonic() - t0:.0f} s: "
          f"{', '.join(f'{v} {k}' for k, v in sorted(counts.items()))}; records in {out}",
          flush=True)
    recorded_bad = counts.get(RECORDED_BAD, 0)
    if recorded_bad:  # the same sweep made without a stop would exit 1 for them
        print(f"[sweep] {recorded_bad} of {recorded_bad + counts.get(RECORDED, 0)} run(s) and "
              "bench pass(es) recorded before did not succeed (the report lists them): exit 1, "
              "as the sweep made in one go", flush=True)
    rc = 0 if all(k in SUCCEEDED + (RECORDED,) for k in counts) else 1
    if sweep["report"].lower() in YES and not a.no_report:
        rc = run_report(out, ctx) or rc
    return rc


def run_all(runs, benches, ctx, counts):
    """Every run and bench pass, `ctx["repeats"]` rounds; counts outcomes into `counts`. With
    --resume, those `ctx["recorded"]` holds are skipped."""
    out, repeats = ctx["out"], ctx["repeats"]
    done = ctx.get("recorded", {})
    for rep in range(1, repeats + 1):
        round_ = f" round {rep}/{repeats}" if repeats > 1 else ""
        for i, run in enumerate(runs, 1):
            np_, _, _ = roles_of(run["flags"], run["workers"])
            print(f"[sweep]{round_} [{i}/{len(runs)}] {run['variant']} W={run['workers']} "
                  f"np={np_} {' '.join(f'{k}={v}' for k, v in run['point'].items())} ...",
                  end=" ", flush=True)
            if skip_recorded(run_key(ctx["name"], run["variant"], run["workers"], run["flags"],
                                     run["point"], rep), done, counts):
                continue
            rec = run_train(run, i, ctx, rep)
            sr.append_jsonl(os.path.join(out, "runs.jsonl"), rec)
            ctx.pop("job_files", None)  # recorded
            key = count_key(rec)
            counts[key] = counts.get(key, 0) + 1
            print(describe(rec), flush=True)
            end_deferral(ctx)  # a Ctrl-C held while the finished run was recorded stops here
        for bname, b in benches.items():
            for np_ in b["np"].split():
                print(f"[sweep]{round_} bench {bname} np={np_} ...", end=" ", flush=True)
                if skip_recorded(bench_key(bench_id_of(bname, np_, ctx, rep), rep,
                                           b.get("args", ""), ctx["quick"]), done, counts):
                    continue
                status, _, _, words = run_bench(bname, int(np_), b.get("args", ""), ctx, rep)
                ctx.pop("job_files", None)
                counts["bench " + status] = counts.get("bench " + status, 0) + 1
                print(words, flush=True)
                end_deferral(ctx)


if __name__ == "__main__":
    sys.exit(main())
