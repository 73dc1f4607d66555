"""The faults part of StarRing's report: for runs with an injected fault (`--fault`, the
`faults` sweep), how long each backend's job took from the fault to its end, and whether its
error named the rank at fault. Same conventions as report_plots.py (Figure or Skipped, Agg)."""
import matplotlib.pyplot as plt
import matplotlib.ticker as mticker

import starring_results as sr
from report_plots import Figure, Skipped, _save, label_axes, markdown_section, oversub_note

FLOOR_S = 0.1  # the y axis starts here (log); a job that ended sooner is drawn at it
# Grays, not blue and red: those are ring's and ps-bsp's colors in every other figure, and the
# x axis already names the backend.
KIND_COLOR = {"kill": "#404040", "hang": "#A0A0A0"}


def fault_runs(runs):
    return [r for r in runs if r.get("fault")]


def _target(r):
    """Which role the fault hit: a worker or (dedicated PS) a server rank."""
    rank = r["fault"].get("rank")
    servers = r.get("num_servers", 0) or 0
    if rank is not None and servers and rank >= r["np"] - servers:
        return "server"
    return "worker"


def rows(runs):
    """One row per faulted run: backend, W, fault, target, ended after (s), exit, outcome,
    names rank, first error line."""
    out = []
    for r in fault_runs(runs):
        f = r["fault"]
        ended = f"{f['detect_s']:.1f}" if f.get("detect_s") is not None else "-"
        err = next((e for e in f.get("errors", []) if e.startswith("starring: error:")),
                   (f.get("errors") or [""])[0])
        out.append([sr.backend_label(r), str(r["workers"]), f["spec"], _target(r), ended,
                    str(r.get("exit_code")), f.get("outcome", "?"),
                    "yes" if f.get("names_rank") else "no", err[:160]])
    return out


HEADER = ["backend", "W", "fault", "hits", "ended after (s)", "exit", "outcome", "names rank",
          "error"]


def summary_lines(runs):
    table = rows(runs)
    if not table:
        return []
    return markdown_section(
        "Faults", "Each run had a rank killed (SIGKILL) or silenced at a given step; 'ended "
        "after' is the time from the fault (the rank's own wall clock) to the job's exit.",
        HEADER, table)


MARK = {"detected": "named", "hung": "HUNG", "missed": "MISSED",
        "detected, rank not named": "unnamed"}


def _outcomes(match):
    """A bar's label: how the error read ('named', 'HUNG'...) and the exit code; for runs made
    several times, each outcome with its count ('named 2/3, HUNG 1/3') and every exit code."""
    marks = [MARK.get(r["fault"]["outcome"], r["fault"]["outcome"]) for r in match]
    codes = sorted({str(r.get("exit_code")) for r in match}, key=lambda c: (len(c), c))
    if len(match) == 1:
        return f"{marks[0]}\nexit {codes[0]}"
    counts = ", ".join(f"{m} {marks.count(m)}/{len(marks)}" for m in dict.fromkeys(marks))
    return f"{counts}\nexit {', '.join(codes)}"


def _timeout_of(runs):
    vals = {float(r.get("config", {}).get("timeout", 60)) for r in runs}
    return vals.pop() if len(vals) == 1 else None


def faults(runs, out_dir):
    """Seconds from the fault to the job's end, per backend and fault kind."""
    fr = [r for r in fault_runs(runs) if r["fault"].get("injected")]
    if not fr:
        return Skipped("Faults", "no run with an injected fault (scripts/sweep.sh faults)")
    groups = sorted({(sr.backend_label(r), r["workers"]) for r in fr})
    kinds = sorted({r["fault"]["kind"] for r in fr})
    width = 0.8 / len(kinds)
    fig, ax = plt.subplots(figsize=(max(7.0, 1.3 * len(groups) + 3) + 2.6, 4.6))  # + legend
    top = 0.0
    labelled = set()
    repeated = False
    for k, kind in enumerate(kinds):
        for g, group in enumerate(groups):
            match = [r for r in fr if (sr.backend_label(r), r["workers"]) == group
                     and r["fault"]["kind"] == kind]
            if not match:
                continue
            # Made several times (--repeat, the sweep again into this folder): one bar at the
            # median, a whisker to the fastest and slowest, every run's outcome counted. The
            # first run alone was drawn: a later round's hang was left out without a word.
            ys = sorted(max(r["fault"]["detect_s"] or 0.0, FLOOR_S) for r in match)
            y = ys[(len(ys) - 1) // 2]  # log axis: no bar reaches 0
            x = g - 0.4 + width * (k + 0.5)
            hung = any(r["fault"]["outcome"] == "hung" for r in match)
            top = max(top, ys[-1])
            repeated |= len(match) > 1
            ax.bar(x, y, width, color=KIND_COLOR.get(kind, "#888"), hatch="//" if hung else None,
                   edgecolor="black" if hung else None,
                   label=kind if kind not in labelled else None)  # once per kind, wherever it is
            if len(match) > 1:
                ax.errorbar([x], [y], yerr=[[y - ys[0]], [ys[-1] - y]], fmt="none",
                            ecolor="black", capsize=3, linewidth=1)
            labelled.add(kind)
            ax.annotate(_outcomes(match), (x, ys[-1]), ha="center", va="bottom", fontsize=7)
    timeout = _timeout_of(fr)
    if timeout:
        # In the legend: a label on the line ran into the bars' own labels.
        ax.axhline(timeout, color="#555", ls="--", lw=1, label=f"--timeout {timeout:g} s")
        top = max(top, timeout)
    # '*' under a time-shared run's bars, as in the breakdown and straggler plots (the sweep's
    # 4-worker runs, 4 and 5 ranks on 2 cores, were marked in the caption only)
    shared = {(sr.backend_label(r), r["workers"]) for r in fr if r.get("oversubscribed")}
    ax.set_xticks(range(len(groups)))
    ax.set_xticklabels([f"{b}\nW={w}" + ("*" if (b, w) in shared else "") for b, w in groups],
                       fontsize=8)
    if shared:
        ax.plot([], [], " ", label="W=N*: more ranks than cores (time-shared)")
    # Log: a job that hung to the sweep's bound (minutes) beside kills noticed in a second.
    ax.set_yscale("log")
    ax.set_ylim(FLOOR_S, 3 * top + 1)
    ax.yaxis.set_major_formatter(mticker.FuncFormatter(lambda v, _: f"{v:g}"))
    # Beside the axes: inside, the legend covered the last group's hang bar and its label.
    ax.legend(title="fault", fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    label_axes(ax, "backend, workers (which rank and step: the faults table)",
               "seconds from the fault to the job's end (log)", "Time to notice a dead or silent rank")
    name = _save(fig, out_dir, "faults.png")
    targets = sorted({_target(r) for r in fr})
    return Figure(name, "Faults: time from a dead or silent rank to the job's end",
                  "Each bar is one run in which a rank was killed (SIGKILL: mpirun sees the "
                  "process die) or went silent (alive, sending nothing: only the other ranks' "
                  "timeouts can tell) at a fixed step; the bar is the time from that moment, on "
                  "the rank's own clock, to the job's exit. The label says whether the error "
                  "named the rank at fault and the exit code; hatched bars hung until the "
                  f"sweep's time bound. Faults hit {' and '.join(targets)} ranks (see the table). "
                  "The time axis is logarithmic; a job that ended within 0.1 s is drawn at 0.1 s. "
                  "The dashed line is the wait bound every rank was given (--timeout): a silent "
                  "rank cannot be told from a slow one sooner."
                  + (" Runs of one backend and fault made several times (--repeat, or the sweep "
                     "again into this folder) are one bar at their median time, the whisker "
                     "spanning the fastest and the slowest, the label counting each outcome; "
                     "hatched when any of them hung." if repeated else "") + oversub_note(fr)
                  + (" Those runs are marked * (a dedicated-PS run has W + S ranks)."
                     if oversub_note(fr) else ""))
