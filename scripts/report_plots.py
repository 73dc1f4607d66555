"""The plots of StarRing's report (scripts/report.py). Each plot function takes the loaded
results and returns a Figure (file name, title, caption) after saving the PNG, or a Skipped
(title, reason) when the results hold no data for it. matplotlib's Agg backend, no display.
Here: the shared helpers (colors, caption notes, grouping) and the scaling, breakdown and
convergence figures; bytes per rank and bus bandwidth are in report_traffic.py.
"""
import math
import os
from collections import defaultdict
from dataclasses import dataclass

import matplotlib

matplotlib.use("Agg")
import matplotlib.patches  # noqa: E402
import matplotlib.ticker  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402

import starring_results as sr  # noqa: E402

DPI = 110
COLORS = {"compute_s": "#4C72B0", "comm_s": "#DD8452", "wait_s": "#C44E52"}


@dataclass
class Figure:
    file: str
    title: str
    caption: str


@dataclass
class Skipped:
    title: str
    reason: str


# ---- selecting and grouping runs --------------------------------------------------------------

STUDY_KEYS = {"hidden", "straggler", "bucket-mb", "overlap", "batch", "compress", "consistency", "staleness",
              "fault", "checkpoint-every"}  # the last two: the recovery sweep (report_recovery)


def scaling_runs(runs):
    """Runs that belong to a scaling study: no straggler, and no swept knob besides the workers
    and the model (bucket, crossover and straggler sweeps have their own plots)."""
    out = []
    for r in runs:
        if r.get("straggler"):
            continue
        if set(r.get("grid_point", {})) & STUDY_KEYS:
            continue
        out.append(r)
    return out


def scaling_skip_reason(runs, has, what):
    """Why a plot of scaling_runs is not drawn: no run has `what` at all, or every run that has
    it varies a study knob (a straggler, --hidden, --bucket-mb...), which the plot leaves out."""
    having = [r for r in runs if has(r)]
    if not having or scaling_runs(having):
        return f"no run has {what}"
    knobs = {k for r in having for k in r.get("grid_point", {}) if k in STUDY_KEYS}
    knobs |= {"straggler"} if any(r.get("straggler") for r in having) else set()
    return (f"the runs with {what} all vary {', '.join('--' + k for k in sorted(knobs))}, "
            "which this plot leaves out (it compares runs that differ only in backend, workers "
            "and model; the study has its own plot, and the summary table lists every run)")


def model_label(r):
    m = r.get("model", {})
    params = m.get("params", 0)
    preset = r.get("config", {}).get("preset") or r.get("grid_point", {}).get("preset")
    widths = m.get("widths") or []
    name = preset if preset and preset != "custom" else "-".join(str(w) for w in widths)
    return f"{name} MLP ({params / 1e6:.2f}M params)" if params else str(name)


# One color per backend in every figure, whatever order the plots meet them in: a cycle handed
# out on first use gave the bench's "ps" (busbw) gray beside ps-1's orange everywhere else.
# Labels are the sweeps' variants and backend_label's names for runs without one.
BACKEND_COLOR = {"ring": "#1f77b4", "mpi": "#e377c2", "nccl": "#bcbd22", "local": "#7f7f7f",
                 "ps-1": "#ff7f0e", "ps S=1": "#ff7f0e", "ps-1-server": "#ff7f0e",
                 "ps-half": "#9467bd", "ps-colocated": "#2ca02c", "ps colocated": "#2ca02c",
                 "ps-bsp": "#d62728", "ps-ssp": "#8c564b", "ps-asp": "#0e8c99",
                 "mpi-nothread": "#8e0152"}


def color_of(label, _cache={}):  # noqa: B006 - a stable color per backend label
    if label in BACKEND_COLOR:
        return BACKEND_COLOR[label]
    if label not in _cache:  # others (add_run's labels, new variants): Dark2, in the order met
        spare = plt.get_cmap("Dark2").colors
        _cache[label] = spare[len(_cache) % len(spare)]
    return _cache[label]


def bench_color(b):
    """A bench row's color: its backend's, the bench's "ps" as ps-1 (S=1) or ps-half."""
    name = b["backend"].partition("@")[0]
    if name == "ps":
        return color_of("ps-1" if b.get("servers") in (None, 1) else "ps-half")
    return color_of(name)


def oversub_note(runs):
    """The caption sentence for wall-clock plots with more ranks than cores."""
    over = sorted({r["np"] for r in runs if r.get("oversubscribed")})
    if not over:
        return ""
    cores = max(r.get("cores", 0) for r in runs)
    nps = ", ".join(str(n) for n in over)
    return (f" Runs with {nps} ranks time-share this machine's {cores} cores (more ranks on a "
            "host than the CPUs they may use there): wall-clock scaling beyond that measures "
            "this machine, not the algorithm.")


def _hollow_note(runs):
    return (" Hollow markers are those runs (a dedicated-PS run has W + S ranks)."
            if any(r.get("oversubscribed") for r in runs) else "")


def repeat_note(runs, field="repeat_samples_per_s"):
    """The caption sentence for plots of repeated configurations."""
    counts = sorted({len(r[field]) for r in runs if r.get(field)})
    if not counts:
        return ""
    n = f"{counts[0]}-{counts[-1]}" if len(counts) > 1 else str(counts[0])
    return (f" Points run {n} times show the median run; the bars span the fastest and the "
            "slowest.")


def _hollow_oversubscribed(ax, xs, items, ys, color):
    """Hollow markers over the points whose run had more ranks than cores; True if any."""
    over = [(x, y) for x, it, y in zip(xs, items, ys) if it.get("oversubscribed")]
    if over:
        ax.plot([p[0] for p in over], [p[1] for p in over], "o", color=color,
                markerfacecolor="white")
    return bool(over)


def _hollow_legend(ax, any_over):
    if any_over:
        ax.plot([], [], "o", color="gray", markerfacecolor="white",
                label="hollow: more ranks than cores")


def _spread_bars(ax, xs, items, ys, field, color):
    """Vertical min-max bars at the points whose item carries a list of repeats in `field`."""
    for x, it, y in zip(xs, items, ys):
        vals = it.get(field)
        if vals:
            ax.errorbar([x], [y], yerr=[[y - vals[0]], [vals[-1] - y]], fmt="none",
                        ecolor=color, capsize=3, linewidth=1)


def _save(fig, out_dir, name):
    fig.tight_layout()
    try:  # whole or not at all: a full disk left a cut (0-byte) PNG
        sr.write_whole(os.path.join(out_dir, name),
                       lambda tmp: fig.savefig(tmp, dpi=DPI, format="png"))
    finally:
        plt.close(fig)
    return name


def label_axes(ax, xlabel, ylabel, title):
    """Axis labels (with units), title and the light grid every plot of the report uses."""
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(alpha=0.3)


def markdown_section(title, text, header, table):
    """A section of summary.md: '## title', a paragraph, and the table ('|' in cells escaped)."""
    lines = [f"## {title}", "", text, "", "| " + " | ".join(header) + " |",
             "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(c.replace("|", "\\|") for c in row) + " |" for row in table]
    return lines + [""]


def _log2_workers(ax, workers):
    ax.set_xscale("log", base=2)
    ax.set_xticks(workers)
    ax.set_xticklabels([str(w) for w in workers])
    ax.xaxis.set_minor_locator(matplotlib.ticker.NullLocator())  # the y axis may be log too


def log_tick_labels(axis):
    """Plain-number labels ("30", not "3 x 10^1") on a log axis, with as many of the minor ticks
    labelled as the axis' span, read when it is drawn, leaves room for: every one under half a
    decade, 2-5 under 1.2 decades, 2 and 5 under 3.5, none beyond. A fixed '2 and 5' left a
    0.8-decade axis (the fixture's extrapolation: 22-140 ms) with its lower half unlabelled, the
    ring's and T_compute's lines read against nothing."""
    def minor(v, _pos):
        lo, hi = sorted(axis.get_view_interval())
        span = math.log10(hi / lo) if lo > 0 else float("inf")
        digits = ("23456789" if span < 0.5 else "2345" if span < 1.2
                  else "25" if span < 3.5 else "")
        text = f"{v:g}"
        return text if text.lstrip("0.")[:1] in digits else ""
    axis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _pos: f"{v:g}"))
    axis.set_minor_formatter(matplotlib.ticker.FuncFormatter(minor))


def _facets(runs):
    by_model = defaultdict(list)
    for r in runs:
        by_model[model_label(r)].append(r)
    return dict(sorted(by_model.items(), key=lambda kv: min(r["model"]["params"] for r in kv[1])))


def _series(runs):
    """variant label -> {workers: run} (the last run wins when a point was repeated)."""
    series = defaultdict(dict)
    for r in runs:
        series[sr.backend_label(r)][r["workers"]] = r
    return series


# ---- the plots --------------------------------------------------------------------------------

def _baseline(rs):
    """The yardstick of linear scaling for one model: the fastest run at the smallest worker
    count, as (per-worker samples/s, that run). Each backend's own smallest run was no common
    yardstick: co-located PS at 1 worker once ran at half ring's rate (same compute, a server
    thread beside it), which drew its 2-worker point at 181% of linear."""
    w0 = min(r["workers"] for r in rs)
    best = max((r for r in rs if r["workers"] == w0), key=lambda r: r["samples_per_s"])
    return best["samples_per_s"] / w0, best


def _baseline_text(base, best):
    return (f"{sr.backend_label(best)} at W={best['workers']}, {base:,.0f} samples/s per worker")


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
        drawn = _series(rs).values()  # the plotted points: one run per backend and count
        for w in sorted({w for pts in drawn for w in pts if w > best["workers"]}):
            at = sorted((pts[w] for pts in drawn if w in pts), key=lambda r: -r["samples_per_s"])
            above |= any(r["samples_per_s"] > 1.05 * w * base for r in at)
            parts.append(f"{model.split(' (')[0]} W={w}: " + ", ".join(
                f"{sr.backend_label(r)} {100 * r['samples_per_s'] / (w * base):.0f}%"
                + ("*" if r.get("oversubscribed") else "") for r in at))
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
        return Skipped("Throughput vs workers", "no backend was run at more than one worker count")
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
        bases.append((model, base, best))
        ax.plot(workers, [base * w for w in workers], "k:", linewidth=1.2,
                label=f"ideal linear from {sr.backend_label(best)} W={best['workers']}")
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
                  + "; ".join(f"{m.split(' (')[0]}: {_baseline_text(b, r)}" for m, b, r in bases)
                  + ")." + repeat_note(used) + oversub_note(used) + _hollow_note(used)
                  + _scaling_verdict(facets))


def efficiency(runs, out_dir):
    facets = _scaling_facets(runs)
    if not facets:
        return Skipped("Scaling efficiency", "no backend was run at more than one worker count")
    fig, axes = plt.subplots(1, len(facets), figsize=(6.2 * len(facets), 4.2), squeeze=False)
    used, bases = [], []
    for ax, (model, rs) in zip(axes[0], facets.items()):
        over = False
        base, best = _baseline(rs)
        bases.append((model, base, best))
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
                   label=f"ideal: W x {sr.backend_label(best)} W={best['workers']} per worker")
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
                  + "; ".join(f"{m.split(' (')[0]}: {_baseline_text(b, r)}" for m, b, r in bases)
                  + "); 100% is perfect linear scaling. Another backend's point at that smallest "
                  "count lies below 100% by its overhead there (a dedicated server's round trip) "
                  "or by run-to-run noise on a shared machine."
                  + repeat_note(used) + oversub_note(used) + _hollow_note(used)
                  + _scaling_verdict(facets))


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
        order = {}
        for r in rs:  # backends in the order the sweep ran them
            order.setdefault(sr.backend_label(r), len(order))
        bars = sorted(rs, key=lambda r: (order[sr.backend_label(r)], r["workers"]))
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
        ax.set_xticklabels([f"{sr.backend_label(r)}\nW={r['workers']}"
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
                  "bar is the time the backend spent communicating; when it is taller than the "
                  "wait segment, that much communication overlapped computation. It is measured "
                  "differently per backend: ring, mpi and nccl sum their all-reduce calls over "
                  "the buckets (the optimizer each bucket's update then runs is in neither bar "
                  "unless it is waited for: ranks[].extra.optimizer_s in the summary); the "
                  "parameter server counts each step from its first push to its last reply, so "
                  "the servers' aggregation and update are inside it."
                  + (" Grey (other): the rest of the training thread's step, its total less "
                     "compute and wait (the loop's own work between steps)." if grey else "")
                  + oversub_note(runs) + (" Those runs are marked * (a dedicated-PS run has "
                                          "W + S ranks)." if oversub_note(runs) else ""))


def _smooth(values, k):
    out, acc = [], 0.0
    for i, v in enumerate(values):
        acc += v
        if i >= k:
            acc -= values[i - k]
        out.append(acc / min(i + 1, k))
    return out


def step_loss(m):
    """A step line's training loss: the mean over every worker's (global_loss, written since
    --metrics-loss all) where the line has it, else worker 0's (older runs, --metrics-loss
    worker0). A null global_loss (a worker's loss was not a number) is NaN, a gap in the curve,
    not worker 0's loss, which would hide the divergence."""
    if "global_loss" not in m:
        return m["loss"]
    g = m["global_loss"]
    return g if isinstance(g, (int, float)) else float("nan")


def training_clock(record, lines):
    """A run's metrics lines with every time_s on the training clock (evaluation and checkpoints
    not counted). Runs recorded before 6673712 (no job.leg_train_s in their summary) counted in a
    step line's time_s the evaluations and checkpoints before it, which the event lines' time_s
    did not: their step lines move back by that time, read at the first step after each event
    (its time_s less the event's and less its own compute + wait)."""
    if "leg_train_s" in (record.get("job") or {}):
        return lines
    out, offset, event_at = [], 0.0, None
    for m in lines:
        if not isinstance(m.get("time_s"), (int, float)):
            out.append(m)
            continue
        if "event" in m:
            event_at = m["time_s"]
            out.append(m)
            continue
        if event_at is not None:
            step_s = m.get("compute_s", 0.0) + m.get("wait_s", 0.0)
            offset = max(0.0, m["time_s"] - event_at - step_s)
            event_at = None
        out.append(dict(m, time_s=m["time_s"] - offset) if offset else m)
    return out


def convergence(runs, metrics, out_dir):
    every = runs
    runs = [r for r in scaling_runs(runs) if r.get("history") or metrics.get(r["run_id"])]
    if not runs:
        return Skipped("Loss and accuracy vs wall time", scaling_skip_reason(
            every, lambda r: r.get("history") or metrics.get(r["run_id"]),
            "a history or metrics file"))
    facets = _facets(runs)
    model, runs = next(iter(facets.items()))  # the smallest model only: one panel per W
    workers = sorted({r["workers"] for r in runs})
    fig, axes = plt.subplots(2, len(workers), figsize=(4.6 * len(workers), 7.2), squeeze=False)
    evaluations = []  # per run drawn: how many accuracy points
    for col, w in enumerate(workers):
        for r in sorted((r for r in runs if r["workers"] == w), key=sr.backend_label):
            color = color_of(sr.backend_label(r))
            label = sr.backend_label(r) + (f" ({r['np']} ranks on {r['cores']} cores)"
                                           if r.get("oversubscribed") else "")
            lines = training_clock(r, metrics.get(r["run_id"], []))
            steps = [m for m in lines if "loss" in m and "time_s" in m]
            if steps:
                k = max(1, len(steps) // 40)
                axes[0][col].plot([m["time_s"] for m in steps],
                                  _smooth([step_loss(m) for m in steps], k), color=color,
                                  label=label)
            evals = [m for m in lines if m.get("event") == "eval"]
            pts = [(m["time_s"], m["test_accuracy"]) for m in evals] or [
                (h["wall_s"], h["test_accuracy"]) for h in r.get("history") or []]
            if pts:
                axes[1][col].plot([p[0] for p in pts], [p[1] for p in pts], "o-", color=color,
                                  label=label)
                evaluations.append(len(pts))
        # A fraction: autoscale around runs that all reached 1.0 (the scaling sweep's synthetic
        # data) drew the axis up to 1.04.
        lo, hi = axes[1][col].get_ylim()
        if hi > 1.0:
            axes[1][col].set_ylim(lo, 1.0 + 0.1 * (1.0 - min(lo, 0.99)))
        axes[0][col].set_title(f"{w} worker{'s' if w > 1 else ''}")
        axes[0][col].set_ylabel("training loss (moving average)")
        axes[1][col].set_ylabel("test accuracy (fraction)")
        for row in (0, 1):
            axes[row][col].set_xlabel("training seconds (evaluation, checkpoints not counted)")
            axes[row][col].grid(alpha=0.3)
            if axes[row][col].lines:
                axes[row][col].legend(fontsize=8)
    fig.suptitle(f"{model}: training loss and test accuracy vs wall time")
    name = _save(fig, out_dir, "convergence.png")
    return Figure(name, "Loss and accuracy vs wall time",
                  f"{model}: training loss per step (the mean over every worker's, the metrics' "
                  "global_loss; worker 0's in runs recorded without it; moving average) and test "
                  "accuracy after each epoch, against the seconds spent training since the first "
                  "step (the metrics' time_s, the history's wall_s: evaluation and checkpoints "
                  "not counted; runs recorded before 6673712, whose step lines counted them, are "
                  "moved back by them), "
                  "one column per worker count. Under synchronous training the backends compute "
                  "the same steps, so the curves differ in speed, not in shape."
                  + (" Every run here was evaluated once, at its end"
                     # a longer run evaluated once had --eval-each-epoch off
                     + (" (one epoch or fewer)" if all(0 < r.get("epochs", 0) <= 1 for r in runs)
                        else "")
                     + ", so the accuracy row has one point per run: its final accuracy against "
                     "its training time."
                     if evaluations and max(evaluations) == 1 else "")
                  + oversub_note(runs))
