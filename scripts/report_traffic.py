"""The report's figures of bytes on the wire (scripts/report.py): bytes per rank per step against
the theory, and the bus bandwidth of `starring bench`. Same conventions as report_plots.py (Figure
or Skipped, Agg backend)."""
import math
from collections import defaultdict

import matplotlib.ticker
import matplotlib.pyplot as plt

import starring_results as sr
from report_plots import (Figure, Skipped, _hollow_legend, _log2_workers, _save, _series,
                          _spread_bars, bench_color, color_of, host_cpus, label_axes,
                          model_label, oversub_note, repeat_note)

MB = 1e6


def bytes_per_rank(runs, out_dir):
    runs = [r for r in runs if r.get("bytes_per_step") and r.get("model", {}).get("bytes")]
    if not runs:
        return Skipped("Bytes per rank per step", "no run recorded bytes per step")
    servers = [r for r in runs if sr.is_dedicated_ps(r)]
    ncols = 2 if servers else 1
    fig, axes = plt.subplots(1, ncols, figsize=(6.2 * ncols, 4.6), squeeze=False)
    ax = axes[0][0]
    wmax = max(r["workers"] for r in runs)
    ws = [w / 10 for w in range(10, 10 * wmax + 1)]
    if len(servers) < len(runs):  # a ring, mpi, nccl or co-located run: its theory line
        ax.plot(ws, [2 * (w - 1) / w for w in ws], "k-", linewidth=1,
                label="theory ring / co-located: 2(N-1)/N")
    if servers:
        ax.plot(ws, [1.0] * len(ws), "k--", linewidth=1, label="theory dedicated PS worker: 1")
    series = _series(runs, apart=False)  # bytes / D: the same for runs that differ otherwise
    for i, (label, pts) in enumerate(series.items()):
        shift = 2 ** (0.04 * (i - (len(series) - 1) / 2))  # side by side, not on top
        for r in pts.values():
            d = sr.wire_bytes(r)
            # mpi's and nccl's points are the theory itself: on the line, read as a match
            opaque = " (the theory, not measured)" if r.get("backend") in OPAQUE else ""
            ax.plot(r["workers"] * shift, sr.busiest(r, "worker_sent") / d, "o",
                    color=color_of(label), label=label + opaque)
            ax.plot(r["workers"] * shift, sr.busiest(r, "worker_recv") / d, "x",
                    color=color_of(label))
    _dedupe_legend(ax)
    _log2_workers(ax, sorted({r["workers"] for r in runs}))
    label_axes(ax, "workers N", "bytes per worker per step / D",
               "the busiest worker (o sent, x received)")
    if servers:
        ax = axes[0][1]
        for s in sorted({r["num_servers"] for r in servers}):
            ax.plot(ws, [w / s for w in ws], "k-", linewidth=1, alpha=0.3 + 0.7 / s,
                    label=f"theory server, S={s}: W/S")
        labels = list(dict.fromkeys(sr.backend_label(r) for r in servers))
        for r in servers:
            d = sr.wire_bytes(r)
            label = sr.backend_label(r)
            # side by side like the left panel: ps-bsp/ssp/asp sat exactly under ps-1
            x = r["workers"] * 2 ** (0.04 * (labels.index(label) - (len(labels) - 1) / 2))
            ax.plot(x, sr.busiest(r, "server_recv") / d, "o",
                    color=color_of(label), label=f"{label} (S={r['num_servers']})")
            ax.plot(x, sr.busiest(r, "server_sent") / d, "x",
                    color=color_of(label))
        _dedupe_legend(ax)
        _log2_workers(ax, sorted({r["workers"] for r in servers}))
        label_axes(ax, "workers W", "bytes per server per step / D",
                   "the busiest dedicated server (o received, x sent)")
    name = _save(fig, out_dir, "bytes_per_rank.png")
    ds = sorted({sr.wire_bytes(r) for r in runs})
    return Figure(name, "Bytes per rank per step vs theory",
                  "Bytes each rank sent and received per optimizer step, measured by the "
                  "backends, divided by D = the gradient bytes on the wire (model parameters x 4 "
                  "bytes, halved with fp16/bf16 compression; here D = "
                  + ", ".join(f"{d / MB:.2f} MB" for d in ds) + "). Lines are the theory: ring, "
                  "MPI and co-located PS move 2(N-1)/N x D per rank; with dedicated servers a "
                  "worker pushes D and pulls D, and each of S servers receives and sends W x D/S "
                  "(the busiest worker and server are drawn: a mean hides unbalanced shards, "
                  "as with --ps-partition tensor, co-located or not). "
                  "Independent of the number of cores." + _deviation_note(runs))


def _deviations(runs):
    """(|dev|, dev, what, run, measured - theory in bytes, theory) for every measured count
    with a theory."""
    worst = []
    for r in runs:
        th = sr.theory_bytes(r)
        for what, meas, theory in (("worker sent", sr.busiest(r, "worker_sent"),
                                    th["worker"]),
                                   ("worker received", sr.busiest(r, "worker_recv"),
                                    th["worker"]),
                                   ("server received", sr.busiest(r, "server_recv"),
                                    th["server"]),
                                   ("server sent", sr.busiest(r, "server_sent"),
                                    th["server"])):
            dev = sr.deviation_pct(meas, theory)
            if dev is not None and theory:
                worst.append((abs(dev), dev, what, r, meas - theory, theory))
    return worst


def _where(w, worst):
    """Where the largest deviation is: the count, the run, its model where the counts are of
    several, and the bytes it is off by. 'largest: worker sent, ps-1 W=2' named one of the
    quickstart's three ps-1 W=2 runs (the main job's and two crossover widths'), and not that
    the 0.03% was the parameter server's 32-byte chunk header on a 106,024-byte model."""
    _, _, what, r, excess, theory = w
    several = len({x[3].get("model", {}).get("bytes") for x in worst}) > 1
    model = model_label(r).split(" (")[0] if several else ""
    model = f" {model}" if model else ""
    off = f"{excess:+,.0f}" if abs(excess) >= 10 else f"{excess:+.2g}"  # means: +0.12 B
    return f"{what}, {sr.backend_label(r)} W={r['workers']}{model}: {off} B of {theory:,.0f}"


# Backends whose bytes are not counted but set to the theory (Open MPI's and NCCL's transports
# are opaque to StarRing; `bench` marks their rows bytes_measured: false).
OPAQUE = ("mpi", "nccl")


def _tensor_partitioned(r):
    return (r.get("config", {}).get("ps-partition") or r.get("ps_partition")) == "tensor"


def _deviation_note(runs):
    """The caption's sentence on measured bytes against the theory: the largest deviation with
    where it is when it reaches 0.05%, else the bound every count stays within (the largest
    deviation, rounded up to two digits: 'within 0.05%' claimed more than was measured). Runs
    with --ps-partition tensor are unbalanced by design (whole tensors per server: the default
    MLP's first weight is 85% of it), so they get a sentence of their own saying so, instead
    of a bare 'Largest deviation: +99.7%' that also hid how close the balanced runs were."""
    opaque = sorted({r.get("backend") for r in runs if r.get("backend") in OPAQUE})
    runs = [r for r in runs if r.get("backend") not in OPAQUE]
    tensor = [r for r in runs if _tensor_partitioned(r)]
    note = _balanced_note(_deviations([r for r in runs if not _tensor_partitioned(r)]))
    if opaque:  # their 0% deviations measured nothing: 'Every measured count' counted them
        note += (f" The {' and '.join(opaque)} runs report the theory itself (the library's "
                 "transport is opaque to StarRing): their points sit on the line by "
                 "construction and are not counted here.")
    worst = _deviations(tensor)
    if worst:
        top, dev, what, r = max(worst, key=lambda w: w[0])[:4]
        note += (f" Runs with --ps-partition tensor place whole tensors on the servers, so "
                 "their shards are unbalanced by design and the theory (balanced shards) is "
                 f"not theirs to match: their busiest rank is {dev:+.1f}% off it ({what}, "
                 f"{sr.backend_label(r)} W={r['workers']}).")
    return note


def _balanced_note(worst):
    if not worst:
        return ""
    top, dev = max(worst, key=lambda w: w[0])[:2]
    where = _where(max(worst, key=lambda w: w[0]), worst)
    if top >= 0.05:
        return f" Largest deviation from theory: {dev:+.1f}% ({where})."
    if top == 0:
        return f" Every measured count equals the theory (all {len(worst)})."
    step = 10.0 ** (math.floor(math.log10(top)) - 1)  # two significant digits, rounded up
    bound = math.ceil(top / step - 1e-6) * step
    digits = max(0, -round(math.log10(step)))
    text = f"{bound:.{digits}f}".rstrip("0").rstrip(".")
    return (f" Every measured count matches the theory within {text}% (all "
            f"{len(worst)}; largest: {where}).")


def _dedupe_legend(ax):
    handles, labels = ax.get_legend_handles_labels()
    seen = {}
    for h, l in zip(handles, labels):
        seen.setdefault(l, h)
    ax.legend(seen.values(), seen.keys(), fontsize=8)


def busbw(bench, out_dir):
    rows = [b for b in bench if "size" in b and b.get("busbw_GBps") is not None]
    if not rows:
        return Skipped("Bus bandwidth vs message size", "no `starring bench` rows (bench.jsonl)")
    kinds = sorted({b["bench"] for b in rows})
    fig, axes = plt.subplots(1, len(kinds), figsize=(6.4 * len(kinds), 5.6), squeeze=False)
    for ax, kind in zip(axes[0], kinds):
        series = defaultdict(list)
        memcpy = []
        for b in rows:
            if b["bench"] != kind:
                continue
            key = _bench_label(b)
            series[key].append(b)
            if b.get("memcpy_GBps"):
                memcpy.append((bool(b.get("oversubscribed")), b["memcpy_GBps"]))
        styles = {}
        any_over = any_busy = False
        for key, pts in sorted(series.items(), key=lambda kv: (kv[1][0].get("workers", 0), kv[0])):
            pts.sort(key=lambda b: b["size"])
            workers = pts[0].get("workers", pts[0]["np"])
            style = styles.setdefault(workers, ["-", "--", ":", "-."][len(styles) % 4])
            color = bench_color(pts[0])
            over = bool(pts[0].get("oversubscribed"))
            any_over |= over
            # a pass on a busy host timed the wait for a CPU: faded and named, so it does not
            # read as the backend's rate (the cost model does not rank constants fitted on it)
            busy = any(sr.host_busy(b) for b in pts)
            any_busy |= busy
            ax.plot([b["size"] for b in pts], [b["busbw_GBps"] for b in pts], style,
                    marker="s" if "(of np" in key else "^" if pts[0].get("compress") else "o",
                    markersize=(4 if over else 3) + (2 if pts[0].get("compress") else 0),
                    color=color, markerfacecolor="white" if over else color,
                    alpha=BUSY_ALPHA if busy else 1.0, linewidth=1.0 if busy else 1.5,
                    label=key + (" [busy]" if busy else ""))
            _spread_bars(ax, [b["size"] for b in pts], pts, [b["busbw_GBps"] for b in pts],
                         "repeat_busbw_GBps", color)
        if memcpy:
            # A job with more ranks than cores measures its memcpy time-shared (11 against
            # 34 GB/s here): leave those out when the others can give the machine's rate.
            memcpy = [v for o, v in memcpy if not o] or [v for _, v in memcpy]
            mean = sum(memcpy) / len(memcpy)
            top = max(b["busbw_GBps"] for pts in series.values() for b in pts)
            if mean <= 10 * top:  # the axis is log: a decade above the data still reads
                ax.axhline(mean, color="k", linestyle=":", label=f"memcpy {mean:.1f} GB/s")
            else:  # a line far above the data would flatten it: name it instead
                ax.plot([], [], " ", label=f"memcpy {mean:.1f} GB/s (off the scale)")
        _hollow_legend(ax, any_over)
        if any_busy:
            ax.plot([], [], "-", color="gray", alpha=BUSY_ALPHA, linewidth=1.0,
                    label="faded, [busy]: host busy (caption)")
        # Log: the rates span decades (0.3 GB/s time-shared beside 12 GB/s on 2 ranks), and on
        # a linear axis every time-shared job lay flat along zero.
        if all(b["busbw_GBps"] > 0 for pts in series.values() for b in pts):
            ax.set_yscale("log")
            ax.yaxis.set_major_locator(matplotlib.ticker.LogLocator(base=10, subs=(1, 2, 3, 5)))
            ax.yaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _p: f"{v:g}"))
            # under a decade matplotlib labels minor ticks too, as "6 x 10^0"
            ax.yaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
        else:
            ax.set_ylim(bottom=0)
        size_axis(ax, [b["size"] for pts in series.values() for b in pts])
        label_axes(ax, "message size (bytes, log scale)", "bus bandwidth (GB/s, log scale)"
                   if ax.get_yscale() == "log" else "bus bandwidth (GB/s)",
                   f"{kind} (starring bench)")
        # below the axes: inside, it covered the curves of whichever corner it took
        ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=2)
    name = _save(fig, out_dir, "busbw.png")
    return Figure(name, "Bus bandwidth vs message size",
                  "From `starring bench`: for all-reduce, busbw = algbw x 2(n-1)/n with algbw = "
                  "message bytes / time, the rate comparable across rank counts (nccl-tests' "
                  "definition); for parameter-server push+pull, busbw is the rate through the "
                  "busiest link in one direction: a dedicated server's, algbw x W/S (a worker's, "
                  "algbw, when W < S), and co-located every rank's, algbw x 2(W-1)/W, as the "
                  "ring's. For scale, the legend gives this machine's memcpy "
                  "bandwidth measured in the same run (a dotted line when it fits the axis), the "
                  "mean over the bench jobs with no more ranks than cores where there are any. "
                  "Color: backend; line style: number of workers. \"(of np=N)\": the operation "
                  "ran on W of the job's N ranks, beside a parameter-server run with the other "
                  "ranks as servers." + repeat_note(rows, "repeat_busbw_GBps") + oversub_note(
                      [dict(np=b["np"], cores=b.get("cores", 0),
                            oversubscribed=b.get("oversubscribed", False)) for b in rows])
                  + (" Hollow markers are those jobs." if any(b.get("oversubscribed")
                                                             for b in rows) else "")
                  + busy_note(rows) + compress_note(rows))


def compress_note(rows):
    """The busbw caption's sentence for `bench --compress` rows: their size, algbw and busbw
    count the float32 data while half of it crossed the wire, so their line stood at twice the
    rate of the bytes sent, beside float32 series, with nothing to say so."""
    kinds = sorted({b["compress"] for b in rows if b.get("compress")})
    if not kinds:
        return ""
    return (f" Series marked {'/'.join(kinds)} (triangles, `bench --compress`) send the data as "
            "16-bit floats: their size, algbw and busbw count the float32 data reduced, while "
            "half as many bytes crossed the wire, so their busbw is twice the rate of the bytes "
            "sent (bytes_sent_per_rank in bench.jsonl).")


BUSY_ALPHA = 0.4


def busy_note(rows):
    """The busbw caption's sentence for bench passes on a busy host (sr.host_busy): a 2-rank
    pass beside other processes on 1.46 of 2 CPUs was drawn as a plain solid line, 50 times
    slower than the next pass at 64 KiB, with nothing to say why."""
    busy = [b for b in rows if sr.host_busy(b)]
    if not busy:
        return ""
    nps = sorted({b["np"] for b in busy})
    span = sr.span_text([b["host_other_cpus"] for b in busy])
    return (f" Faded lines, marked [busy] in the legend, are bench passes (np "
            f"{', '.join(map(str, nps))}) during which other processes kept {span} of "
            f"{host_cpus(busy)} busy (host_other_cpus in "
            "bench.jsonl), so the ranks and those processes outnumbered the cores: their times "
            "include waiting for a CPU, not only the transfer, and the cost model does not rank "
            "constants fitted on them. Rerun them on a quiet machine.")


def _bench_label(b):
    """"ring W=4", "ps W=4 S=1", "ps-colocated W=4"; "(of np=5)" when the op ran on a subset
    of a larger job (the bench's NAME@N form)."""
    name, _, sub = b["backend"].partition("@")
    if b.get("compress"):  # --compress: half the bytes on the wire, a series of its own
        name += f" {b['compress']}"
    label = f"{name} W={b.get('workers', b['np'])}"
    if isinstance(b.get("servers"), int) and b["servers"] > 0:
        label += f" S={b['servers']}"
    return label + (f" (of np={b['np']})" if sub else "")


def size_axis(ax, sizes):
    """A log2 axis of message sizes ticked at the sizes measured (every k-th where there are
    more than 10): matplotlib's own ticks fell every other power of 2, between the points of a
    -f 4 bench (64K..16M measured, 128K, 512K, 2M, 8M labelled)."""
    ax.set_xscale("log", base=2)
    sizes = sorted(set(sizes))
    ax.set_xticks(sizes[::max(1, math.ceil(len(sizes) / 10))])
    ax.xaxis.set_minor_locator(matplotlib.ticker.NullLocator())
    ax.xaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(_size_label))


def _size_label(x, _pos=None):
    for unit, div in (("G", 2**30), ("M", 2**20), ("K", 2**10)):
        if x >= div:
            return f"{x / div:g}{unit}"
    return f"{x:g}"
