"""The overlap part of StarRing's report: `starring bench --mode overlap` rows (bench.jsonl,
"bench": "overlap"), overlap % against message size, one panel per compute kind. Same
conventions as report_plots.py (Figure or Skipped, Agg backend)."""
from collections import defaultdict

import matplotlib.pyplot as plt

from report_plots import (Figure, Skipped, _hollow_legend, _save, bench_color, label_axes,
                          oversub_note)
from report_traffic import _size_label, size_axis

KINDS = ("sleep", "busy", "serial")
KIND_TITLE = {"sleep": "sleep (host idle, as under a GPU kernel)",
              "busy": "busy (CPU compute on the training thread)",
              "serial": "serial (the control: compute, then post)"}


def overlap_rows(bench):
    return [b for b in bench if b.get("bench") == "overlap" and "overlap_pct" in b]


def _label(b):
    name, _, sub = b["backend"].partition("@")
    label = f"{name} W={b.get('workers', b['np'])}"
    if isinstance(b.get("servers"), int) and b["servers"] > 0:
        label += f" S={b['servers']}"
    if b.get("sync_overlap") is False:
        label += " --overlap off"
    return label + (f" (of np={b['np']})" if sub else "")


def overlap(bench, out_dir):
    title = "Communication/computation overlap"
    rows = overlap_rows(bench)
    if not rows:
        return Skipped(title, "no `starring bench --mode overlap` rows (bench.jsonl; the bench "
                       "pass of scripts/sweep.sh bucket [--quick] --out this results folder adds "
                       "them)")
    kinds = [k for k in KINDS if any(b["compute"] == k for b in rows)]
    kinds += sorted({b["compute"] for b in rows} - set(kinds))
    fig, axes = plt.subplots(1, len(kinds), figsize=(5.2 * len(kinds), 4.4), squeeze=False)
    for ax, kind in zip(axes[0], kinds):
        series = defaultdict(list)
        for b in rows:
            if b["compute"] == kind:
                series[_label(b)].append(b)
        for key, pts in sorted(series.items()):
            pts.sort(key=lambda b: b["size"])
            # hollow: a job with more ranks than cores (its compute and communication threads
            # time-share the cores, so its overlap is the machine's as much as the backend's)
            over = any(b.get("oversubscribed") for b in pts)
            color = bench_color(pts[0])
            ax.plot([b["size"] for b in pts], [b["overlap_pct"] for b in pts], "o-",
                    markersize=4 if over else 3, color=color,
                    markerfacecolor="white" if over else color, label=key)
        _hollow_legend(ax, any(b.get("oversubscribed") for pts in series.values() for b in pts))
        ax.set_ylim(-3, 103)
        size_axis(ax, [b["size"] for pts in series.values() for b in pts])
        label_axes(ax, "message size (bytes, log scale)", "overlap (%)", KIND_TITLE.get(kind, kind))
        ax.legend(fontsize=8)
    name = _save(fig, out_dir, "overlap.png")
    return Figure(name, title,
                  "From `starring bench --mode overlap`: each backend driven through GradientSync "
                  "as the trainer drives it; t_comm = the sync alone, t_compute = the compute "
                  "alone (calibrated to t_comm), t_total = post, compute, wait, and overlap = "
                  "100 x (1 - (t_total - t_compute) / t_comm) clamped to 0..100 (the OSU "
                  "micro-benchmarks' formula). Near 100 % under sleep: the backend's "
                  "communication thread progresses on its own; busy: what is left when the "
                  "compute needs the cores; serial must stay near 0 % (the measure can fail); "
                  "mpi-nothread is one MPI_Iallreduce with no thread (osu_iallreduce's pattern)."
                  + _serial_note(rows)
                  + oversub_note([dict(np=b["np"], cores=b.get("cores", 0),
                                       oversubscribed=b.get("oversubscribed", False))
                                  for b in rows])
                  + (" Hollow markers are those jobs." if any(b.get("oversubscribed") for b in rows)
                     else ""))


SERIAL_NOISE_PCT = 10.0


def _serial_note(rows):
    """The caption sentence for a serial control that did not stay near 0 %: the bucket sweep of
    2026-12-01 (other processes on 1.0-1.5 of the 2 CPUs) drew ring's serial at 23 % for 16M
    under a caption saying it must stay near 0 %, with nothing to say how far to trust the rest."""
    serial = [b for b in rows if b["compute"] == "serial"]
    worst = max(serial, key=lambda b: b["overlap_pct"], default=None)
    if worst is None or worst["overlap_pct"] <= SERIAL_NOISE_PCT:
        return ""
    load = [b["host_other_cpus"] for b in rows
            if isinstance(b.get("host_other_cpus"), (int, float))]
    return (f" Here the serial control reached {worst['overlap_pct']:.0f} % ({_label(worst)}, "
            f"{_size_label(worst['size'])}): the measure misread by that much in this pass, so "
            "differences of that size between backends or sizes are noise"
            + (f" (other processes kept up to {max(load):.1f} of the host's "
               f"{max(b.get('cores', 0) for b in rows)} CPUs busy during it)"
               if load and max(load) >= 0.5 else "")
            + ".")
