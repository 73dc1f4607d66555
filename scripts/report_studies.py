"""The study plots of StarRing's report: straggler, staleness, compute/communication crossover
and bucket size. Same conventions as report_plots.py (Figure or Skipped, Agg backend)."""
from collections import defaultdict

import matplotlib.patches
import matplotlib.pyplot as plt
import matplotlib.ticker

import starring_results as sr
from report_plots import (Figure, Skipped, _save, busy_runs_note, color_of, label_axes,
                          oversub_note)


def _key(r, *drop):
    """What identifies a run's configuration apart from the knobs in `drop`."""
    point = {k: v for k, v in r.get("grid_point", {}).items() if k not in drop}
    return (r.get("sweep"), sr.backend_label(r), r["workers"], tuple(sorted(point.items())))


def straggler(runs, out_dir):
    slow = [r for r in runs if r.get("straggler")]
    if not slow:
        return Skipped("Straggler", "no run with --straggler (scripts/sweep.sh straggler [--quick] "
                       "--out this results folder adds them)")
    base = {_key(r, "straggler"): r for r in runs if not r.get("straggler")}
    pairs = [(base.get(_key(r, "straggler")), r) for r in slow]
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.9))
    x = list(range(len(pairs)))
    colors = [color_of(sr.backend_label(p[1])) for p in pairs]

    # The job's rate (the summary's samples_per_s: every sample over the slowest worker's
    # training time), not the workers' own paces summed: each worker trains a fixed 1/W share of
    # every epoch, so one that runs ahead under SSP or ASP then waits for the slowest at the
    # evaluation, and the epoch ends no sooner. The summed paces read 103 % kept (90,453 of
    # 87,498) for the quickstart's ps-asp 1:50, whose job ran at 2,504 samples/s. A run without
    # it (0 or absent) has no rate: falling back to the summed paces drew that retired measure.
    def rate(r):
        v = r.get("samples_per_s") if r else None
        return v if isinstance(v, (int, float)) and v > 0 else 0.0

    # Left: the share of its own rate each backend keeps. Blue 'without' and red 'with' bars on
    # one axis left the straggler bars (2-4k under 60-115k samples/s) as slivers, and blue/red
    # read as ring/ps-bsp, the backends' colors in every other plot.
    ax = axes[0]
    kept = [100.0 * rate(b) / rate(a) if a and rate(a) > 0 else 0.0 for a, b in pairs]
    ax.bar(x, kept, 0.6, color=colors)
    for i, ((a, b), k) in enumerate(zip(pairs, kept)):
        if a and rate(a) > 0 and rate(b) > 0:
            ax.annotate(f"{k:.0f}%\n{rate(b):,.0f}\nof {rate(a):,.0f}", (i, k), ha="center",
                        va="bottom", fontsize=7)
        elif a:  # a rate of 0 drew a 0% bar, or an infinite one
            ax.annotate("no share:\nno rate\n(samples_per_s)\nrecorded", (i, 0), ha="center",
                        va="bottom", fontsize=7)
        else:  # an empty slot with no word read as 0% kept
            ax.annotate("no share:\nno successful\nrun without\nthe straggler", (i, 0),
                        ha="center", va="bottom", fontsize=7)
    ax.set_ylim(0, max([125.0] + [1.25 * k for k in kept]))  # room for the labels
    ax.set_yticks(range(0, 101, 20))
    ax.set_ylabel("throughput kept (% of no-straggler run)")
    # Right: accuracy without (gray) and with (the backend's color) the straggler.
    ax = axes[1]
    width = 0.38
    without = [100.0 * a["test_accuracy"] if a else 0.0 for a, _ in pairs]
    with_ = [100.0 * b["test_accuracy"] for _, b in pairs]
    ax.bar([i - width / 2 for i in x], without, width, color="#BBBBBB", label="no straggler")
    ax.bar([i + width / 2 for i in x], with_, width, color=colors)
    for i, (a, b) in enumerate(zip(without, with_)):
        if a > 0:  # over the pair, above both bars: on the colored bar alone, a fall ran the
            # label into the taller gray bar beside it
            ax.annotate(f"{b - a:+.1f} pt", (i, max(a, b)), ha="center", va="bottom",
                        fontsize=8)
    lo = min([v for v in without + with_ if v > 0] or [0])
    ax.set_ylim(max(0, lo - 10), min(101, max(without + with_) + 4))
    ax.set_ylabel("test accuracy (%, axis not from 0)")
    handles, labels = ax.get_legend_handles_labels()  # a swatch of one backend's color misled
    handles.append(matplotlib.patches.Patch(facecolor="white", edgecolor="#555555"))
    labels.append("with straggler (the backend's color)")
    ax.legend(handles, labels, fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=2)
    for ax in axes:
        ax.set_xticks(x)
        ax.set_xticklabels([f"{sr.backend_label(p[1])}\nW={p[1]['workers']}"
                            + ("*" if p[1].get("oversubscribed") else "")
                            + f"\n{p[1]['straggler']}" for p in pairs], fontsize=8)
        ax.grid(axis="y", alpha=0.3)
    if any(p[1].get("oversubscribed") for p in pairs):  # the * under the bars, on the plot
        axes[0].text(0.99, 0.98, "W=N*: more ranks than cores (time-shared)", ha="right",
                     va="top", fontsize=8, transform=axes[0].transAxes)
    axes[0].set_title("throughput kept with a straggler (labels: samples/s)")
    axes[1].set_title("accuracy cost of a straggler")
    name = _save(fig, out_dir, "straggler.png")
    what = sorted({r["straggler"] for r in slow})
    return Figure(name, "Straggler: throughput kept and accuracy cost",
                  f"Workers slowed down (--straggler {', '.join(what)}: RANK:MS makes worker "
                  "RANK sleep MS milliseconds every step, counted as its compute; any:MS one "
                  "worker drawn at random each step). Left: the job's samples per second (the "
                  "summary table's: every sample over the slowest worker's training time) with the "
                  "straggler as a share of the same backend's rate without it, both rates in the "
                  "label. Every worker trains a fixed 1/W share of each epoch, so the epoch ends "
                  "with the slowest worker whoever runs ahead of it. Synchronous backends (ring, "
                  "PS BSP) wait for the slow worker every step. Under SSP the others may run at "
                  "most --staleness steps ahead, so a straggler that is slow on every step still "
                  "bounds them, while delays that move between workers (any:MS) are absorbed: "
                  "each worker is slow on 1/W of the steps, so SSP pays about MS/W per step where "
                  "BSP pays MS; under ASP nobody waits during the epoch, but a worker slow on "
                  "every step still takes as long for its share (the others finish theirs early "
                  "and wait for it at the evaluation), and any:MS puts about MS/W of sleep on "
                  "every worker's step, so its rate falls too. Right: test accuracy after the same "
                  "number of steps per worker without (gray) and with the straggler, with the "
                  "change in percentage points: the cost of "
                  "training on stale parameters (its axis starts near the lowest accuracy, so "
                  "bar heights exaggerate the differences: read the labels)."
                  + _pace_note(pairs) + _accuracy_rise_note(pairs)
                  + _above_100_note(pairs, kept)
                  + _unpaired_note(pairs) + _no_rate_note(pairs, rate)
                  + oversub_note([p[1] for p in pairs])
                  + (" Those runs are marked * (a dedicated-PS run has W + S ranks)."
                     if oversub_note([p[1] for p in pairs]) else "")
                  + busy_runs_note([r for p in pairs for r in p if r]))


def _accuracy_rise_note(pairs):
    """The caption sentence for straggler runs whose accuracy rose by over a point against the
    run without it, under a caption calling the change 'the cost of training on stale
    parameters': the quickstart's ps-ssp 1:50 and any:50 read +7.0 and +6.7 pt (60-step runs,
    the straggler runs the staler ones). Under SSP and ASP which parameters a push was computed
    from is the scheduler's doing, so one run per configuration is no measure of the cost."""
    rose = [(b, 100.0 * (b["test_accuracy"] - a["test_accuracy"])) for a, b in pairs
            if a and b["test_accuracy"] - a["test_accuracy"] > 0.01
            and b.get("consistency") in ("ssp", "asp")]  # bsp: the same bits, or a real change
    if not rose:
        return ""
    return (" A rise (" + ", ".join(f"{sr.backend_label(b)} {b['straggler']}: {d:+.1f} pt"
                                    for b, d in rose)
            + ") is no gain from the straggler: under SSP and ASP the parameters each push was "
            "computed from depend on the workers' pace, which the scheduler sets, so one run per "
            "configuration does not separate the cost from that spread (scripts/sweep.sh "
            "--repeat N shows it).")


def _above_100_note(pairs, kept):
    """The caption sentence for a straggler run that kept over 100% of its rate, which reads as
    a straggler that sped the job up. The bar is the job's rate, which ends with the straggler
    (each worker trains a fixed share), so above 100% the two runs met different load on the
    host: each is one run, not repeated. Where the cores are time-shared the sleeping straggler
    also gives its CPU to the other ranks, a lesser part. (The quickstart's ps-asp 1:50 on a busy
    2-core host kept 307% when the bar was the workers' summed paces, a measure since retired.)"""
    over = [(b, k) for (a, b), k in zip(pairs, kept) if a and k > 105]
    if not over:
        return ""
    shared = any(r.get("oversubscribed") or sr.host_busy(r) for a, b in pairs for r in (a, b)
                 if r)
    return (" Above 100% (" + ", ".join(f"{sr.backend_label(b)} {b['straggler']}: {k:.0f}%"
                                        for b, k in over)
            + ") is no gain from the straggler: the job ends with the slowest worker, so the two "
            "runs met different load on the host (each is a single run, not repeated) and their "
            "rates moved with it"
            + ("; on these time-shared cores the sleeping straggler also gives its CPU to the "
               "other ranks" if shared else "") + ".")


def _unpaired_note(pairs):
    """The caption sentence for straggler runs without a successful run of the same
    configuration without the straggler (it failed, timed out, or was not made): no share kept
    and no accuracy change can be drawn for them."""
    alone = [b for a, b in pairs if a is None]
    if not alone:
        return ""
    return (" No successful run without the straggler to compare with (see the runs that did "
            "not succeed): " + ", ".join(f"{sr.backend_label(b)} W={b['workers']} "
                                        f"{b['straggler']}" for b in alone)
            + "; only their accuracy with it is drawn.")


def _no_rate_note(pairs, rate):
    """The caption sentence for pairs with a run whose summary gave no job rate (samples_per_s 0
    or absent): no share is drawn for them, rather than the workers' summed paces (retired)."""
    none = [b for a, b in pairs if a and not (rate(a) > 0 and rate(b) > 0)]
    if not none:
        return ""
    return (" No job rate (samples_per_s) recorded for a run of " + ", ".join(
        f"{sr.backend_label(b)} W={b['workers']} {b['straggler']}" for b in none)
        + ": no share drawn.")


def _pace_note(pairs):
    """The caption sentence for SSP/ASP straggler runs whose workers' own rates, summed, are well
    above the job's (the bar's): the faster workers ran ahead of the slowest at their own pace,
    then waited for it, since each trains a fixed share of the epoch. That sum (90,453 samples/s
    for the quickstart's ps-asp --straggler 1:50, whose job ran at 2,504) was once the bar."""
    far = [b for _, b in pairs if b.get("consistency") in ("ssp", "asp")
           and b.get("samples_per_s") and sum(sr.worker_rates(b)) > 1.1 * b["samples_per_s"]]
    if not far:
        return ""
    return (" Under SSP and ASP the faster workers ran ahead of the slowest at their own pace, "
            "then waited for it at the evaluation: their own rates summed read "
            + ", ".join(f"{sum(sr.worker_rates(b)):,.0f} samples/s for {sr.backend_label(b)} "
                        f"{b['straggler']} (the job: {b['samples_per_s']:,.0f})" for b in far)
            + ", a pace only a worker given more data than its share could turn into "
            "throughput.")


HATCHES = ["", "//", ".."]
LINESTYLES = ["-", "--", ":"]


def _staleness_label(r):
    return f"{sr.backend_label(r)} W={r['workers']}" + ("*" if r.get("oversubscribed") else "") + (
        f" straggler {r['straggler']}" if r.get("straggler") else "")


def staleness(runs, out_dir):
    runs = [r for r in runs if r.get("staleness_hist") and r.get("consistency") in ("ssp", "asp")]
    if not runs:
        return Skipped("Observed staleness", "no PS run under ssp/asp recorded a staleness "
                       "histogram (scripts/sweep.sh straggler [--quick] --out this results "
                       "folder adds them)")
    # One panel per consistency: ASP's long tail (tens of steps) on a shared axis squeezed SSP's
    # few bars into a sliver.
    kinds = [k for k in ("ssp", "asp") if any(r["consistency"] == k for r in runs)]
    fig, axes = plt.subplots(1, len(kinds), figsize=(6.4 * len(kinds), 5.2), squeeze=False)
    for ax, kind in zip(axes[0], kinds):
        mine = sorted((r for r in runs if r["consistency"] == kind), key=_staleness_label)
        width = 0.8 / len(mine)
        # The backend's color for every run, the runs told apart by hatch / line style: a tab10
        # cycle drew them blue, orange, green, the colors of ring, ps-1 and ps-colocated.
        for i, r in enumerate(mine):
            hist = {int(k): v for k, v in r["staleness_hist"].items()}
            total = sum(hist.values()) or 1
            ks = sorted(hist)
            color = color_of(sr.backend_label(r))
            if kind == "ssp":
                ax.bar([k - 0.4 + width * (i + 0.5) for k in ks],
                       [100 * hist[k] / total for k in ks], width, color=color,
                       alpha=1.0 - 0.25 * (i % 3), hatch=HATCHES[i % len(HATCHES)],
                       edgecolor="white", label=_staleness_label(r))
            else:  # cumulative: a tail of 1% bins is invisible as bars
                cum, acc = [], 0.0
                for k in ks:
                    acc += hist[k]
                    cum.append(100 * acc / total)
                ax.step(ks, cum, where="post", color=color, linewidth=1.5,
                        linestyle=LINESTYLES[i % len(LINESTYLES)], label=_staleness_label(r))
        bounds = sorted({r["staleness"] for r in mine if isinstance(r.get("staleness"), int)})
        if kind == "ssp":
            top = max([int(k) for r in mine for k in r["staleness_hist"]] + bounds)
            ax.set_xlim(-0.6, top + 1.5)  # the bound's line sat on the axis' right edge
            for b in bounds:
                ax.axvline(b + 0.5, color="k", linestyle=":", linewidth=1.2,
                           label=f"bound --staleness {b}")
                ax.axvspan(b + 0.5, top + 1.5, color="#DDDDDD", alpha=0.5, zorder=0,
                           label=f"beyond the bound (staleness > {b})")
            ax.set_xticks(range(0, top + 2))
            label_axes(ax, "staleness (steps)", "pushes (%)", "SSP: share of pushes")
        else:
            ax.set_ylim(0, 102)
            ax.xaxis.set_major_locator(matplotlib.ticker.MaxNLocator(integer=True))
            label_axes(ax, "staleness (steps)", "pushes with at most this staleness (%)",
                       "ASP: cumulative share of pushes")
        # Below the axes: inside, 'best' put the SSP legend over a 48 % bar at staleness 2 (the
        # quickstart's straggler runs), as every spot over bars that fill the width can be.
        ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=2)
    name = _save(fig, out_dir, "staleness.png")
    return Figure(name, "Observed staleness (PS, SSP/ASP)",
                  "How stale the parameters were that each gradient push was computed from, as "
                  "recorded by the servers: staleness = the server's clock minus the clock of "
                  "the parameters the worker computed on, in steps. SSP (bars: the share of "
                  "pushes at each staleness): the bound --staleness (dotted) caps it, and no "
                  "bar may stand in the gray region beyond it. ASP (cumulative share of pushes "
                  "with at most a given staleness): unbounded, so a long tail; the curve "
                  "reaches 100% at the stalest push." + oversub_note(runs)
                  + (" Those runs are marked * (a dedicated-PS run has W + S ranks). Staleness "
                     "counts steps, not seconds, but how far a worker falls behind the others "
                     "is set by their pace, which the scheduler decides while ranks time-share "
                     "the cores." if oversub_note(runs) else ""))


def crossover(runs, out_dir):
    runs = [r for r in runs if "hidden" in r.get("grid_point", {}) and r.get("step_time")]
    if len({r["model"]["params"] for r in runs}) < 3:
        return Skipped("Compute/communication crossover",
                       "no sweep over the MLP width (--hidden) with at least 3 widths "
                       "(scripts/sweep.sh crossover [--quick] --out this results folder adds "
                       "one)")
    batches = sorted({r.get("batch", 0) for r in runs})
    styles = dict(zip(batches, ["-", "--", "-.", ":"] * 4))
    fig, axes = plt.subplots(1, 2, figsize=(12.5, 4.6))
    series = defaultdict(list)
    for r in runs:
        series[(sr.backend_label(r), r.get("batch", 0), r["workers"])].append(r)
    for (label, batch, w), pts in sorted(series.items()):
        pts.sort(key=lambda r: r["model"]["params"])
        params = [r["model"]["params"] for r in pts]
        frac = [100 * r["step_time"]["comm_s"]
                / max(r["step_time"]["comm_s"] + r["step_time"]["compute_s"], 1e-12) for r in pts]
        over = pts[0].get("oversubscribed", False)
        name = f"{label} W={w} batch {batch}" + (f" ({pts[0]['np']} ranks)" if over else "")
        face = "white" if over else color_of(label)  # hollow: ranks time-share the cores
        axes[0].plot(params, frac, "o" + styles[batch], color=color_of(label),
                     markerfacecolor=face, label=name)
        axes[1].plot(params, [r["samples_per_s"] for r in pts], "o" + styles[batch],
                     color=color_of(label), markerfacecolor=face, label=name)
    axes[0].axhline(50, color="k", linestyle=":", linewidth=1, label="crossover (50%)")
    if any(r.get("oversubscribed") for r in runs):
        for ax in axes:
            ax.plot([], [], "o", color="gray", markerfacecolor="white",
                    label=f"hollow: more ranks than {max(r.get('cores', 0) for r in runs)} cores")
    axes[0].set_ylabel("communication / (communication + compute) (%)")
    axes[0].set_ylim(0, 100)
    axes[0].set_title("communication share of the step vs model size")
    axes[1].set_ylabel("throughput (samples/s, log scale)")
    axes[1].set_yscale("log")
    axes[1].set_title("throughput vs model size")
    for ax in axes:
        ax.set_xscale("log")
        ax.set_xlabel("model parameters (count, log scale)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    name = _save(fig, out_dir, "crossover.png")
    line = {"-": "solid", "--": "dashed", "-.": "dash-dot", ":": "dotted"}
    batch_note = ("(a larger batch means more compute per byte; batch " + ", ".join(
        f"{b} {line[st]}" for b, st in styles.items()) + ")" if len(batches) > 1 else
        f"(a larger batch means more compute per byte; here one batch size, {batches[0]})")
    return Figure(name, "Compute/communication crossover",
                  "The MLP's hidden width swept from small to very wide at a fixed number of "
                  "workers. Left: the backend's communication time (comm_s, the breakdown's narrow "
                  "bar: its exchanges, with the time they waited for the slowest peer and, on "
                  "time-shared cores, for a CPU) as a share of communication plus computation "
                  "time per step; above the dotted 50% line a backend spends longer in its "
                  "exchanges than computing, so no overlap can hide it: communication-bound. "
                  "For an MLP both the FLOPs (about 6 x parameters x batch) and the bytes (4 x "
                  "parameters per copy) grow with the width, so for wide models the ratio is set "
                  f"by the batch size {batch_note} and by "
                  "the link's bandwidth against the cores' FLOP rate; for narrow models the fixed "
                  "per-message latency weighs most, so communication can dominate the step "
                  "(whether it does depends on the backend: see the left panel). Right: "
                  "throughput (log scale)."
                  + oversub_note(runs) + busy_runs_note(runs) + _crossover_verdict(runs))


def _crossover_verdict(runs):
    """What the plot shows at the narrowest and the widest model: the backend with the highest
    throughput, and which backends spent over half the step communicating."""
    out = []
    sizes = sorted({r["model"]["params"] for r in runs})
    several_w = len({r["workers"] for r in runs}) > 1
    several_b = len({r.get("batch", 0) for r in runs}) > 1

    def name(r):  # a plotted series: the worker count and batch where the runs vary them
        return (sr.backend_label(r) + (f" W={r['workers']}" if several_w else "")
                + (f" batch {r.get('batch', 0)}" if several_b else ""))

    for params in (sizes[0], sizes[-1]):
        at = [r for r in runs if r["model"]["params"] == params]
        best = max(at, key=lambda r: r["samples_per_s"])
        slow = sorted((r for r in at if r["step_time"]["comm_s"] > r["step_time"]["compute_s"]),
                      key=lambda r: (sr.backend_label(r), r["workers"], r.get("batch", 0)))
        bound = list(dict.fromkeys(name(r) for r in slow))  # each series once
        out.append(f"at {params / 1e6:.2g}M parameters {name(best)} is fastest "
                   f"({best['samples_per_s']:,.0f} samples/s) and "
                   + (", ".join(bound) + (" communicate longer than they compute"
                                          if len(bound) > 1 else
                                          " communicates longer than it computes") if bound
                      else "every backend computes longer than it communicates"))
    return " Here: " + "; ".join(out) + "."


def bucket(runs, out_dir):
    runs = [r for r in runs if "bucket-mb" in r.get("grid_point", {}) and r.get("step_time")]
    if len({r["bucket_mb"] for r in runs}) < 2:
        return Skipped("Bucket size", "no sweep over --bucket-mb (scripts/sweep.sh bucket "
                       "[--quick] --out this results folder adds one)")
    workers = sorted({r["workers"] for r in runs})
    fig, axes = plt.subplots(1, len(workers), figsize=(6 * len(workers), 5.3), squeeze=False)
    for ax, w in zip(axes[0], workers):
        series = defaultdict(list)
        for r in runs:
            if r["workers"] == w:
                series[(sr.backend_label(r), bool(r.get("overlap")))].append(r)
        for (label, overlap), pts in sorted(series.items()):
            pts.sort(key=lambda r: r["bucket_mb"])
            # Hollow where the ranks time-share the cores, as in the other wall-clock plots:
            # the sweep's 4-worker panel (4 ranks on 2 cores) was drawn like the 2-worker one.
            over = pts[0].get("oversubscribed", False)
            ax.plot([r["bucket_mb"] for r in pts], [1e3 * r["step_time"]["total_s"] for r in pts],
                    "o-" if overlap else "s--", color=color_of(label),
                    markerfacecolor="white" if over else color_of(label),
                    label=f"{label}, overlap {'on' if overlap else 'off'}"
                    + (f" ({pts[0]['np']} ranks)" if over else ""))
        if any(r.get("oversubscribed") for r in runs if r["workers"] == w):
            ax.plot([], [], "o", color="gray", markerfacecolor="white",
                    label=f"hollow: more ranks than {max(r.get('cores', 0) for r in runs)} cores")
        ax.set_xscale("log", base=2)
        sizes = sorted({r["bucket_mb"] for pts in series.values() for r in pts})
        # at the sizes run: matplotlib's log2 ticks (2, 8, 32, ...) missed 1, 16 and 512
        ax.set_xticks(sizes[::max(1, -(-len(sizes) // 10))])
        ax.xaxis.set_minor_locator(matplotlib.ticker.NullLocator())
        ax.xaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _p: f"{v:g}"))
        label_axes(ax, "bucket size (MiB, log scale)", "time per step (ms)", f"{w} workers")
        # below the axes: step times that zigzag with the bucket size leave 'best' no free spot
        ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=2)
    name = _save(fig, out_dir, "bucket.png")
    model_mb = max(r["model"]["bytes"] for r in runs) / 2**20
    return Figure(name, "Step time vs bucket size",
                  f"Gradients are synchronized in buckets of --bucket-mb MiB (the model is "
                  f"{model_mb:.0f} MiB; a bucket at least that large means one sync after the "
                  "whole backward pass). Small buckets pay per-message latency; with overlap on "
                  "(solid) a bucket's sync runs while backward continues, with overlap off "
                  "(dashed) all syncs start after backward." + oversub_note(runs)
                  + (" Hollow markers are those runs." if oversub_note(runs) else "")
                  + busy_runs_note(runs))
