"""The cost-model section of StarRing's report (scripts/report.py): predicted vs measured step
time, and step time extrapolated to 256 workers, from scripts/cost_model.py calibrated on the
folder's bench rows. Same conventions as report_plots.py (Figure or Skipped, Agg backend)."""
import html

import matplotlib.pyplot as plt
import matplotlib.ticker

import cost_model as cm
import cost_model_runs as cmr
import cost_model_cli as cli
from report_plots import (Figure, Skipped, _log2_workers, _save, color_of, label_axes,
                          log_tick_labels)

WORKERS = [2, 4, 8, 16, 32, 64, 128, 256]
# A reference network for the second row of the extrapolation: 25 Gb/s Ethernet, 5 us per message.
REF_NET = {"alpha_us": 5.0, "bandwidth_gbps": 25.0}
SERIES_KINDS = ("ring", "ps", "ps-colocated")
STYLE = {"ring": ("-", "o"), "ps S=1": ("--", "v"), "ps S=W/2": ("-.", "^"),
         "ps co-located": (":", "s")}
# Fixed colors: color_of's shared cycle of 10 gave two of these series the same color once the
# other plots had used up its first labels (ring and ps co-located both blue).
SERIES_COLOR = {"ring": "#1f77b4", "ps S=1": "#ff7f0e", "ps S=W/2": "#9467bd",
                "ps co-located": "#2ca02c"}


NO_COMPUTE = "no 1-worker run (or bench-model row) gives a compute time"


def analyse(runs, bench):
    """(fits, reference fits, predictions, compute times) or a reason string."""
    if not any("size" in b for b in bench):
        return "no `starring bench` rows (bench.jsonl) to calibrate from"
    fits = cm.calibrate(bench, observed=cmr.observed(runs))
    if not fits:
        return "no backend has bench rows at two or more sizes"
    ref = cm.reference(fits)
    computes = cmr.compute_times(runs, bench)
    return fits, ref, cmr.check_runs(runs, bench, computes), computes


def _consts_caption(ref, kinds=None):
    ref = {k: f for k, f in ref.items() if kinds is None or k in kinds}
    return "; ".join(f"{k} ({f.consts.source}, bench np={f.ranks}"
                     f"{', oversubscribed' if f.oversubscribed else ''}"
                     f"{', on a busy host' if f.host_busy is not None else ''}"
                     f"): {f.consts.describe()}, "
                     + _fit_error(f) + "".join(f"; CAVEAT: {c}" for c in cm.used_caveats(f))
                     for k, f in sorted(ref.items()))


def _fit_error(f):
    """A refit on one bench size passes through it: its 'fit error median 0%, max 0%' read as
    a perfect fit where nothing was tested (the wide MLP's buckets lie beyond the bench's
    largest message, so its 1/beta comes from that one size)."""
    if len(f.sizes or []) == 1:
        return f"from the one bench size {_size(f.sizes[0])}: no fit error to report"
    spread = cm.fit_spread(f)
    if spread is None:  # as many sizes as fitted constants: the line passes through them all
        return f"from {len(f.sizes)} bench sizes, as many as its constants: no fit error to report"
    return (f"fit error median {100 * spread:.0f}% (sizes not fitted through), max "
            f"{100 * f.max_rel_err:.0f}%")


def _size(b):
    for unit, div in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if b >= div:
            return f"{b / div:g} {unit}"
    return f"{b:g} B"


def predicted_vs_measured(runs, bench, out_dir):
    title = "Cost model: predicted vs measured step time"
    got = analyse(runs, bench)
    if isinstance(got, str):
        return Skipped(title, got)
    _, ref, preds, computes = got
    if not computes:  # no T_compute: no run can be predicted, whatever the bench rows
        return Skipped(title, NO_COMPUTE)
    unpredicted = _unpredicted(runs, preds)
    # Injected stragglers add tens of ms the model has no term for: drawn, they stretched the
    # axes 40-fold and squeezed every modeled run into one corner. They stay in the table.
    slowed = {r.get("run_id") for r in runs if r.get("straggler")}
    left_off = sum(p["run_id"] in slowed for p in preds)
    preds = [p for p in preds if p["run_id"] not in slowed]
    if not preds:
        return Skipped(title, "no successful training run of a calibrated backend to compare with")
    fig, ax = plt.subplots(figsize=(7.2, 5.6))
    seen = set()
    for p in preds:
        c = color_of(p["label"])
        x = 1e3 * p["measured"]
        ax.plot([x, x], [1e3 * p["lower"], 1e3 * p["upper"]], "-", color=c, linewidth=1)
        face = c if p["expected"] else "none"
        ax.plot(x, 1e3 * p["upper"], "o", color=c, markerfacecolor=face,
                label=p["label"] if p["label"] not in seen else None)
        ax.plot(x, 1e3 * p["lower"], "_", color=c, markersize=9)
        seen.add(p["label"])
    vals = [1e3 * v for p in preds for v in (p["measured"], p["lower"], p["upper"]) if v > 0]
    lo, hi = min(vals) / 1.5, max(vals) * 1.5
    ax.plot([lo, hi], [lo, hi], "k:", linewidth=1, label="y = x")
    ax.plot([], [], "o", color="gray", label="circle: no overlap (T_compute + T_comm)")
    ax.plot([], [], "_", color="gray", markersize=9,
            label="dash: perfect overlap (max of the two)")
    ax.plot([], [], "o", color="gray", markerfacecolor="none", label="hollow: oversubscribed / not modeled")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(lo, hi)
    ax.set_ylim(lo, hi)
    digits = "23456789" if hi / lo < 10 else "25"  # under a decade: label every minor tick
    for axis in (ax.xaxis, ax.yaxis):
        axis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _p: f"{v:g}"))
        axis.set_minor_formatter(matplotlib.ticker.FuncFormatter(
            lambda v, _p: f"{v:g}" if f"{v:g}".lstrip("0.")[:1] in digits else ""))
    label_axes(ax, "measured step time (ms, log scale)", "predicted step time (ms, log scale)",
               "cost model vs measurement (below y = x: slower than predicted)")
    ax.legend(fontsize=8)
    name = _save(fig, out_dir, "cost_model_check.png")
    good = [p for p in preds if p["expected"] and p["workers"] > 1]
    within = sum(p["within"] for p in good)
    stat = (f" Of the {len(good)} runs with W > 1 that fit on the cores, {within}"
            f" {'lies' if within == 1 else 'lie'} within [perfect overlap, no overlap] +-10%; the no-overlap prediction misses by "
            f"at most {100 * max(abs(p['err']) for p in good):.0f}%"
            + cmr.doubt_clause(good) + "." if good else "")
    return Figure(name, title,
                  "Each training run's measured mean step time against the alpha-beta model "
                  "(scripts/cost_model.py): circle = T_compute + T_comm (no overlap, the upper "
                  "bound), dash = max(T_compute, T_comm) (perfect overlap, the lower bound), "
                  "T_compute = the measured 1-worker compute time of the model, T_comm = the "
                  "backend's formula per gradient bucket with the constants fitted on this "
                  "folder's bench rows: alpha from all sizes, 1/beta refit on the sizes within "
                  "8x of the run's largest bucket (the table above lists them per run; over all "
                  f"sizes: {_consts_caption(ref)}). Points on the dotted line are "
                  "exact; hollow circles are runs the model does not claim to hold for (more "
                  "ranks than cores time-share the CPU; stragglers, ASP/SSP)."
                  + _one_worker_note(preds) + " Even with ranks = cores each rank runs a compute and a communication thread, "
                  "which then share the cores (with any other user's processes); the bench times "
                  "collectives alone, so training's synchronization can take several times the "
                  "bench's (the table's comm column: predicted / measured)." + stat
                  + (f" {left_off} runs with an injected straggler (--straggler) are left off "
                     "the plot: the model has no term for the delay; the table lists them."
                     if left_off else "") + unpredicted)


def _one_worker_note(preds):
    """The caption's sentence on the 1-worker runs, which set T_compute: their scatter is the
    compute time's run-to-run noise unless their step holds more than compute. The quickstart's
    co-located and 1-server PS runs at W=1 took 4.5 ms against 2.1-2.6 predicted (over 2 ms of
    each step waiting on the push, the update and the pull), which the caption called noise."""
    ones = [p for p in preds if p["workers"] == 1]
    slow = [p for p in ones if p["measured"] > 1.25 * p["upper"]]
    if not slow:
        return (" 1-worker runs set T_compute, so their scatter is the run-to-run noise of the "
                "compute time." if ones else "")
    return (" 1-worker runs set T_compute (the median of their compute times), but "
            + ", ".join(f"{p['label']} W=1 ({1e3 * p['measured']:.3g} ms against "
                        f"{1e3 * p['upper']:.3g} predicted)" for p in slow)
            + " spent over a quarter more than that prediction: not compute noise, but the rest "
            "of the step, the wait for the optimizer's update (which the model leaves out) and "
            "under a parameter server for the push and pull (at one worker counted only as a "
            "dedicated server's bytes), longer on a loaded machine.")


def _unpredicted(runs, preds):
    """The caption sentence for runs the model could not predict (no 1-worker compute time at
    their model and batch, or no bench rows for their backend): they were missing from the plot
    and the table without a word."""
    done = {p["run_id"] for p in preds}
    left = [r for r in runs if r.get("status", "ok") == "ok" and r.get("step_time")
            and r.get("model") and r.get("run_id") not in done]
    if not left:
        return ""
    by_sweep = {}
    for r in left:
        by_sweep[r.get("sweep") or "?"] = by_sweep.get(r.get("sweep") or "?", 0) + 1
    return (f" Not predicted, so on neither the plot nor the table: {len(left)} run"
            f"{'s' if len(left) != 1 else ''} ("
            + ", ".join(f"{n} of the {s} sweep" for s, n in sorted(by_sweep.items()))
            + "), with no 1-worker run (or bench-model row) of their model and batch to give "
            "T_compute, or no bench rows of their backend.")


def _coincide(a, b, tol=0.02):
    """Two extrapolated series whose no-overlap step times agree within tol everywhere."""
    return len(a) == len(b) and all(abs(p[1] - q[1]) <= tol * max(p[1], q[1], 1e-12)
                                    for p, q in zip(a, b))


def _models(computes, batch=64):
    out = []
    for name in ("default", "wide"):
        widths = cm.PRESETS[name]
        params = sum(widths[i] * widths[i + 1] + widths[i + 1] for i in range(len(widths) - 1))
        tc = cmr.compute_for(params, batch, computes)
        if tc:
            out.append((name, widths, params, tc))
    return out


def extrapolation(runs, bench, out_dir):
    title = "Cost model: step time extrapolated to 256 workers"
    got = analyse(runs, bench)
    if isinstance(got, str):
        return Skipped(title, got)
    fits, _, _, computes = got
    models = _models(computes)
    if not models:
        return Skipped(title, NO_COMPUTE)
    gamma = fits[0].consts.gamma
    obs = cmr.observed(runs)
    refs = {name: cm.model_reference(bench, widths, observed=obs) for name, widths, _, _ in models}
    nets = [("calibrated on this machine", lambda r: lambda k: cm.network_consts(r, k),
             lambda r: cm.series_doubts(r)),
            (f"{REF_NET['bandwidth_gbps']:g} Gb/s, {REF_NET['alpha_us']:g} us network",
             lambda r: lambda k: cm.network_consts(r, k, gamma=gamma, **REF_NET),
             lambda r: cm.series_doubts(r, **REF_NET))]
    fig, axes = plt.subplots(len(nets), len(models), figsize=(6.3 * len(models), 4.4 * len(nets)),
                             squeeze=False)
    notes = []
    for row, (net, consts_for, doubts_for) in enumerate(nets):
        for col, (name, widths, params, tc) in enumerate(models):
            ax = axes[row][col]
            consts_of, doubtful = consts_for(refs[name]), doubts_for(refs[name])
            ext = cm.extrapolate(widths, tc[0], consts_of, WORKERS)
            for i, (series, pts) in enumerate(ext.items()):
                ws = [p[0] for p in pts]
                line, marker = STYLE[series]
                color = SERIES_COLOR.get(series) or color_of(series)
                # A series on top of an earlier one hid it (bottom row: co-located PS over the
                # ring, same bytes on the same link): say so, and draw it with bigger markers.
                same = [o for o in list(ext)[:i] if _coincide(ext[o], pts)]
                ax.plot(ws, [1e3 * p[1] for p in pts], line, marker=marker,
                        markersize=7 if same else 4, markerfacecolor="none", color=color,
                        label=series + (f" (= {', '.join(same)} here)" if same else "")
                        + (" [fit in doubt]" if series in doubtful else ""))
                ax.fill_between(ws, [1e3 * p[2] for p in pts], [1e3 * p[1] for p in pts],
                                color=color, alpha=0.12)
            ax.axhline(1e3 * tc[0], color="k", linewidth=0.8, linestyle=":",
                       label="T_compute (1 worker)")
            ax.set_yscale("log")
            log_tick_labels(ax.yaxis)
            _log2_workers(ax, WORKERS)
            label_axes(ax, "workers (log2 scale)", "step time (ms, log scale)",
                       f"{name} MLP ({params / 1e6:.2f}M params), {net}")
            ax.legend(fontsize=7)
            cross = cli.crossover_lines(widths, consts_of, WORKERS, doubtful=doubtful)
            notes.append(f"{name}, {net}: " + "; ".join(
                [f"not ranked: {x}" for x in cli.doubt_lines(doubtful)] + cross[:2]))
        if row == 0:
            notes.insert(0, "compute: " + "; ".join(
                f"{n} {1e3 * tc[0]:.3g} ms ({tc[1]})" for n, _, _, tc in models))
    name = _save(fig, out_dir, "cost_model_scaling.png")
    return Figure(name, title,
                  "Predicted step time (line: no overlap; band down to perfect overlap) for the "
                  "ring all-reduce, a parameter server with 1 and with W/2 dedicated servers "
                  "(W+S machines), and co-located PS shards, at 2 to 256 workers, 64 samples per "
                  "worker (weak scaling). Top: each backend with its own constants fitted on this "
                  "folder's bench rows (1/beta on the sizes within 8x of the model's largest "
                  "bucket; " + "; ".join(f"{n}: {_consts_caption(refs[n], SERIES_KINDS)}"
                                         for n in refs) + "); one node's bench measures "
                  "shared memory and this machine's MPI, not a network. Bottom: every backend on "
                  f"the same {REF_NET['bandwidth_gbps']:g} Gb/s link with {REF_NET['alpha_us']:g} "
                  "us per message and the calibrated reduction speed. A series marked [fit in "
                  "doubt] has constants with a term clamped at 0 or a poor fit, from a bench pass "
                  "on a busy host (other processes' CPUs and the job's ranks more than the "
                  "cores), or contradicted by a measured run (its communication alone predicted "
                  "at over 3x that run's whole step; see the calibration table): it is drawn, "
                  "but no sentence or table here ranks it. "
                  + ". ".join(notes) + ". "
                  "In bandwidth terms a PS needs S >= W^2/(2(W-1)), about W/2, servers to match "
                  "the ring when pushes and pulls overlap (many chunks per server); when each "
                  "server's shard is one chunk (the default MLP: D < 4 MiB) push and pull take "
                  "turns, 2 max(D, WD/S) >= 2D, and no S matches the ring's 2(W-1)/W D. Other "
                  "networks: scripts/cost_model.py RESULTS --alpha-us A "
                  "--bandwidth-gbps B.")


def _constants_caveat(ref):
    """What the extrapolation's per-backend constants are, and which of them came from bench runs
    that time-shared the cores (their 1/beta and alpha carry the sharing, not a network). Only
    the backends the table extrapolates: an mpi fit was named, used by none of its columns."""
    ref = {k: f for k, f in ref.items() if k in SERIES_KINDS}
    shared = sorted(f"{k} (W={f.workers}, {f.ranks} ranks)" for k, f in ref.items()
                    if f.oversubscribed)
    busy = sorted(f"{k} (W={f.workers}, {f.ranks} ranks, {f.host_busy:.1f} other CPUs)"
                  for k, f in ref.items() if f.host_busy is not None)
    text = (" (each backend with its own constants, the calibration rows marked [used] or "
            "[USED, CAVEAT]: this node's shared memory and MPI, not a network")
    if shared:
        text += ("; " + ", ".join(shared) + " come from runs with more ranks than cores, so "
                 "the 'fastest' column compares time-sharing as much as algorithms")
    if busy:
        text += ("; " + ", ".join(busy) + " come from bench passes on a busy host (other "
                 "processes' CPUs and the ranks more than the cores): they timed the wait for a "
                 "CPU")
    return text + "; at equal links see the bottom row of cost_model_scaling.png)"


def _doubt_caveat(doubtful):
    """The table caption's account of the series left out of its 'fastest' column."""
    if not doubtful:
        return ""
    return (". Marked [fit in doubt], drawn but not ranked in the 'fastest' column: "
            + "; ".join(cli.doubt_lines(doubtful)) + " (rerun the bench with more sizes and -n, "
            "on a quiet machine, or give a network: scripts/cost_model.py RESULTS --alpha-us A "
            "--bandwidth-gbps B)")


def _tables(runs, bench):
    try:
        return _tables_or_raise(runs, bench)
    except (KeyError, TypeError, ValueError, ZeroDivisionError):
        return None  # a malformed record: the figures' Skipped entries say what failed


def _tables_or_raise(runs, bench):
    got = analyse(runs, bench)
    if isinstance(got, str):
        return None
    fits, ref, preds, computes = got
    out = [("Calibration: T = alpha m + beta b + gamma r per backend and W/S (gamma fixed from "
            "memcpy)", cli.fits_table(fits, ref))]
    if preds:
        out.append(("Predicted vs measured step time", cli.check_table(preds)))
    for name, widths, params, tc in _models(computes)[:1]:
        ref_m = cm.model_reference(bench, widths, observed=cmr.observed(runs))
        ext = cm.extrapolate(widths, tc[0], lambda k: cm.network_consts(ref_m, k), WORKERS)
        doubtful = {s: why for s, why in cm.series_doubts(ref_m).items() if s in ext}
        if ext:
            out.append((f"Extrapolated step time, {name} MLP, calibrated constants, no overlap"
                        + _constants_caveat(ref_m) + _doubt_caveat(doubtful),
                        cli.extrapolation_table(name, ext, 64, doubtful)))
    return out


def summary_lines(runs, bench):
    """The "## Cost model" section of summary.md (empty without bench rows)."""
    tables = _tables(runs, bench)
    if not tables:
        return []
    parts = ["## Cost model", "", "From scripts/cost_model.py (alpha-beta model, see its "
             "docstring); rows marked oversubscribed time-share the cores and are not expected "
             "to match. A maximum fit residual far above the median marks a change of regime "
             "across the bench sizes (on one node: messages outgrowing the caches), so each "
             "prediction refits 1/beta on the sizes within 8x of its largest bucket (the "
             "constants column).", ""]
    for caption, (head, rows) in tables:
        parts += [f"{caption}:", "", cli.markdown(head, rows), ""]
    return parts


def html_section(runs, bench):
    tables = _tables(runs, bench)
    if not tables:
        return ""
    e = html.escape
    body = ["<h2>Cost model</h2><p>scripts/cost_model.py: an alpha-beta model calibrated on this "
            "folder's bench rows; see the two figures below.</p>"]
    for caption, (head, rows) in tables:
        body.append(f"<p>{e(caption)}</p><table><tr>" + "".join(f"<th>{e(h)}</th>" for h in head)
                    + "</tr>" + "".join("<tr>" + "".join(f"<td>{e(c)}</td>" for c in r) + "</tr>"
                                        for r in rows) + "</table>")
    return "\n".join(body)

