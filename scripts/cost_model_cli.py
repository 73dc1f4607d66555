"""The command line of StarRing's cost model (run it as scripts/cost_model.py, see the top of
that file) and the tables it prints, which the report (scripts/report_model.py) shows too.
Standard library only."""
import argparse
import math
import os
import signal
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cost_model as cm  # noqa: E402
import cost_model_runs as cmr  # noqa: E402
import starring_results as sr  # noqa: E402


POOR_FIT = cm.POOR_FIT


def fit_note(f, ref):
    """The fits table's note: oversubscribed, a term clamped at 0, a fit too poor to trust (on a
    loaded machine the bench's times scatter: a 74% median residual was seen on a shared one),
    used for predictions."""
    notes = ["oversubscribed"] if f.oversubscribed else []
    for why in cm.doubts(f):
        if why.startswith("poor fit"):
            why = why[:-1] + (": a loaded machine scatters bench times, rerun it quiet or with "
                              "more -n and sizes; a cache boundary bends them, predictions refit "
                              "1/beta near each run's buckets)")
        notes.append(why)
    if ref.get(f.kind) is not f:
        return "; ".join(notes)
    caveats = cm.used_caveats(f)
    return "; ".join(notes) + (" [USED, CAVEAT: " + "; ".join(caveats) + "]" if caveats
                               else " [used]")


def caveat_lines(ref):
    """One line per backend whose fit used for predictions carries a caveat (cm.used_caveats),
    printed under the fits table, where the note cell is easily missed."""
    return [f"CAVEAT: {k} predictions use {cm.fit_name(f)}: " + "; ".join(cm.used_caveats(f))
            for k, f in sorted(ref.items()) if cm.used_caveats(f)]


def fits_table(fits, ref):
    head = ["backend", "W", "S", "np", "sizes (B)", "alpha (us)", "1/beta (GB/s)",
            "1/gamma (GB/s)", "rel. resid. median (rows not fitted through) / max (at size)",
            "note"]
    rows = []
    for f in fits:
        c = f.consts
        rows.append([f.kind, str(f.workers), str(f.servers) if f.kind == "ps" else "-",
                     str(f.ranks), f"{min(f.sizes)}..{max(f.sizes)}", f"{c.alpha * 1e6:.3g}",
                     f"{1e-9 / c.beta:.3g}" if c.beta > 0 else "inf",
                     f"{1e-9 / c.gamma:.3g}" if c.gamma > 0 else "-",
                     _percent(cm.fit_spread(f)) + f" / {100 * f.max_rel_err:.0f}% "
                     f"({f.sizes[max(range(len(f.sizes)), key=lambda i: abs(f.residuals[i]))]})",
                     fit_note(f, ref)])
    return head, rows


def _percent(x):
    return "-" if x is None else f"{100 * x:.0f}%"


def _consts_cell(c):
    """'alpha us, 1/beta GB/s' of the constants a prediction used; 'inf' for a beta clamped at 0
    (as fits_table writes it: '-' there read as no constants used); '-' where none were."""
    if not c:
        return "-"
    return f"{c.alpha * 1e6:.3g}, " + (f"{1e-9 / c.beta:.3g}" if c.beta > 0 else "inf")


def check_table(preds):
    head = ["run", "backend", "W", "np", "constants: alpha us, 1/beta GB/s", "measured ms",
            "predicted ms (overlap..none)", "comm ms pred. / meas.", "error (no overlap)",
            "error, run's own compute", "in bounds", "note"]
    rows = [[p["run_id"], p["label"], str(p["workers"]), str(p["np"]),
             _consts_cell(p["consts"]), f"{1e3 * p['measured']:.3f}",
             f"{1e3 * p['lower']:.3f}..{1e3 * p['upper']:.3f}",
             f"{1e3 * p['comm']:.3f} / {1e3 * p['measured_comm']:.3f}",
             f"{100 * p['err']:+.0f}%", f"{100 * p['own_compute_err']:+.0f}%",
             "yes" if p["within"] else "no",
             "; ".join(p["notes"]) or "-"] for p in preds]
    return head, rows


def _fastest(ext, i, doubtful=()):
    """The series with the lowest no-overlap time at row i, among those whose fit is not in
    doubt; a doubtful one predicted lower is named as not ranked."""
    trusted = [s for s in ext if s not in doubtful]
    if not trusted:  # nothing to be lower than ('a, b, c lower' was said of every series,
        return "none ranked (every fit in doubt)"  # the slowest too)
    best = min(ext[s][i][1] for s in trusted)
    lower = [s for s in ext if s in doubtful and ext[s][i][1] < best / 1.005]
    name = " = ".join(s for s in trusted if ext[s][i][1] <= best * 1.005)
    return name + (f" ({', '.join(lower)} lower, not ranked)" if lower else "")


def extrapolation_table(name, ext, batch, doubtful=()):
    """Step time per series and W; `doubtful` series (cm.series_doubts) are marked in the head
    and left out of the fastest column."""
    head = ["W"] + [f"{s} ms (samples/s)" + (" [fit in doubt]" if s in doubtful else "")
                    for s in ext] + ["fastest (trusted fits)" if doubtful else "fastest"]
    ws = [p[0] for p in next(iter(ext.values()))] if ext else []
    rows = [[str(w)] + [f"{1e3 * ext[s][i][1]:.3g} ({ext[s][i][4]:,.0f})" for s in ext]
            + [_fastest(ext, i, doubtful)] for i, w in enumerate(ws)]
    return head, rows


def doubt_lines(doubtful):
    """One sentence per series in doubt, for under the table and the captions."""
    return [f"{s}: " + "; ".join(why) for s, why in doubtful.items()]


def text(head, rows):
    cells = [head] + rows
    width = [max(len(c[i]) for c in cells) for i in range(len(head))]
    return "\n".join("  ".join(c[i].ljust(width[i]) for i in range(len(head))).rstrip()
                     for c in cells)


def markdown(head, rows):
    return "\n".join(["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
                     + ["| " + " | ".join(r) + " |" for r in rows])


def crossover_lines(widths, consts_of, workers, bucket_mb=cm.BUCKET_MB,
                    chunk=cm.PS_CHUNK_BYTES, doubtful=()):
    """Sentences naming where the ring beats PS S=1 and how many servers PS needs (prefixed
    with a warning when the ring's or the dedicated PS's fit is in doubt)."""
    ring, ps = consts_of("ring"), consts_of("ps")
    if ring is None or ps is None:
        return ["(no ring or no dedicated-PS constants: no crossover)"]
    shaky = [s for s in ("ring", "ps S=1", "ps S=W/2") if s in doubtful]
    warn = f"(from fits in doubt: {', '.join(shaky)}) " if shaky else ""
    sizes = cm.buckets(widths, bucket_mb)
    beats = [w for w in workers if cm.step_comm("ring", sizes, w, 0, ring, chunk)
             < cm.step_comm("ps", sizes, w, 1, ps, chunk)]
    need = [(w, cm.servers_to_match(widths, consts_of, w, bucket_mb, chunk)) for w in workers]
    return [f"{warn}ring communicates faster than PS with 1 server at W = "
            f"{', '.join(map(str, beats)) if beats else 'none of ' + str(workers)}",
            f"{warn}servers PS needs to match the ring: " + ", ".join(
                f"W={w}: S>={s}" if s else f"W={w}: no S<=2W" for w, s in need),
            "bandwidth terms alone: S >= W^2/(2(W-1)) ~ W/2 when pushes and pulls overlap (many "
            "chunks per server); never with one chunk per server (2 max(D, WD/S) >= 2D > "
            "2(W-1)/W D), within W/(W-1) of the ring from S = W"]


def positive(kind):
    """argparse type: a finite number > 0 of `kind` (int or float)."""
    def convert(text):
        try:
            v = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"'{text}' is not a number") from None
        if not math.isfinite(v) or v <= 0:
            raise argparse.ArgumentTypeError(f"must be > 0 (got {text})")
        return v
    convert.__name__ = kind.__name__
    return convert


def int_list(text):
    """argparse type: a comma list of integers > 0."""
    return [positive(int)(x) for x in text.split(",")]


def model_list(text):
    """argparse type: presets or hidden widths as a-b (each > 0)."""
    names = text.split(",")
    for name in names:
        if name not in cm.PRESETS:
            try:
                [positive(int)(x) for x in name.split("-")]
            except argparse.ArgumentTypeError:
                raise argparse.ArgumentTypeError(
                    f"'{name}' is neither a preset ({', '.join(cm.PRESETS)}) nor widths like "
                    "512-256") from None
    return names


def compute_ms(text):
    """argparse type: MODEL=MS with MS > 0."""
    name, eq, ms = text.partition("=")
    if not eq or not name:
        raise argparse.ArgumentTypeError(f"expected MODEL=MS (got '{text}')")
    return name, positive(float)(ms)


def parse_args(argv):
    ap = argparse.ArgumentParser(prog="scripts/cost_model.py",
                                 description=" ".join(cm.__doc__.split("\n\n")[0].split()),
                                 epilog="The model, its assumptions and the fit: see the top of "
                                 "scripts/cost_model.py.")
    ap.add_argument("results", help="a results folder (bench.jsonl, runs.jsonl) or a bench.jsonl")
    ap.add_argument("--alpha-us", type=positive(float), help="network latency per message (us); default: "
                    "fitted on the folder's bench rows")
    ap.add_argument("--bandwidth-gbps", type=positive(float), help="link bandwidth (Gb/s, each direction); "
                    "default: fitted on the folder's bench rows")
    ap.add_argument("--gamma-gbps", type=positive(float), help="reduction speed (GB/s of floats summed); "
                    "default 2/3 of the bench's memcpy bandwidth")
    ap.add_argument("--workers", type=int_list, default="2,4,8,16,32,64,128,256",
                    help="workers to predict, comma list (default: %(default)s)")
    ap.add_argument("--models", type=model_list, default="default,wide",
                    help="comma list of presets or hidden widths as a-b, e.g. 512-256 "
                    "(default: %(default)s)")
    ap.add_argument("--batch", type=positive(int), default=64,
                    help="samples per worker per step (default: %(default)s)")
    ap.add_argument("--compute-ms", type=compute_ms, action="append", default=[],
                    help="MODEL=MS: 1-worker compute per step (default: measured)")
    ap.add_argument("--bucket-mb", type=positive(float), default=cm.BUCKET_MB,
                    help="gradient bucket size assumed for the predictions, MiB (as train's --bucket-mb; default "
                    "%(default)s)")
    ap.add_argument("--ps-chunk-mb", type=positive(float), default=cm.PS_CHUNK_BYTES / cm.MIB,
                    help="PS push/pull chunk assumed for the predictions, MiB (as train's --ps-chunk-bytes; default "
                    "%(default)s)")
    ap.add_argument("--fit-sizes", choices=("auto", "all"), default="auto",
                    help="calibrate each prediction on the bench sizes within 8x of its largest "
                    "bucket (auto) or on all sizes")
    a = ap.parse_args(argv)
    if not os.path.exists(a.results):
        ap.error(f"{a.results}: no such folder or file")
    if os.path.isdir(a.results) and not any(
            os.path.exists(os.path.join(a.results, f)) for f in ("runs.jsonl", "bench.jsonl")):
        ap.error(f"{a.results} has neither runs.jsonl nor bench.jsonl (give a results folder)")
    return a


def load(path):
    """(runs, bench) records; a line that does not parse is a warning (as in report.py)."""
    files = ([os.path.join(path, "runs.jsonl"), os.path.join(path, "bench.jsonl")]
             if os.path.isdir(path) else [None, path])
    out = []
    for f in files:
        records, bad = sr.read_jsonl(f) if f else ([], [])
        for b in bad:
            print(f"warning: {b}", file=sys.stderr)
        out.append(records)
    return out[0], out[1]


def model_widths(name):
    return cm.PRESETS.get(name) or [784] + [int(x) for x in name.split("-")] + [10]


def main(argv=None):
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # `| head` ends the output quietly
    a = parse_args(argv)
    runs, bench = load(a.results)
    chunk = int(a.ps_chunk_mb * cm.MIB)
    gamma = 1.0 / (a.gamma_gbps * 1e9) if a.gamma_gbps else None
    obs = cmr.observed(runs)
    fits = cm.calibrate(bench, gamma, chunk, observed=obs)
    ref = cm.reference(fits)
    print("# Calibration (T = alpha m + beta b + gamma r, per backend and W/S; gamma fixed)")
    print(text(*fits_table(fits, ref)) if fits else "(no usable bench rows)")
    for line in caveat_lines(ref):
        print(line)
    computes = cmr.compute_times(runs, bench)
    windowed = a.fit_sizes == "auto"
    preds = cmr.check_runs(runs, bench, computes, chunk, gamma, windowed)
    if preds:
        print("\n# Predicted vs measured step time (no overlap = T_compute + T_comm; "
              "overlap = max)")
        print(text(*check_table(preds)))
        good = [p for p in preds if p["expected"] and p["workers"] > 1]
        if good:
            print(f"ranks <= cores, W > 1: {sum(p['within'] for p in good)}/{len(good)} within "
                  f"[overlap, no overlap] +-10%; max |error| of the no-overlap prediction "
                  f"{100 * max(abs(p['err']) for p in good):.0f}%, with each run's own compute "
                  f"{100 * max(abs(p['own_compute_err']) for p in good):.0f}%"
                  + cmr.doubt_clause(good))
    workers = a.workers
    net = a.alpha_us is not None or a.bandwidth_gbps is not None
    gamma_net = gamma if gamma is not None else (fits[0].consts.gamma if fits else 0.0)
    user = dict(a.compute_ms)
    for name in a.models:
        widths = model_widths(name)
        ref_m = cm.model_reference(bench, widths, gamma, chunk, a.bucket_mb, windowed, obs)

        def consts_of(kind, ref_m=ref_m):
            return cm.network_consts(ref_m, kind, a.alpha_us, a.bandwidth_gbps,
                                  gamma_net if net else None)
        params = sum(widths[i] * widths[i + 1] + widths[i + 1] for i in range(len(widths) - 1))
        tc = (float(user[name]) * 1e-3, "given") if name in user else \
            cmr.compute_for(params, a.batch, computes)
        if tc is None:
            print(f"\n# {name}: no compute time (no 1-worker run or bench-model row at batch "
                  f"{a.batch}; give --compute-ms {name}=MS)")
            continue
        ext = cm.extrapolate(widths, tc[0], consts_of, workers, a.batch, a.bucket_mb, chunk)
        print(f"\n# Extrapolation: {name} MLP {'-'.join(map(str, widths))} ({params:,} params, "
              f"{4 * params / 1e6:.3g} MB), T_compute {1e3 * tc[0]:.3g} ms ({tc[1]}), "
              f"{'given network' if net else 'calibrated constants'}, no-overlap step time")
        for kind in ("ring", "ps", "ps-colocated"):
            c = consts_of(kind)
            why = [] if (a.alpha_us is not None and a.bandwidth_gbps is not None) or \
                kind not in ref_m else cm.used_caveats(ref_m[kind], a.alpha_us is not None,
                                                      a.bandwidth_gbps is not None)
            print(f"#   {kind}: {c.describe() if c else 'no constants'}"
                  + "".join(f"; CAVEAT: {w}" for w in why))
        doubtful = cm.series_doubts(ref_m, a.alpha_us, a.bandwidth_gbps)
        print(text(*extrapolation_table(name, ext, a.batch, doubtful)))
        for line in doubt_lines(doubtful):
            print("  not ranked (fit in doubt): " + line)
        for line in crossover_lines(widths, consts_of, workers, a.bucket_mb, chunk, doubtful):
            print("  " + line)
    return 0
