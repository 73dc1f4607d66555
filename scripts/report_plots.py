"""The plots of StarRing's report (scripts/report.py). Each plot function takes the loaded
results and returns a Figure (file name, title, caption) after saving the PNG, or a Skipped
(title, reason) when the results hold no data for it. matplotlib's Agg backend, no display.
Here: what the plot modules share (Figure and Skipped, colors, caption notes, grouping runs,
axes, saving). The figures: report_scaling.py (throughput, efficiency, step-time breakdown),
report_convergence.py (loss and accuracy vs wall time), report_traffic.py (bytes per rank, bus
bandwidth), report_overlap.py, report_studies.py (straggler, staleness, crossover, bucket size),
report_faults.py, report_recovery.py, report_model.py (the cost model).
"""
import math
import os
from collections import defaultdict
from dataclasses import dataclass

import matplotlib

matplotlib.use("Agg")
import matplotlib.ticker  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402

import starring_results as sr  # noqa: E402

DPI = 110


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


def host_cpus(jobs):
    """'the host's 2 CPUs' for the busy-host notes, from the jobs' own core counts: 'each host's
    2 CPUs' for several hosts of one count, 'the hosts' 2-4 CPUs' where counts differ. The notes
    gave the folder's largest count: a run on a 2-core host beside a sweep from a 4-core one was
    captioned 'of the host's 4 CPUs'."""
    cores = sorted({j["cores"] for j in jobs if isinstance(j.get("cores"), int)
                    and j["cores"] > 0})
    if not cores:
        return "the host's CPUs"
    if len(cores) > 1:
        return f"the hosts' {cores[0]}-{cores[-1]} CPUs"
    hosts = {j["host"] for j in jobs if j.get("host")}  # a bench row has none
    return ("each host's" if len(hosts) > 1 else "the host's") + f" {cores[0]} CPUs"


def busy_runs_note(runs):
    """The caption sentence for wall-clock plots of training runs made on a busy host
    (starring_results.host_busy: other processes' CPUs and the job's ranks more than the cores).
    The busbw plot fades such bench passes and says so, the summary table has a note, but the
    throughput, efficiency and breakdown captions said nothing: the quickstart beside another
    build (1.0-1.6 of 2 CPUs busy in every run, 2026-12-02) drew ring W=2 at 125% of linear with
    only 'hollow: more ranks than cores', which 2-rank runs are not."""
    busy = {r.get("run_id", id(r)): r for r in runs if sr.host_busy(r)}
    if not busy:
        return ""
    every = {r.get("run_id", id(r)) for r in runs}
    span = sr.span_text([r["host_other_cpus"] for r in busy.values()])
    if len(busy) < len(every):
        which = f"{len(busy)} of these {len(every)} runs"
    else:  # 'All 1 runs ran' for a single run
        which = f"All {len(busy)} runs" if len(busy) > 1 else "The run"
    its, them = ("their", "them") if len(busy) > 1 else ("its", "it")
    return (f" {which} ran while other processes kept {span} of {host_cpus(busy.values())} "
            "busy, so that the job's ranks and that load outnumbered the cores (host_other_cpus "
            f"in runs.jsonl): {its} wall-clock figures include waiting for a CPU, not only the "
            f"backend's work; rerun {them} on a quiet machine.")


def _hollow_note(runs):
    return (" Hollow markers are those runs (a dedicated-PS run has W + S ranks)."
            if any(r.get("oversubscribed") for r in runs) else "")


def repeat_note(runs, field="repeat_samples_per_s"):
    """The caption sentence for plots of repeated configurations."""
    counts = sorted({len(r[field]) for r in runs if r.get(field)})
    if not counts:
        return ""
    n = f"{counts[0]}-{counts[-1]}" if len(counts) > 1 else str(counts[0])
    even = any(c % 2 == 0 for c in counts)  # the lower median: 2 runs showed the slower alone
    return (f" Points run {n} times show the median run"
            + (" (of an even number of runs, the slower of the middle two)" if even else "")
            + "; the bars span the fastest and the slowest.")


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


def _series(runs, apart=True):
    """series label -> {workers: run}. With `apart`, the labels of series_labels: runs of one
    backend label at one worker count that differ (two sweeps, another knob) are series of their
    own; without, the last such run wins (bytes / D, which they share)."""
    labels = series_labels(runs) if apart else {}
    series = defaultdict(dict)
    for r in runs:
        series[labels.get(id(r), sr.backend_label(r))][r["workers"]] = r
    return series


def series_labels(runs):
    """id(run) -> the name of its series in the scaling plots: its backend label
    (starring_results.backend_label), with what tells it apart where runs of that label share a
    worker count: the sweep ('ring (main)', 'ring (mine)': two sweeps in one folder) when that
    suffices, else the settings that differ ('ring accum=4': a grid over a knob no study plot
    takes). One name for both drew only the last run at each count: the other sweep's points
    were dropped without a word while its 1-worker run still set the linear yardstick."""
    groups = defaultdict(list)
    for r in runs:
        groups[sr.backend_label(r)].append(r)
    out = {}
    for label, rs in groups.items():
        by_w = defaultdict(list)
        for r in rs:
            by_w[r["workers"]].append(r)
        clashes = [g for g in by_w.values() if len(g) > 1]
        keys = [k for k in ["sweep"] + sorted({k for r in rs for k in _settings(r)})
                if any(len({_setting(r, k) for r in g}) > 1 for g in clashes)]
        if "sweep" in keys and all(len({_setting(r, "sweep") for r in g}) == len(g)
                                   for g in clashes):
            keys = ["sweep"]
        for r in rs:
            parts = [_setting(r, k) if k == "sweep" else f"{k}={_setting(r, k)}" for k in keys]
            out[id(r)] = label + (f" ({' '.join(parts)})" if parts else "")
    return out


def _settings(r):
    return set(r.get("config") or {}) | set(r.get("grid_point") or {})


def _setting(r, key):
    if key == "sweep":
        return str(r.get("sweep"))
    value = (r.get("grid_point") or {}).get(key, (r.get("config") or {}).get(key))
    return "-" if value is None else str(value)
