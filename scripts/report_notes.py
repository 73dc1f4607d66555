"""The notes under StarRing's summary table (scripts/report.py): what step ms counts, what a *
after samples/s and 'not measured' bytes mean, the jobs made on a busy host, and why samples/s
and step ms need not agree under ASP and SSP. report.py imports them under its own names."""
import starring_results as sr
from report_plots import host_cpus


STEP_MS_NOTE = ("In step ms, total is the training thread's step: compute + wait + other, other "
                "being the loop's own work between steps (step_time.other_s, total less compute "
                "and wait); comm is the backend's communication thread, which overlaps them, so "
                "compute + comm + wait is not the total.")


def star_note(rows, sep=" "):
    """What the * after samples/s means, when a row has one (samples/s is column 4)."""
    if not any(row[4].endswith("*") for row in rows):
        return ""
    return (f"{sep}* more ranks (workers + dedicated servers) on a host than the CPUs they may "
            "use there: they time-share them, so wall-clock figures measure the machine, not "
            "the backend.")


NOT_MEASURED = "not measured"


def opaque_note(rows, sep=" "):
    """What 'not measured' in the bytes column means, when a row has it (column 6)."""
    if not any(row[6].endswith(f"({NOT_MEASURED})") for row in rows):
        return ""
    return (f"{sep}{NOT_MEASURED}: the mpi and nccl runs report the theory as their bytes "
            "(Open MPI's and NCCL's transports are opaque to StarRing), so there is no count "
            "to compare with it.")


def load_note(runs, bench, sep=" "):
    """Jobs measured on a busy host (starring_results.host_busy: other processes' CPUs,
    `host_other_cpus` from scripts/sweep_jobs.py OtherLoad, and the job's ranks more than the
    cores): their wall-clock figures include waiting for a CPU. The one definition the wall-clock
    captions (report_plots.busy_runs_note) and the busbw plot's faded lines use too; this note
    counted from a quarter of the host's CPUs before, so one report could count a 1-rank run
    beside 0.8 of 2 other CPUs busy under the table and not in the captions, and a 4-rank pass
    beside 0.6 of 4 faded in the busbw plot and not under the table.
    Of the jobs the table and plots show: the successful runs (every repeat: the table gives
    their range) and the bench passes that gave rows; failed, timed-out and skipped ones are
    not counted."""
    jobs = {("run", r.get("run_id")): r for r in runs
            if r.get("status") == "ok" and sr.table_ready(r)}
    # one pass's rows share its bench_id, repeat and date; a repeat keeps the bench_id
    jobs.update({("bench", b["bench_id"], b.get("repeat"), b.get("date")): b for b in bench
                 if b.get("bench_id") and "size" in b})
    busy = [j for j in jobs.values() if sr.host_busy(j)]
    if not busy:
        return ""
    return (f"{sep}{len(busy)} of {len(jobs)} runs and bench passes ran on a busy host: other "
            f"processes kept {sr.span_text([j['host_other_cpus'] for j in busy])} of "
            f"{host_cpus(busy)} busy, so that the job's ranks and that load outnumbered the "
            "cores (host_other_cpus in runs.jsonl and bench.jsonl; the runs the wall-clock "
            "captions count and the passes the busbw plot fades): their wall-clock figures "
            "include waiting for a CPU, not only the backends' work; rerun them on a quiet "
            "machine.")


def async_note(runs):
    """For tables with ASP/SSP runs: their samples/s and step ms need not agree."""
    if not any(r.get("status") == "ok" and r.get("backend") == "ps"
               and r.get("consistency") in ("asp", "ssp") for r in runs):
        return ""
    return (" Under ASP and SSP the workers run at their own pace: samples/s is the whole "
            "job's (all samples over the wall time, which ends with the slowest worker) while "
            "step ms is the mean over workers, so with a slow worker workers x batch / step ms "
            "overstates samples/s (a persistent straggler under ASP: up to W times).")
