"""The scaling figures of StarRing's report (scripts/report.py): throughput and scaling
efficiency against the number of workers, and each run's step-time breakdown (compute, wait,
communication). Same conventions as report_plots.py (Figure or Skipped, Agg backend)."""
import matplotlib.patches
import matplotlib.pyplot as plt
import matplotlib.ticker

from report_plots import (Figure, Skipped, _facets, _hollow_legend, _hollow_note,
                          _hollow_oversubscribed, _log2_workers, _save, _series, _spread_bars,
                          busy_runs_note, color_of, label_axes, oversub_note, repeat_note,
                          scaling_runs, scaling_skip_reason, series_labels)

NO_SCALING = "no backend ran successfully at more than one worker count"
COLORS = {"compute_s": "#4C72B0", "comm_s": "#DD8452", "wait_s": "#C44E52"}


def _baseline(rs):
    """The yardstick of linear scaling for one model: the fastest run at the smallest worker
    count, as (per-worker samples/s, that run). Each backend's own smallest run was no common
    yardstick: co-located PS at 1 worker once ran at half ring's rate (same compute, a server
    thread beside it), which drew its 2-worker point at 181% of linear."""
    w0 = min(r["workers"] for r in rs)
    best = max((r for r in rs if r["workers"] == w0), key=lambda r: r["samples_per_s"])
    return best["samples_per_s"] / w0, best


def _baseline_text(base, best, rs):
    return (f"{series_labels(rs)[id(best)]} at W={best['workers']}, {base:,.0f} samples/s per "
            "worker")


def _scaling_facets(runs):
    return {m: rs for m, rs in _facets(scaling_runs(runs)).items()
            if len({r["workers"] for r in rs}) > 1}


def _scaling_verdict(facets):
    """A caption sentence with what the plot shows: per model and worker count above the
    baseline's, each backend's percent of linear, best first; * = ranks time-shared cores."""
    parts, above = [], False
    for model, rs in facets.items():
        base, best = _baseline(rs)
        if base <= 0:  # a run that recorded no samples/s: no yardstick to state
            continue
        drawn = _series(rs)  # the plotted points: one run per series and count
        for w in sorted({w for pts in drawn.values() for w in pts if w > best["workers"]}):
            at = sorted(((label, pts[w]) for label, pts in drawn.items() if w in pts),
                        key=lambda lr: -lr[1]["samples_per_s"])
            above |= any(r["samples_per_s"] > 1.05 * w * base for _, r in at)
            parts.append(f"{model.split(' (')[0]} W={w}: " + ", ".join(
                f"{label} {100 * r['samples_per_s'] / (w * base):.0f}%"
                + ("*" if r.get("oversubscribed") else "") for label, r in at))
    if not parts:
        return ""
    over = any(r.get("oversubscribed") for rs in facets.values() for r in rs)
    # 127% of linear at W=2 read as superlinear scaling (a loaded machine's slow 1-worker run)
    return (" Here, percent of linear (fastest first): " + "; ".join(parts) + "."
            + (" * = more ranks than cores (time-shared)." if over else "")
            + (" Above 100% is not superlinear scaling: the baseline run was slower per worker "
               "than that one (a shared machine's load moves between runs; scripts/sweep.sh "
               "--repeat N shows the spread)." if above else ""))


def throughput(runs, out_dir):
    facets = _scaling_facets(runs)
    if not facets:
        return Skipped("Throughput vs workers", NO_SCALING)
    fig, axes = plt.subplots(1, len(facets), figsize=(6.2 * len(facets), 4.6), squeeze=False)
    used, bases = [], []
    for ax, (model, rs) in zip(axes[0], facets.items()):
        workers = sorted({r["workers"] for r in rs})
        over = False
        for label, pts in _series(rs).items():
            ws = sorted(pts)
            ys = [pts[w]["samples_per_s"] for w in ws]
            ax.plot(ws, ys, "o-", color=color_of(label), label=label)
            over |= _hollow_oversubscribed(ax, ws, [pts[w] for w in ws], ys, color_of(label))
            _spread_bars(ax, ws, [pts[w] for w in ws], ys, "repeat_samples_per_s",
                         color_of(label))
            used += pts.values()
        base, best = _baseline(rs)
        bases.append((model, base, best, rs))
        ax.plot(workers, [base * w for w in workers], "k:", linewidth=1.2,
                label=f"ideal linear from {series_labels(rs)[id(best)]} W={best['workers']}")
        _hollow_legend(ax, over)
        _log2_workers(ax, workers)
        ax.yaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _p: f"{v:,.0f}"))
        label_axes(ax, "workers", "throughput (samples/s, all workers)",
                   f"throughput vs workers: {model}")
        ax.legend(fontsize=8)
    name = _save(fig, out_dir, "throughput.png")
    return Figure(name, "Throughput vs workers",
                  "Training throughput of all workers together (samples per second, wall clock) "
                  "for each backend as the number of workers grows. Every worker processes the "
                  "same per-worker batch (weak scaling). The dotted line is ideal linear scaling "
                  "of the fastest run at the smallest worker count, the same for every backend ("
                  + "; ".join(f"{m.split(' (')[0]}: {_baseline_text(b, r, rs)}"
                              for m, b, r, rs in bases)
                  + ")." + repeat_note(used) + oversub_note(used) + _hollow_note(used)
                  + busy_runs_note(used) + _scaling_verdict(facets))


def efficiency(runs, out_dir):
    facets = _scaling_facets(runs)
    if not facets:
        return Skipped("Scaling efficiency", NO_SCALING)
    fig, axes = plt.subplots(1, len(facets), figsize=(6.2 * len(facets), 4.2), squeeze=False)
    used, bases = [], []
    for ax, (model, rs) in zip(axes[0], facets.items()):
        over = False
        base, best = _baseline(rs)
        bases.append((model, base, best, rs))
        for label, pts in _series(rs).items():
            ws = sorted(pts)
            eff = [100.0 * pts[w]["samples_per_s"] / (w * base) if base > 0 else 0 for w in ws]
            ax.plot(ws, eff, "o-", color=color_of(label), label=label)
            over |= _hollow_oversubscribed(ax, ws, [pts[w] for w in ws], eff, color_of(label))
            scaled = [{"spread": [100.0 * v / (w * base) for v in pts[w]["repeat_samples_per_s"]]}
                      if pts[w].get("repeat_samples_per_s") and base > 0 else {} for w in ws]
            _spread_bars(ax, ws, scaled, eff, "spread", color_of(label))
            used += pts.values()
        ax.axhline(100, color="k", linestyle=":", linewidth=1.2,
                   label=f"ideal: W x {series_labels(rs)[id(best)]} W={best['workers']} per "
                   "worker")
        _hollow_legend(ax, over)
        _log2_workers(ax, sorted({r["workers"] for r in rs}))
        label_axes(ax, "workers", "scaling efficiency (% of linear)",
                   f"scaling efficiency: {model}")
        ax.set_ylim(0, max(110, ax.get_ylim()[1]))  # a top of 100 clipped points at 100%
        ax.legend(fontsize=8)
    name = _save(fig, out_dir, "efficiency.png")
    return Figure(name, "Scaling efficiency",
                  "Throughput at W workers divided by W times the per-worker throughput of the "
                  "fastest run at the smallest worker count, in percent, the same yardstick for "
                  "every backend ("
                  + "; ".join(f"{m.split(' (')[0]}: {_baseline_text(b, r, rs)}"
                              for m, b, r, rs in bases)
                  + "); 100% is perfect linear scaling. Another backend's point at that smallest "
                  "count lies below 100% by its overhead there (a dedicated server's round trip) "
                  "or by run-to-run noise on a shared machine."
                  + repeat_note(used) + oversub_note(used) + _hollow_note(used)
                  + busy_runs_note(used) + _scaling_verdict(facets))


def breakdown(runs, out_dir):
    every = runs
    runs = [r for r in scaling_runs(runs) if r.get("step_time")]
    if not runs:
        return Skipped("Step-time breakdown", scaling_skip_reason(
            every, lambda r: r.get("step_time"), "a step-time breakdown"))
    facets = _facets(runs)
    widest = max(len(rs) for rs in facets.values())
    fig, axes = plt.subplots(len(facets), 1, figsize=(max(7, 1.05 * widest + 2), 4.3 * len(facets)),
                             squeeze=False)
    grey = False  # an 'other' segment drawn: the caption says what it is
    for ax, (model, rs) in zip(axes[:, 0], facets.items()):
        labels = series_labels(rs)  # two sweeps' ring W=2 bars were both "ring W=2"
        order = {}
        for r in rs:  # backends in the order the sweep ran them
            order.setdefault(labels[id(r)], len(order))
        bars = sorted(rs, key=lambda r: (order[labels[id(r)]], r["workers"]))
        x = list(range(len(bars)))
        step = [r["step_time"] for r in bars]
        compute = [1e3 * t.get("compute_s", 0.0) for t in step]
        wait = [1e3 * t.get("wait_s", 0.0) for t in step]
        other = [max(0.0, 1e3 * t.get("total_s", 0.0) - c - w)
                 for t, c, w in zip(step, compute, wait)]
        left = [i - 0.17 for i in x]
        ax.bar(left, compute, 0.34, color=COLORS["compute_s"], label="compute (training thread)")
        ax.bar(left, wait, 0.34, bottom=compute, color=COLORS["wait_s"],
               label="wait (blocked on communication / peers)")
        # Only when visible: a few microseconds of timer residue gave a legend entry for
        # segments no one could see.
        if max(other) > 0.01 * max(c + w for c, w in zip(compute, wait)):
            grey = True
            ax.bar(left, other, 0.34, bottom=[c + w for c, w in zip(compute, wait)],
                   color="#BBBBBB", label="other")
        ax.bar([i + 0.19 for i in x], [1e3 * t.get("comm_s", 0.0) for t in step], 0.2,
               color=COLORS["comm_s"], label="communication (backend, may overlap compute)")
        ax.set_xticks(x)
        ax.set_xticklabels([f"{labels[id(r)]}\nW={r['workers']}"
                            + ("*" if r.get("oversubscribed") else "") for r in bars], fontsize=8)
        ax.set_ylabel("time per step (ms, mean over workers)")
        ax.set_title(f"step-time breakdown: {model}")
        ax.grid(axis="y", alpha=0.3)

        tops = [c + w + o for c, w, o in zip(compute, wait, other)]
        tops += [1e3 * t.get("comm_s", 0.0) for t in step]
        ax.set_ylim(0, 1.35 * max(tops + [1e-3]))  # headroom: the legend sits above the bars
        handles, labels = ax.get_legend_handles_labels()
        if any(r.get("oversubscribed") for r in bars):  # the * under the bars, said on the plot
            handles.append(matplotlib.patches.Patch(facecolor="none", edgecolor="none"))
            labels.append("W=N*: more ranks than cores (time-shared)")
        ax.legend(handles, labels, fontsize=8, loc="upper left", ncol=2)
    name = _save(fig, out_dir, "breakdown.png")
    return Figure(name, "Step-time breakdown",
                  "Mean wall-clock time of one training step per backend and worker count. The "
                  "wide bar is the training thread's step: computing (forward, backward, and the "
                  "optimizer on one worker, where the local backend applies it) and waiting "
                  "(blocked until gradients are reduced or parameters pulled: communication that "
                  "was not hidden, the optimizer's update after it, and slow peers). The narrow "
                  "bar is the time the backend spent in its exchanges, including the time they "
                  "waited for a slower peer (a straggler shows on the others in both bars); when "
                  "it is taller than the wait segment, that much overlapped computation. It is measured "
                  "differently per backend: ring, mpi and nccl sum their all-reduce calls over "
                  "the buckets (the optimizer each bucket's update then runs is in neither bar "
                  "unless it is waited for: ranks[].extra.optimizer_s in the summary); the "
                  "parameter server counts each step from its first push to its last reply, so "
                  "the servers' aggregation and update are inside it, and with several buckets "
                  "the backward between their pushes too."
                  + (" Grey (other): the rest of the training thread's step, its total less "
                     "compute and wait (the loop's own work between steps)." if grey else "")
                  + oversub_note(runs) + (" Those runs are marked * (a dedicated-PS run has "
                                          "W + S ranks)." if oversub_note(runs) else "")
                  + busy_runs_note(runs))
