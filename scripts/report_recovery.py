"""The recovery part of StarRing's report (`scripts/sweep.sh recovery`, scripts/sweep_recovery.py):
the time a job takes to finish when one worker is killed and the job is resumed from its last
checkpoint, against the checkpoint interval, per backend, with the run without fault or
checkpoints drawn; and what the checkpoints cost when nothing fails. Same conventions as
report_plots.py (Figure or Skipped, Agg)."""
import matplotlib.pyplot as plt

import starring_results as sr
from report_plots import (Figure, Skipped, _save, color_of, label_axes, markdown_section,
                          oversub_note)

NONE = "none"  # the x position of a faulted run without periodic checkpoints (step 0 again)
HATCHES = ("", "//", "..", "xx")  # the worker counts' bars, where the runs have several


def recovery_runs(runs):
    return [r for r in runs if r.get("status") == "ok" and isinstance(r.get("recovery"), dict)
            and isinstance(r["recovery"].get("total_s"), (int, float))]


def _interval(r):
    every = r["recovery"].get("checkpoint_every")
    return NONE if not every else every


def groups(runs):
    """{(backend label, workers, role, interval): [runs]}, the repeats of one configuration."""
    out = {}
    for r in recovery_runs(runs):
        key = (sr.backend_label(r), r["workers"], r["recovery"]["role"], _interval(r))
        out.setdefault(key, []).append(r)
    return out


def median_run(group):
    """The run with the median total time (the lower one of an even count), and every total."""
    totals = sorted(r["recovery"]["total_s"] for r in group)
    pick = sorted(group, key=lambda r: r["recovery"]["total_s"])[(len(group) - 1) // 2]
    return pick, totals


def baseline_s(g, key):
    """The median total time of the runs without fault or checkpoints of the group's backend
    and workers; for a variant without baseline runs of its own (one that kills the PS server,
    say), of the baseline runs its runs were compared with. None where there are none."""
    own = [k for k in g if k[:3] == (key[0], key[1], "baseline")]
    if own:
        return median_run(g[own[0]])[0]["recovery"]["total_s"]
    ids = {r["recovery"].get("baseline_run_id") for r in g[key]}
    bases = [r for k in g if k[2] == "baseline" for r in g[k] if r["run_id"] in ids]
    return median_run(bases)[0]["recovery"]["total_s"] if bases else None


def _fmt(x, spec=".2f"):
    return "-" if x is None else format(x, spec)


def _same(rv):
    return {True: "yes", False: "NO", None: "-"}[rv.get("same_result")]


HEADER = ["backend", "W", "fault", "checkpoint every", "checkpoints", "in them s (worker 0)",
          "others waited s", "steps lost", "start to 1st step s", "total s", "baseline s",
          "time lost / overhead s", "test acc", "same as baseline"]


def rows(runs):
    """One row per configuration (the median run of its repeats), baselines first."""
    order = {"baseline": 0, "checkpoints": 1, "fault": 2}
    g = groups(runs)
    out = []
    for key in sorted(g, key=lambda k: (k[0], k[1], order.get(k[2], 3), k[3] == NONE,
                                        str(k[3]).zfill(12))):
        r, totals = median_run(g[key])
        rv = r["recovery"]
        base = baseline_s(g, key)
        extra = None if base is None or rv["role"] == "baseline" else rv["total_s"] - base
        total = _fmt(rv["total_s"]) + (f" [{totals[0]:.2f}..{totals[-1]:.2f}]"
                                       if len(totals) > 1 else "")
        others = (r.get("checkpoint_s") or {}).get("others_max")
        fault = rv.get("fault", {}).get("spec", "-") if rv["role"] == "fault" else "-"
        out.append([key[0], str(key[1]), fault,
                    "-" if rv["role"] == "baseline" else str(key[3]),
                    str(rv.get("checkpoints_total", "-")),
                    _fmt(rv.get("checkpoint_s_total"), ".3f"), _fmt(others, ".3f"),
                    str(rv.get("steps_lost", "-")), _fmt(rv.get("startup_s")), total,
                    _fmt(None if rv["role"] == "baseline" else base), _fmt(extra, "+.2f"),
                    f"{r.get('test_accuracy', float('nan')):.4f}", _same(rv)])
    return out


def summary_lines(runs):
    table = rows(runs)
    if not table:
        return []
    faults = sorted({r["recovery"]["fault"]["spec"] for r in recovery_runs(runs)
                     if r["recovery"].get("fault")})
    text = ("Each backend's run without fault or checkpoints (the baseline), runs writing a "
            "checkpoint every N steps, and runs in which one rank was killed (SIGKILL; "
            f"kill:RANK:STEP here: {', '.join(faults) or '-'}) and the same command "
            "without the fault was run again with `--resume auto`. 'total' is the wall time "
            "of every leg, launch to exit, the restart included; 'start to 1st step' the last "
            "leg's, job start to its first step; 'steps lost' the fault step "
            "minus the step it resumed from; 'time lost / overhead' total minus the "
            "baseline's (the medians of the repeats; noisy on a shared machine, where the "
            "seconds inside checkpoints are the direct measure); "
            "checkpoints and the seconds in them are worker 0's over every leg, 'others "
            "waited' the slowest other worker's in the last leg. 'same as baseline': the final "
            "test accuracy and loss equal the baseline's within 1e-6 (synchronous training)."
            + oversub_note(recovery_runs(runs)))
    return markdown_section("Recovery", text, HEADER, table)


def _xticks(g):
    numeric = sorted({k[3] for k in g if k[3] != NONE})
    ticks = numeric + ([NONE] if any(k[3] == NONE for k in g) else [])
    return ticks, {t: i for i, t in enumerate(ticks)}


def _steps_lost(g, interval):
    """The steps lost at this interval when every backend lost the same number, else None."""
    lost = {median_run(g[k])[0]["recovery"].get("steps_lost") for k in g
            if k[2] == "fault" and k[3] == interval}
    return lost.pop() if len(lost) == 1 else None


WORKER_MARKERS = ("o", "^", "D", "v")  # the worker counts' points, where the runs have several


def _fault_panel(ax, g, backends, pos):
    """Total time of the faulted runs per interval, a line per backend and worker count (its
    own baseline dashed); steps lost on the points where the backends differ in them (else on
    the tick labels)."""
    series = sorted({k[:2] for k in g if k[0] in backends and k[2] in ("baseline", "fault")})
    counts = sorted({w for _, w in series})
    several = len(counts) > 1
    top = 0.0
    for b, w in series:
        c, name = color_of(b), (f"{b} W={w}" if several else b)
        style = "--" if counts.index(w) % 2 == 0 else "-."
        base = [k for k in g if k[:3] == (b, w, "baseline")]
        if base:
            y0 = median_run(g[base[0]])[0]["recovery"]["total_s"]
            ax.axhline(y0, color=c, ls=style, lw=1, label=f"{name}: no fault, no checkpoints")
            top = max(top, y0)
        pts = sorted((pos[k[3]], k) for k in g if k[:3] == (b, w, "fault"))
        if not pts:
            continue
        xs, ys, lo, hi = [], [], [], []
        for x, k in pts:
            r, totals = median_run(g[k])
            xs.append(x)
            ys.append(r["recovery"]["total_s"])
            lo.append(ys[-1] - totals[0])
            hi.append(totals[-1] - ys[-1])
            if _steps_lost(g, k[3]) is None:
                ax.annotate(f"{r['recovery'].get('steps_lost', '?')} lost", (x, ys[-1]),
                            textcoords="offset points", xytext=(4, 4), fontsize=7, color=c)
            top = max(top, totals[-1])
        # a variant with another's baseline (ps-1-server: ps-1's colour) is dotted, squares
        marker = WORKER_MARKERS[counts.index(w) % len(WORKER_MARKERS)] if several else "o"
        ax.errorbar(xs, ys, yerr=[lo, hi], color=c, marker=marker if base else "s",
                    ls="-" if base else ":", capsize=3, label=f"{name}: killed, resumed")
    ax.set_ylim(0, 1.2 * top + 0.1)
    return top


def _overhead_panel(ax, g, backends, ticks):
    """Seconds worker 0 spent in checkpoints, per interval and backend (and worker count, where
    the runs have several), labelled with the number written and their share of the job time of
    the baseline with the same backend and workers."""
    numeric = [t for t in ticks if t != NONE]
    series = sorted({k[:2] for k in g if k[2] == "checkpoints" and k[0] in backends})
    counts = sorted({w for _, w in series})
    several = len(counts) > 1
    width = 0.8 / max(len(series), 1)
    top = 0.0
    for i, (b, w) in enumerate(series):
        label = f"{b} W={w}" if several else b
        for j, t in enumerate(numeric):
            k = (b, w, "checkpoints", t)
            if k not in g:
                continue
            # the baseline of this backend at these workers (or the one it was compared with)
            base = baseline_s(g, k)
            rv = median_run(g[k])[0]["recovery"]
            x = j - 0.4 + width * (i + 0.5)
            y = rv.get("checkpoint_s_total") or 0.0
            top = max(top, y)
            ax.bar(x, y, width, color=color_of(b), label=label,
                   hatch=HATCHES[counts.index(w) % len(HATCHES)] if several else None)
            label = None
            share = f"\n{100 * y / base:.1f}%" if base else ""
            ax.annotate(f"{rv.get('checkpoints_total', '')}{share}", (x, y), ha="center",
                        va="bottom", fontsize=7)
    ax.set_ylim(0, 1.3 * top + 1e-3)
    ax.set_xticks(range(len(numeric)))
    ax.set_xticklabels([str(t) for t in numeric])


def recovery(runs, out_dir):
    """Time to finish with one fault vs checkpoint interval, and the checkpoints' overhead."""
    g = groups(runs)
    if not any(k[2] == "fault" for k in g):
        return Skipped("Recovery", "no resumed run after a fault (scripts/sweep.sh recovery)")
    backends = sorted({k[0] for k in g})
    ticks, pos = _xticks(g)
    fig, (ax, ax2) = plt.subplots(1, 2, figsize=(12.5, 4.8),
                                  gridspec_kw={"width_ratios": [3, 2]})
    _fault_panel(ax, g, backends, pos)
    ax.set_xticks(range(len(ticks)))
    ax.set_xticklabels([(str(t) if t != NONE else "none") + (
        f"\n{_steps_lost(g, t)} steps lost" if _steps_lost(g, t) is not None else "")
        for t in ticks])
    ax.legend(fontsize=7)
    workers = sorted({k[1] for k in g})
    label_axes(ax, "checkpoint interval (optimizer steps)",
               "time to finish, both legs (s)",
               f"One rank killed, job resumed ({'/'.join(map(str, workers))} workers)")
    _overhead_panel(ax2, g, backends, ticks)
    ax2.legend(fontsize=7)
    label_axes(ax2, "checkpoint interval (optimizer steps)",
               "seconds in checkpoints, worker 0 (s)", "Checkpoints' cost without a fault")
    name = _save(fig, out_dir, "recovery.png")
    rr = recovery_runs(runs)
    faults = sorted({r["recovery"]["fault"]["spec"] for r in rr if r["recovery"].get("fault")})
    own = {k[0] for k in g if k[2] == "baseline"}
    borrowed = sorted({b for b in backends if b not in own})
    return Figure(name, "Recovery: time to finish with one fault vs checkpoint interval",
                  "Left: each point is a job in which a rank was killed (SIGKILL; "
                  f"{', '.join(faults)}) and the same command without the fault was run again "
                  "with --resume auto, resuming from the newest checkpoint ('none': no periodic "
                  "checkpoint, so from step 0); the point is the wall time of both legs, launch "
                  "to exit, including mpirun noticing the death (about 1 s), the restart (start-"
                  "up, reading the checkpoint) and the steps done again (fault step minus the "
                  "resumed step: under the interval, or on the point). Dashed: the same "
                  "backend's run without fault or checkpoints"
                  + (f" ({', '.join(borrowed)}: compared with the baseline of the same "
                     "configuration under another name, drawn in its colour)" if borrowed else "")
                  + ". Right: without a fault, the "
                  "seconds worker 0 spent in checkpoints over the whole run (gathering the "
                  "state, from the servers under PS, and writing it; the other workers wait "
                  "about as long), labelled with the number written and their share of the "
                  "baseline's job time; the job's time minus the baseline's is in the summary "
                  "table (on a shared machine mostly noise at this size). Error bars: the range "
                  "over repeats (the point is the median)." + oversub_note(rr))
