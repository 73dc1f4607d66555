#!/usr/bin/env python3
"""StarRing's alpha-beta cost model: calibrate from `starring bench --json` rows, check against
measured training runs, and predict step times at scales this machine cannot run.

  scripts/cost_model.py RESULTS_DIR                       fitted constants, predicted vs measured
  scripts/cost_model.py RESULTS_DIR --alpha-us 5 --bandwidth-gbps 25 --workers 64,256
                                                          ... and "star or ring?" on that network

The model is Hockney's: a message of n bytes costs alpha + n beta, plus gamma per byte reduced
(Thakur, Rabenseifner & Gropp, "Optimization of collective communication operations in MPICH",
IJHPCA 19(1), 2005; Patarasuk & Yuan, "Bandwidth optimal all-reduce algorithms for clusters of
workstations", JPDC 69(2), 2009). D = bytes of one copy of the gradients, N = W ranks/workers,
S dedicated servers, c = the PS chunk (--ps-chunk-bytes, 4 MiB). Each formula is
T = m alpha + b beta + r gamma, with m the messages the busiest rank handles, b the bytes on its
link in one direction, r the bytes it reduces:

  ring all-reduce   m = 2(N-1)              b = 2(N-1)/N D          r = (N-1)/N D
                    (reduce-scatter then all-gather; N-1 dependent steps each; segments stream
                    inside a step, so a step pays its latency once)
  co-located PS     m = 2(W-1) n, n = ceil(D/(W c))   b = 2(W-1)/W D   r = (W-1)/W D
                    (each rank owns a D/W shard: it pushes W-1 shards and answers W-1 pulls,
                    so the bytes equal the ring's but the messages are chunks of c bytes)
  dedicated PS      m = 2 n max(W, S), n = ceil(D/(S c))
                    b = L (1 + 1/n), L = max(D, W D/S)      r = W D / S
                    (busiest link: a server's, W D/S each way, or a worker's, D each way when
                    S > W; under BSP a server answers chunk k only when all W pushes of chunk k
                    are in, so pulls overlap pushes except for one chunk round: n = 1, a model
                    smaller than S c, pays push and pull in turn, 2L beta; many chunks approach
                    L beta on full-duplex links; r: the server sums W pushes of its D/S)

Assumptions: full-duplex links, one port per rank (a rank's messages are serialized: alpha is a
per-message cost at the busiest endpoint), balanced shards, no contention in the network core,
BSP (ASP/SSP and stragglers are not modeled), the optimizer update (D/S per server) is ignored.
A step synchronizes gradients in buckets (--bucket-mb, tensors never split) and pays T per bucket.

Calibration: at a fixed N every formula is linear in the sizes, T = alpha m + beta b + gamma r,
but b and r are proportional to each other, so a size sweep cannot separate beta from gamma:
gamma is pinned to the reduction speed a += b implied by the bench's memcpy bandwidth (3 bytes of
memory traffic per byte reduced against memcpy's 2: gamma = 1.5 / memcpy_Bps; --gamma-gbps
overrides) and (alpha, beta) >= 0 are fit per backend and per (W, S) by least absolute relative
deviations (a 64 KiB row counts as much as a 64 MiB one, and one row slowed by another process's
time slice does not move the fit; the largest relative residual is reported as the fit error).
One node's bench
measures shared memory and this machine's MPI, not a network: use --alpha-us/--bandwidth-gbps
to predict another one.

Step time: T_step = T_compute + T_comm (no overlap, an upper bound) and max(T_compute, T_comm)
(perfect overlap, a lower bound), with T_compute the measured 1-worker compute time per step of
that model (weak scaling: every worker computes the same batch). Runs with more ranks than cores
time-share the CPU: the model is only expected to hold for ranks <= cores.

Standard library only.
"""
import argparse
import math
import os
import signal
import sys
from dataclasses import dataclass, field

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import starring_results as sr  # noqa: E402

MIB = 1 << 20
PS_CHUNK_BYTES = 4 * MIB  # --ps-chunk-bytes default
BUCKET_MB = 25.0          # --bucket-mb default
PRESETS = {"default": [784, 256, 128, 10], "wide": [784, 4096, 4096, 10]}
KINDS = ("ring", "mpi", "nccl", "ps", "ps-colocated")
ALLREDUCE = ("ring", "mpi", "nccl")


# ---- the model ---------------------------------------------------------------------------------

@dataclass
class Consts:
    alpha: float          # s per message
    beta: float           # s per byte on the busiest link
    gamma: float          # s per byte reduced
    source: str = ""      # where they come from, for tables and captions

    def describe(self):
        bw = f"{1 / self.beta / 1e9:.3g} GB/s" if self.beta > 0 else "inf"
        gm = f"{1 / self.gamma / 1e9:.3g} GB/s" if self.gamma > 0 else "free"
        return f"alpha {self.alpha * 1e6:.3g} us, 1/beta {bw}, reduction 1/gamma {gm}"


def terms(kind, d, workers, servers=0, chunk=PS_CHUNK_BYTES):
    """(m, b, r) of the module docstring for one synchronization of d bytes."""
    w, d = int(workers), float(d)
    if d <= 0:
        return 0.0, 0.0, 0.0
    if kind in ALLREDUCE:
        return (2.0 * (w - 1), 2.0 * (w - 1) / w * d, (w - 1) / w * d) if w > 1 else (0, 0, 0)
    if kind == "ps-colocated":
        if w <= 1:
            return 0.0, 0.0, 0.0
        n = math.ceil(d / (w * chunk))
        return 2.0 * (w - 1) * n, 2.0 * (w - 1) / w * d, (w - 1) / w * d
    if kind == "ps":
        s = max(1, int(servers))
        n = math.ceil(d / (s * chunk))
        load = max(d, w * d / s)
        return 2.0 * n * max(w, s), load * (1.0 + 1.0 / n), w * d / s
    raise ValueError(f"cost model: no formula for backend {kind!r}")


def comm_time(kind, d, workers, servers, consts, chunk=PS_CHUNK_BYTES):
    m, b, r = terms(kind, d, workers, servers, chunk)
    return m * consts.alpha + b * consts.beta + r * consts.gamma


def buckets(widths, bucket_mb=BUCKET_MB):
    """Bucket sizes in bytes, as common/bucketing.cc groups the MLP's tensors (backward order:
    last layer first, weight then bias; a tensor is never split)."""
    tensors = []
    for i in reversed(range(len(widths) - 1)):
        tensors += [widths[i] * widths[i + 1], widths[i + 1]]
    cap, out, cur = bucket_mb * MIB, [], []
    for t in tensors:
        if cur and (sum(cur) + t) * 4 > cap:
            out.append(sum(cur))
            cur = []
        cur.append(t)
    out.append(sum(cur))
    return [4 * n for n in out]


def step_comm(kind, bucket_bytes, workers, servers, consts, chunk=PS_CHUNK_BYTES):
    return sum(comm_time(kind, d, workers, servers, consts, chunk) for d in bucket_bytes)


def step_time(t_compute, t_comm):
    """(no overlap, perfect overlap) step times: the upper and lower bound."""
    return t_compute + t_comm, max(t_compute, t_comm)


# ---- calibration ---------------------------------------------------------------------------------

@dataclass
class Fit:
    kind: str
    workers: int
    servers: int
    consts: Consts
    max_rel_err: float
    sizes: list
    oversubscribed: bool
    ranks: int            # ranks of the bench job (np)
    residuals: list = field(default_factory=list)


def bench_kind(row):
    name = row["backend"].partition("@")[0]
    if name == "ps":
        return "ps-colocated" if row.get("servers") == "colocated" else "ps"
    return name


def gamma_from_bench(rows):
    """s per byte reduced: 1.5 / memcpy bandwidth (median over rows); 0 without a memcpy figure."""
    bw = sorted(r["memcpy_GBps"] for r in rows if r.get("memcpy_GBps"))
    return 1.5 / (bw[len(bw) // 2] * 1e9) if bw else 0.0


def robust_fit(m, b, y):
    """alpha, beta >= 0 minimizing the sum of |relative residuals| (least absolute deviations:
    one row hit by a time slice of another process does not drag the fit). The optimum of this
    2-parameter L1 problem passes through two rows (or one, with a term at 0), so every pair
    is tried: exact, and cheap for a bench's ten or so sizes."""
    n = len(y)
    cands = [(max(0.0, y[i] / m[i]), 0.0) for i in range(n) if m[i] > 0]
    cands += [(0.0, max(0.0, y[i] / b[i])) for i in range(n) if b[i] > 0]
    for i in range(n):
        for j in range(i + 1, n):
            det = m[i] * b[j] - m[j] * b[i]
            if abs(det) > 1e-12 * (abs(m[i] * b[j]) + abs(m[j] * b[i])):
                a = (y[i] * b[j] - y[j] * b[i]) / det
                c = (m[i] * y[j] - m[j] * y[i]) / det
                if a >= 0 and c >= 0:
                    cands.append((a, c))

    def cost(ab):
        res = [abs(yi - ab[0] * mi - ab[1] * bi) / yi for mi, bi, yi in zip(m, b, y)]
        return sum(res), max(res)
    return min(cands, key=cost) if cands else (0.0, 0.0)


def fit_group(rows, kind, workers, servers, gamma, chunk=PS_CHUNK_BYTES):
    rows = sorted(rows, key=lambda r: r["size"])
    t = [r["time_us"] * 1e-6 for r in rows]
    mbr = [terms(kind, r["size"], workers, servers, chunk) for r in rows]
    y = [ti - x[2] * gamma for ti, x in zip(t, mbr)]
    alpha, beta = robust_fit([x[0] for x in mbr], [x[1] for x in mbr],
                             [yi if yi > 0 else ti for yi, ti in zip(y, t)])
    name = f"{kind} W={workers}" + (f" S={servers}" if kind == "ps" else "")
    c = Consts(alpha, beta, gamma, name)
    res = [(comm_time(kind, r["size"], workers, servers, c, chunk) - ti) / ti
           for r, ti in zip(rows, t)]
    cores = max((r.get("cores", 0) for r in rows), default=0)
    np_ = max(r["np"] for r in rows)  # the job's ranks: an op on W of them (NAME@W) shares cores
    over = any(r.get("oversubscribed") for r in rows) or (cores > 0 and np_ > cores)
    return Fit(kind, workers, servers, c, max(abs(x) for x in res), [r["size"] for r in rows],
               over, np_, res)


def median_abs(xs):
    xs = sorted(abs(x) for x in xs)
    return xs[len(xs) // 2] if xs else 0.0


def calibrate(bench, gamma=None, chunk=PS_CHUNK_BYTES):
    """Fits per (backend, W, S) from bench rows (correct rows with at least 2 sizes)."""
    rows = [r for r in bench if "size" in r and r.get("time_us", 0) > 0 and not r.get("wrong")
            and bench_kind(r) in KINDS and r["size"] > 0]
    g = gamma_from_bench(rows) if gamma is None else gamma
    groups = {}
    for r in rows:
        kind = bench_kind(r)
        s = r["servers"] if kind == "ps" and isinstance(r.get("servers"), int) else 0
        key = (kind, int(r.get("workers", r["np"])), s, r["np"])
        groups.setdefault(key, {})[r["size"]] = r  # a repeated size: the last row wins
    return [fit_group(list(g_.values()), *key[:3], g, chunk) for key, g_ in sorted(groups.items())
            if len(g_) >= 2]


def reference(fits):
    """One fit per backend for predictions: the largest W that fits on the cores (else the
    fewest ranks), ties to the smaller fit error."""
    best = {}
    for f in fits:
        rank = (not f.oversubscribed, f.workers if not f.oversubscribed else -f.ranks,
                -f.max_rel_err)
        if f.kind not in best or rank > best[f.kind][0]:
            best[f.kind] = (rank, f)
    return {k: v[1] for k, v in best.items()}


def network_consts(ref, kind, alpha_us=None, bandwidth_gbps=None, gamma=None):
    """A backend's constants, with a user's network (alpha, link Gb/s) replacing the fitted ones
    (None: the backend has no bench rows and the network is not fully given)."""
    base = ref.get(kind)
    if base is None and (alpha_us is None or bandwidth_gbps is None):
        return None
    c = base.consts if base else Consts(0.0, 0.0, 0.0)
    given = alpha_us is not None or bandwidth_gbps is not None
    return Consts(c.alpha if alpha_us is None else alpha_us * 1e-6,
                  c.beta if bandwidth_gbps is None else 8.0 / (bandwidth_gbps * 1e9),
                  c.gamma if gamma is None else gamma, "given network" if given else c.source)


# ---- training runs ------------------------------------------------------------------------------

def run_kind(rec):
    if rec.get("backend") == "ps":
        return "ps-colocated" if sr.is_colocated(rec) else "ps"
    return rec.get("backend", "?")


def compute_times(runs, bench=()):
    """{(params, batch): (seconds, source)}: the 1-worker compute time per step of each model,
    from BSP 1-worker runs without a straggler (median), else `starring bench-model` rows."""
    found = {}
    for r in runs:
        if r.get("status", "ok") == "ok" and r.get("workers") == 1 and not r.get("straggler") \
                and r.get("consistency", "bsp") == "bsp" and r.get("step_time"):
            key = (r["model"]["params"], r.get("batch", 64))
            found.setdefault(key, []).append(r["step_time"]["compute_s"])
    out = {k: (sorted(v)[len(v) // 2], f"median of {len(v)} 1-worker run(s)")
           for k, v in found.items()}
    for b in bench:
        if b.get("bench") == "model" and b.get("step_ms"):
            out.setdefault((b["params"], b.get("batch", 64)), (b["step_ms"] * 1e-3, "bench-model"))
    return out


def compute_for(params, batch, computes):
    """T_compute for a model: measured, else scaled by parameters (an MLP's FLOPs per sample are
    about 6 x parameters) from the measured model closest in size at the same batch."""
    if (params, batch) in computes:
        return computes[(params, batch)]
    near = [(abs(math.log(p / params)), p, t) for (p, b), (t, _) in computes.items() if b == batch]
    if not near:
        return None
    _, p, t = min(near)
    return t * params / p, f"estimated: {p:,}-parameter model's time x {params / p:.3g}"


def predict_run(rec, ref, computes, chunk=PS_CHUNK_BYTES):
    """A dict describing the prediction for one ok run, or None when nothing can be said."""
    kind, w = run_kind(rec), rec["workers"]
    tc = compute_for(rec["model"]["params"], rec.get("batch", 64), computes)
    if tc is None:
        return None
    notes = []
    if kind == "local" or (w == 1 and kind != "ps"):
        consts, t_comm = None, 0.0
    else:
        consts = network_consts(ref, kind)
        if consts is None:
            return None
        widths = rec["model"].get("widths") or []
        frac = sr.wire_bytes(rec) / rec["model"]["bytes"]
        sizes = [b * frac for b in buckets(widths, rec.get("bucket_mb", BUCKET_MB))] \
            if widths else [sr.wire_bytes(rec)]
        t_comm = step_comm(kind, sizes, w, rec.get("num_servers", 0), consts, chunk)
    upper, lower = step_time(tc[0], t_comm)
    measured = rec["step_time"]["total_s"]
    if rec.get("oversubscribed"):
        notes.append(f"oversubscribed ({rec['np']} ranks on {rec.get('cores', '?')} cores)")
    if w == 1:
        notes.append("1-worker run: sets T_compute")
    if tc[1].startswith("estimated"):
        notes.append("T_compute " + tc[1])
    if rec.get("straggler") or rec.get("consistency", "bsp") != "bsp":
        notes.append("straggler/asp/ssp: not modeled")
    return {"run_id": rec.get("run_id", "?"), "label": sr.backend_label(rec), "kind": kind,
            "workers": w, "servers": rec.get("num_servers", 0), "np": rec.get("np", w),
            "params": rec["model"]["params"], "measured": measured, "upper": upper,
            "measured_comm": rec["step_time"].get("comm_s", 0.0),
            "lower": lower, "comm": t_comm, "compute": tc[0], "consts": consts,
            "err": (upper - measured) / measured if measured > 0 else float("nan"),
            "within": lower * 0.9 <= measured <= upper * 1.1,
            "expected": not [n for n in notes if n.startswith(("oversub", "straggler"))],
            "notes": notes}


def check_runs(runs, ref, computes, chunk=PS_CHUNK_BYTES):
    ok = [r for r in runs if r.get("status", "ok") == "ok" and r.get("step_time")
          and r.get("model")]
    return [p for p in (predict_run(r, ref, computes, chunk) for r in ok) if p]


# ---- extrapolation -------------------------------------------------------------------------------

SERIES = (("ring", "ring", lambda w: 0), ("ps S=1", "ps", lambda w: 1),
          ("ps S=W/2", "ps", lambda w: max(1, w // 2)),
          ("ps co-located", "ps-colocated", lambda w: 0))


def extrapolate(widths, t_compute, consts_of, workers, batch=64, bucket_mb=BUCKET_MB,
                chunk=PS_CHUNK_BYTES):
    """{series: [(W, upper_s, lower_s, comm_s, samples_per_s)]} for the SERIES that have
    constants (consts_of(kind) -> Consts or None). Throughput from the no-overlap time."""
    sizes = buckets(widths, bucket_mb)
    out = {}
    for name, kind, servers in SERIES:
        c = consts_of(kind)
        comm = [step_comm(kind, sizes, w, servers(w), c, chunk) for w in workers] if c else []
        if c:
            out[name] = [(w, t_compute + tc, max(t_compute, tc), tc, w * batch / (t_compute + tc))
                         for w, tc in zip(workers, comm)]
    return out


def servers_to_match(widths, consts_of, w, bucket_mb=BUCKET_MB, chunk=PS_CHUNK_BYTES, most=None):
    """The fewest dedicated servers whose PS communication time is at most the ring's at W
    workers (None if even `most`, default 2W, is not enough)."""
    ring, ps = consts_of("ring"), consts_of("ps")
    if ring is None or ps is None:
        return None
    sizes = buckets(widths, bucket_mb)
    target = step_comm("ring", sizes, w, 0, ring, chunk)
    for s in range(1, (most or 2 * w) + 1):
        if step_comm("ps", sizes, w, s, ps, chunk) <= target:
            return s
    return None


# ---- the command line ---------------------------------------------------------------------------

def fits_table(fits, ref):
    head = ["backend", "W", "S", "np", "sizes (B)", "alpha (us)", "1/beta (GB/s)",
            "1/gamma (GB/s)", "rel. resid. median / max (at size)", "note"]
    rows = []
    for f in fits:
        c = f.consts
        rows.append([f.kind, str(f.workers), str(f.servers) if f.kind == "ps" else "-",
                     str(f.ranks), f"{min(f.sizes)}..{max(f.sizes)}", f"{c.alpha * 1e6:.3g}",
                     f"{1e-9 / c.beta:.3g}" if c.beta > 0 else "inf",
                     f"{1e-9 / c.gamma:.3g}" if c.gamma > 0 else "-",
                     f"{100 * median_abs(f.residuals):.0f}% / {100 * f.max_rel_err:.0f}% "
                     f"({f.sizes[max(range(len(f.sizes)), key=lambda i: abs(f.residuals[i]))]})",
                     ("oversubscribed" if f.oversubscribed else "") +
                     (" [used]" if ref.get(f.kind) is f else "")])
    return head, rows


def check_table(preds):
    head = ["run", "backend", "W", "np", "measured ms", "predicted ms (overlap..none)",
            "comm ms pred. / meas.", "error (no overlap)", "in bounds", "note"]
    rows = [[p["run_id"], p["label"], str(p["workers"]), str(p["np"]), f"{1e3 * p['measured']:.3f}",
             f"{1e3 * p['lower']:.3f}..{1e3 * p['upper']:.3f}",
             f"{1e3 * p['comm']:.3f} / {1e3 * p['measured_comm']:.3f}",
             f"{100 * p['err']:+.0f}%", "yes" if p["within"] else "no",
             "; ".join(p["notes"]) or "-"] for p in preds]
    return head, rows


def extrapolation_table(name, ext, batch):
    head = ["W"] + [f"{s} ms (samples/s)" for s in ext]
    ws = [p[0] for p in next(iter(ext.values()))] if ext else []
    rows = [[str(w)] + [f"{1e3 * ext[s][i][1]:.3g} ({ext[s][i][4]:,.0f})" for s in ext]
            for i, w in enumerate(ws)]
    return head, rows


def text(head, rows):
    cells = [head] + rows
    width = [max(len(c[i]) for c in cells) for i in range(len(head))]
    return "\n".join("  ".join(c[i].ljust(width[i]) for i in range(len(head))).rstrip()
                     for c in cells)


def markdown(head, rows):
    return "\n".join(["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
                     + ["| " + " | ".join(r) + " |" for r in rows])


def crossover_lines(widths, consts_of, workers, bucket_mb=BUCKET_MB, chunk=PS_CHUNK_BYTES):
    """Sentences naming where the ring beats PS S=1 and how many servers PS needs."""
    ring, ps = consts_of("ring"), consts_of("ps")
    if ring is None or ps is None:
        return ["(no ring or no dedicated-PS constants: no crossover)"]
    sizes = buckets(widths, bucket_mb)
    beats = [w for w in workers if step_comm("ring", sizes, w, 0, ring, chunk)
             < step_comm("ps", sizes, w, 1, ps, chunk)]
    need = [(w, servers_to_match(widths, consts_of, w, bucket_mb, chunk)) for w in workers]
    return [f"ring communicates faster than PS with 1 server at W = "
            f"{', '.join(map(str, beats)) if beats else 'none of ' + str(workers)}",
            "servers PS needs to match the ring: " + ", ".join(
                f"W={w}: S>={s}" if s else f"W={w}: no S<=2W" for w, s in need),
            "bandwidth terms alone: S >= W^2/(2(W-1)) ~ W/2 when pushes and pulls overlap (many "
            "chunks per server); never with one chunk per server (2 max(D, WD/S) >= 2D > "
            "2(W-1)/W D), within W/(W-1) of the ring from S = W"]


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("results", help="a results folder (bench.jsonl, runs.jsonl) or a bench.jsonl")
    ap.add_argument("--alpha-us", type=float, help="network latency per message (us)")
    ap.add_argument("--bandwidth-gbps", type=float, help="link bandwidth (Gb/s, each direction)")
    ap.add_argument("--gamma-gbps", type=float, help="reduction speed (GB/s of floats summed); "
                    "default 2/3 of the bench's memcpy bandwidth")
    ap.add_argument("--workers", default="2,4,8,16,32,64,128,256", help="workers to predict")
    ap.add_argument("--models", default="default,wide", help="presets or hidden widths (a-b)")
    ap.add_argument("--batch", type=int, default=64, help="samples per worker per step")
    ap.add_argument("--compute-ms", action="append", default=[],
                    help="MODEL=MS: 1-worker compute per step (default: measured)")
    ap.add_argument("--bucket-mb", type=float, default=BUCKET_MB)
    ap.add_argument("--ps-chunk-mb", type=float, default=PS_CHUNK_BYTES / MIB)
    return ap.parse_args(argv)


def load(path):
    if os.path.isdir(path):
        runs, _ = sr.read_jsonl(os.path.join(path, "runs.jsonl"))
        bench, _ = sr.read_jsonl(os.path.join(path, "bench.jsonl"))
        return runs, bench
    bench, _ = sr.read_jsonl(path)
    return [], bench


def model_widths(name):
    return PRESETS.get(name) or [784] + [int(x) for x in name.split("-")] + [10]


def main(argv=None):
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # `| head` ends the output quietly
    a = parse_args(argv)
    runs, bench = load(a.results)
    chunk = int(a.ps_chunk_mb * MIB)
    gamma = 1.0 / (a.gamma_gbps * 1e9) if a.gamma_gbps else None
    fits = calibrate(bench, gamma, chunk)
    ref = reference(fits)
    print("# Calibration (T = alpha m + beta b + gamma r, per backend and W/S; gamma fixed)")
    print(text(*fits_table(fits, ref)) if fits else "(no usable bench rows)")
    computes = compute_times(runs, bench)
    preds = check_runs(runs, ref, computes, chunk)
    if preds:
        print("\n# Predicted vs measured step time (no overlap = T_compute + T_comm; "
              "overlap = max)")
        print(text(*check_table(preds)))
        good = [p for p in preds if p["expected"] and p["workers"] > 1]
        if good:
            print(f"ranks <= cores, W > 1: {sum(p['within'] for p in good)}/{len(good)} within "
                  f"[overlap, no overlap] +-10%; max |error| of the no-overlap prediction "
                  f"{100 * max(abs(p['err']) for p in good):.0f}%")
    workers = [int(x) for x in a.workers.split(",")]
    net = a.alpha_us is not None or a.bandwidth_gbps is not None
    gamma_net = gamma if gamma is not None else (fits[0].consts.gamma if fits else 0.0)

    def consts_of(kind):
        return network_consts(ref, kind, a.alpha_us, a.bandwidth_gbps, gamma_net if net else None)
    user = dict(x.split("=", 1) for x in a.compute_ms)
    for name in a.models.split(","):
        widths = model_widths(name)
        params = sum(widths[i] * widths[i + 1] + widths[i + 1] for i in range(len(widths) - 1))
        tc = (float(user[name]) * 1e-3, "given") if name in user else \
            compute_for(params, a.batch, computes)
        if tc is None:
            print(f"\n# {name}: no compute time (no 1-worker run; give --compute-ms {name}=MS)")
            continue
        ext = extrapolate(widths, tc[0], consts_of, workers, a.batch, a.bucket_mb, chunk)
        print(f"\n# Extrapolation: {name} MLP {'-'.join(map(str, widths))} ({params:,} params, "
              f"{4 * params / 1e6:.3g} MB), T_compute {1e3 * tc[0]:.3g} ms ({tc[1]}), "
              f"{'given network' if net else 'calibrated constants'}, no-overlap step time")
        for kind in ("ring", "ps", "ps-colocated"):
            c = consts_of(kind)
            print(f"#   {kind}: {c.describe() if c else 'no constants'}")
        print(text(*extrapolation_table(name, ext, a.batch)))
        for line in crossover_lines(widths, consts_of, workers, a.bucket_mb, chunk):
            print("  " + line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
