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
                    inside a step, so a step pays its latency once; also nccl)
  MPI_Allreduce     m = 2 log2(p) + 2f      b = (2(p-1)/p + 2f) D   r = (N-1)/N D
                    (Rabenseifner: recursive halving then doubling on p = 2^floor(log2 N) ranks,
                    what Open MPI's fixed decision rules pick for large messages and what SimGrid
                    SMPI's ompi selector reproduces exactly; when N is not a power of two, f = 1:
                    the N - p extra ranks first hand their whole buffer to a partner and get the
                    result back last, two more messages of D on the busiest link)
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
memory traffic per byte reduced against memcpy's 2: gamma = 1.5 / memcpy_Bps, the median over the
bench jobs with no more ranks than cores where there are any; --gamma-gbps
overrides) and (alpha, beta) >= 0 are fit per backend and per (W, S) by least absolute relative
deviations (a 64 KiB row counts as much as a 64 MiB one, and one row slowed by another process's
time slice does not move the fit; the largest relative residual is reported as the fit error).
It is judged on the rows it does not pass through (fit_spread); one with a term clamped at 0
or judged poor is not named fastest at other scales (doubts; docs/COST_MODEL.md, *Predicting other scales*),
nor is one from a bench pass on a busy host (other processes' CPUs and the job's ranks more than
the cores: host_other_cpus) or one that a measured run contradicts (its communication alone
predicted at over 3x the run's whole step). A fit with a term clamped at 0 (1/beta infinite), a
median error over POOR_FIT or a contradicting run is unfit: it and one on a busy host are used
for predictions only when no better fit exists, and the tables and captions then say so
(used_caveats), as they do for a time-shared fit used in place of a core-per-rank one.
One node's bench
measures shared memory and this machine's MPI, not a network: use --alpha-us/--bandwidth-gbps
to predict another one.

Step time: T_step = T_compute + T_comm (no overlap, an upper bound) and max(T_compute, T_comm)
(perfect overlap, a lower bound), with T_compute the measured 1-worker compute time per step of
that model (weak scaling: every worker computes the same batch). Runs with more ranks than cores
time-share the CPU: the model is only expected to hold for ranks <= cores.

Standard library only. The command line and the tables it prints: cost_model_cli.py; the
model against measured training runs (T_compute, predicted vs measured): cost_model_runs.py;
judging the fits and choosing one per backend (fit_spread, doubts, unfit, reference,
used_caveats; importable from here too): cost_model_fits.py.
"""
import math
import os
import sys
from dataclasses import dataclass, field

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import starring_results as sr  # noqa: E402
# Re-exported: callers judge and choose fits through this module (cm.reference, cm.doubts, ...).
from cost_model_fits import (POOR_FIT, doubts, fit_name, fit_spread, median,  # noqa: E402,F401
                             reference, unfit, used_caveats)

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
    if w <= 1 and kind in ALLREDUCE:
        return 0.0, 0.0, 0.0
    if kind == "mpi":
        p = 1 << (w.bit_length() - 1)
        fold = 0 if p == w else 1
        return (2.0 * math.log2(p) + 2 * fold, (2.0 * (p - 1) / p + 2 * fold) * d,
                (w - 1) / w * d)
    if kind in ALLREDUCE:
        return 2.0 * (w - 1), 2.0 * (w - 1) / w * d, (w - 1) / w * d
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
    base: "Fit" = None    # a windowed refit: the all-sizes fit its alpha comes from
    cores: int = 0        # the host's, as the bench rows give them (0: not recorded)
    host_busy: float = None  # other processes' CPUs during a pass on a busy host (sr.host_busy)
    contradicted: tuple = None  # (ratio, run_id): a measured run it overpredicts (contradiction)
    hosts: frozenset = frozenset()  # the bench rows' hosts, to compare with runs of the same
    passed_over: list = field(default_factory=list)  # set by reference(): core-per-rank fits
    # of the backend this time-shared one was used in place of


@dataclass
class Observed:
    """One measured training run as the calibration checks fits against it (built from run
    records by cost_model_runs.observed): the bytes of its gradient buckets and its mean step."""
    kind: str
    workers: int
    servers: int
    buckets: list
    step_s: float
    run_id: str
    host: str = None


def bench_kind(row):
    name = row["backend"].partition("@")[0]
    if name == "ps":
        return "ps-colocated" if row.get("servers") == "colocated" else "ps"
    return name


def gamma_from_bench(rows):
    """s per byte reduced: 1.5 / memcpy bandwidth (median over rows); 0 without a memcpy figure.
    Rows of jobs with more ranks than cores are left out where others exist, as the busbw plot's
    memcpy line leaves them out: their memcpy was timed time-shared (2.1-2.9 GB/s beside the
    2-rank job's 4.6 on 2 cores), which made the reduction look 1.6 times slower."""
    bw = [r["memcpy_GBps"] for r in rows if r.get("memcpy_GBps")]
    own = [r["memcpy_GBps"] for r in rows if r.get("memcpy_GBps") and not r.get("oversubscribed")]
    bw = own or bw
    return 1.5 / (median(bw) * 1e9) if bw else 0.0


def robust_fit(m, b, y, alpha=None):
    """alpha, beta >= 0 minimizing the sum of |relative residuals| (least absolute deviations:
    one row hit by a time slice of another process does not drag the fit). The optimum of this
    2-parameter L1 problem passes through two rows (or one, with a term at 0), so every pair
    is tried: exact, and cheap for a bench's ten or so sizes. A given alpha: beta alone."""
    n = len(y)
    if alpha is not None:
        cands = [(alpha, max(0.0, (y[i] - alpha * m[i]) / b[i])) for i in range(n) if b[i] > 0]
        return min(cands, key=lambda ab: sum(abs(yi - ab[0] * mi - ab[1] * bi) / yi
                                             for mi, bi, yi in zip(m, b, y)), default=(alpha, 0.0))
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


def fit_group(rows, kind, workers, servers, gamma, chunk=PS_CHUNK_BYTES, alpha=None):
    rows = sorted(rows, key=lambda r: r["size"])
    t = [r["time_us"] * 1e-6 for r in rows]
    mbr = [terms(kind, r["size"], workers, servers, chunk) for r in rows]
    y = [ti - x[2] * gamma for ti, x in zip(t, mbr)]
    alpha, beta = robust_fit([x[0] for x in mbr], [x[1] for x in mbr],
                             [yi if yi > 0 else ti for yi, ti in zip(y, t)], alpha)
    name = f"{kind} W={workers}" + (f" S={servers}" if kind == "ps" else "")
    c = Consts(alpha, beta, gamma, name)
    res = [(comm_time(kind, r["size"], workers, servers, c, chunk) - ti) / ti
           for r, ti in zip(rows, t)]
    cores = max((r.get("cores", 0) for r in rows), default=0)
    np_ = max(r["np"] for r in rows)  # the job's ranks: an op on W of them (NAME@W) shares cores
    # rows that name their hosts were judged host by host by the job; others only by np
    judged = all(r.get("hosts") for r in rows)
    over = any(r.get("oversubscribed") for r in rows) or (
        not judged and cores > 0 and np_ > cores)
    busy = [r["host_other_cpus"] for r in rows if sr.host_busy(r)]
    return Fit(kind, workers, servers, c, max(abs(x) for x in res), [r["size"] for r in rows],
               over, np_, res, cores=cores, host_busy=max(busy) if busy else None,
               hosts=frozenset(r["host"] for r in rows if r.get("host")))


CONTRADICTED = 3.0  # predicted communication over a run's whole measured step time


def contradiction(f, observed, chunk=PS_CHUNK_BYTES):
    """(ratio, run_id) of the measured run, of the fit's backend, W (and S) and host, whose
    communication alone the fit predicts at over CONTRADICTED times the run's whole step time,
    the largest such ratio; None when no run says so. The run did everything in less time than
    the fit gives its synchronization: the bench pass measured something else (a pass on 2 busy
    cores fitted the ring 5.9 ms per message, 17 times its own 2-worker run's step)."""
    worst = None
    for o in observed:
        if (o.kind, o.workers) != (f.kind, f.workers) or o.step_s <= 0 or \
                (f.kind == "ps" and o.servers != f.servers) or \
                (o.host and f.hosts and o.host not in f.hosts):
            continue
        ratio = step_comm(f.kind, o.buckets, o.workers, o.servers, f.consts, chunk) / o.step_s
        if ratio > CONTRADICTED and (worst is None or ratio > worst[0]):
            worst = (ratio, o.run_id)
    return worst


def median_abs(xs):
    return median([abs(x) for x in xs]) if xs else 0.0


def window_for(bucket_bytes, spread=8.0):
    """The bench sizes whose cost per byte calibrates a prediction: within 8x of its largest
    bucket (on one node the cost per byte changes where messages outgrow the caches)."""
    d = max(bucket_bytes)
    return (d / spread, d * spread)


def _in_window(rows, window):
    """The rows inside the window, or else the size closest to it (log scale)."""
    inside = [r for r in rows if window[0] <= r["size"] <= window[1]]
    centre = math.sqrt(window[0] * window[1])
    return inside or [min(rows, key=lambda r: abs(math.log(r["size"] / centre)))]


def calibrate(bench, gamma=None, chunk=PS_CHUNK_BYTES, window=None, observed=()):
    """Fits per (backend, W, S) from bench rows (correct rows with at least 2 sizes). With a
    window (lo, hi) bytes, alpha (a small-message property) comes from all sizes and beta is
    refit on the sizes in the window (see _in_window): at large sizes a PS's chunk count grows
    with the bytes, so two large sizes alone cannot tell per-message from per-byte cost.
    observed: measured runs (Observed) that can contradict a fit (see contradiction)."""
    # --compress rows move half the bytes the model's float32 terms count: not calibration
    rows = [r for r in bench if "size" in r and r.get("time_us", 0) > 0 and not r.get("wrong")
            and bench_kind(r) in KINDS and r["size"] > 0 and not r.get("compress")]
    g = gamma_from_bench(rows) if gamma is None else gamma
    groups = {}
    for r in rows:
        kind = bench_kind(r)
        s = r["servers"] if kind == "ps" and isinstance(r.get("servers"), int) else 0
        key = (kind, int(r.get("workers", r["np"])), s, r["np"])
        groups.setdefault(key, {})[r["size"]] = r  # a repeated size: the last row wins
    fits = []
    for key, g_ in sorted(groups.items()):
        # One worker of an all-reduce or co-located PS moves nothing (its terms are 0): a fit
        # would read 0 cost, and as a job that fits on the cores it became the reference.
        if len(g_) >= 2 and any(terms(key[0], d, key[1], key[2], chunk) != (0.0, 0.0, 0.0)
                                for d in g_):
            f = fit_group(list(g_.values()), *key[:3], g, chunk)
            if window is not None:
                f, base = fit_group(_in_window(list(g_.values()), window), *key[:3], g, chunk,
                                    f.consts.alpha), f
                f.base = base
            f.contradicted = contradiction(f, observed, chunk)
            fits.append(f)
    return fits


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


# ---- extrapolation -------------------------------------------------------------------------------

SERIES = (("ring", "ring", lambda w: 0), ("ps S=1", "ps", lambda w: 1),
          ("ps S=W/2", "ps", lambda w: max(1, w // 2)),
          ("ps co-located", "ps-colocated", lambda w: 0))


def series_doubts(ref, alpha_us=None, bandwidth_gbps=None):
    """{SERIES name: reasons} for the extrapolated series whose constants are in doubt (see
    doubts): they are drawn and tabulated, but not named fastest."""
    out = {}
    for name, kind, _ in SERIES:
        f = ref.get(kind)
        why = doubts(f, alpha_us is not None, bandwidth_gbps is not None) if f else []
        if why:
            out[name] = why
    return out


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


def model_reference(bench, widths, gamma=None, chunk=PS_CHUNK_BYTES, bucket_mb=BUCKET_MB,
                    windowed=True, observed=()):
    """Reference fits for predicting a model: on the bench sizes around its largest bucket."""
    win = window_for(buckets(widths, bucket_mb)) if windowed else None
    return reference(calibrate(bench, gamma, chunk, win, observed))


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


if __name__ == "__main__":  # the command line lives in cost_model_cli.py (tables, main)
    import cost_model_cli
    sys.exit(cost_model_cli.main())
