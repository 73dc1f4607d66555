"""StarRing's cost model (scripts/cost_model.py) against measured training runs: each model's
1-worker compute time per step (T_compute, from 1-worker runs or `starring bench-model` rows),
the bytes of a run's gradient buckets, and its predicted step time (no overlap and perfect
overlap, see "Step time" at the top of cost_model.py) beside the measured one.
Standard library only."""
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import starring_results as sr  # noqa: E402
from cost_model import (BUCKET_MB, PS_CHUNK_BYTES, Observed, buckets, calibrate,  # noqa: E402
                        doubts, median, network_consts, reference, step_comm, step_time,
                        window_for)


def run_kind(rec):
    if rec.get("backend") == "ps":
        return "ps-colocated" if sr.is_colocated(rec) else "ps"
    return rec.get("backend", "?")


def device_kind(rec):
    """"cuda" or "cpu": where a run or bench-model row computed (the summary's device, else the
    flag it was given; runs recorded before the summary said so count as the flag's)."""
    d = str(rec.get("device") or (rec.get("config") or {}).get("device") or "cpu")
    return "cuda" if d.startswith("cuda") else "cpu"


def compute_times(runs, bench=()):
    """{(params, batch, device): (seconds, source)}: the 1-worker compute time per step of each
    model on each kind of device, from BSP 1-worker runs without a straggler (median), else
    `starring bench-model` rows."""
    found = {}
    for r in runs:
        if r.get("status", "ok") == "ok" and r.get("workers") == 1 and not r.get("straggler") \
                and r.get("consistency", "bsp") == "bsp" and r.get("step_time"):
            key = (r["model"]["params"], r.get("batch", 64), device_kind(r))
            found.setdefault(key, []).append(r["step_time"]["compute_s"])
    out = {k: (median(v), f"median of {len(v)} 1-worker run(s)")
           for k, v in found.items()}
    for b in bench:
        if b.get("bench") == "model" and b.get("step_ms"):
            out.setdefault((b["params"], b.get("batch", 64), device_kind(b)),
                           (b["step_ms"] * 1e-3, "bench-model"))
    return out


def compute_for(params, batch, computes, device=None):
    """T_compute for a model: measured, else scaled by parameters (an MLP's FLOPs per sample are
    about 6 x parameters) from the measured model closest in size at the same batch and device.
    No device (the extrapolations): the CPU's, else the GPU's, which the source then names (a
    results folder of GPU runs only extrapolates from those)."""
    if device is None:
        for d in ("cpu", "cuda"):
            got = compute_for(params, batch, computes, d)
            if got:
                return got if d == "cpu" else (got[0], got[1] + ", on cuda")
        return None
    if (params, batch, device) in computes:
        return computes[(params, batch, device)]
    near = [(abs(math.log(p / params)), p, t) for (p, b, d), (t, _) in computes.items()
            if b == batch and d == device]
    if not near:
        return None
    _, p, t = min(near)
    return t * params / p, f"estimated: {p:,}-parameter model's time x {params / p:.3g}"


def run_buckets(rec):
    """Bytes on the wire of each gradient bucket of a run."""
    widths = rec["model"].get("widths") or []
    frac = sr.wire_bytes(rec) / rec["model"]["bytes"]
    return [b * frac for b in buckets(widths, rec.get("bucket_mb", BUCKET_MB))] \
        if widths else [sr.wire_bytes(rec)]


def observed(runs):
    """The measured runs a fit can be checked against (cost_model.contradiction): successful
    BSP runs without an injected straggler (a delay or a stale step the model has no term for
    could only make a run slower than predicted, never faster)."""
    out = []
    for r in runs:
        st = r.get("step_time") or {}
        if r.get("status", "ok") == "ok" and r.get("model") and st.get("total_s") \
                and not r.get("straggler") and r.get("consistency", "bsp") == "bsp":
            out.append(Observed(run_kind(r), r.get("workers", 1), r.get("num_servers", 0),
                                run_buckets(r), st["total_s"], r.get("run_id", "?"),
                                r.get("host")))
    return out


def predict_run(rec, ref, computes, chunk=PS_CHUNK_BYTES):
    """A dict describing the prediction for one ok run, or None when nothing can be said."""
    kind, w = run_kind(rec), rec["workers"]
    tc = compute_for(rec["model"]["params"], rec.get("batch", 64), computes, device_kind(rec))
    if tc is None:
        return None
    notes = []
    if kind == "local" or (w == 1 and kind != "ps"):
        consts, t_comm = None, 0.0
    else:
        consts = network_consts(ref, kind)
        if consts is None:
            return None
        t_comm = step_comm(kind, run_buckets(rec), w, rec.get("num_servers", 0), consts, chunk)
    upper, lower = step_time(tc[0], t_comm)
    measured = rec["step_time"]["total_s"]
    # The same no-overlap prediction with the run's own measured compute in place of the 1-worker
    # one: what is left of the error is the communication model's (ranks sharing a node's memory
    # bandwidth or cores slow each other's compute, which no network model describes).
    own = rec["step_time"].get("compute_s", tc[0]) + t_comm
    if rec.get("oversubscribed"):
        notes.append(f"oversubscribed ({rec['np']} ranks on {rec.get('cores', '?')} cores)")
    if w == 1:
        notes.append("1-worker run: sets T_compute")
    if tc[1].startswith("estimated"):
        notes.append("T_compute " + tc[1])
    in_doubt = consts is not None and ref.get(kind) is not None and bool(doubts(ref[kind]))
    if in_doubt:
        notes.append("constants in doubt (see the calibration notes)")
    if rec.get("straggler") or rec.get("consistency", "bsp") != "bsp":
        notes.append("straggler/asp/ssp: not modeled")
    return {"run_id": rec.get("run_id", "?"), "label": sr.backend_label(rec), "kind": kind,
            "workers": w, "servers": rec.get("num_servers", 0), "np": rec.get("np", w),
            "params": rec["model"]["params"], "measured": measured, "upper": upper,
            "measured_comm": rec["step_time"].get("comm_s", 0.0),
            "lower": lower, "comm": t_comm, "compute": tc[0], "consts": consts,
            "err": (upper - measured) / measured if measured > 0 else float("nan"),
            "own_compute_err": (own - measured) / measured if measured > 0 else float("nan"),
            "within": lower * 0.9 <= measured <= upper * 1.1,
            "expected": not [n for n in notes if n.startswith(("oversub", "straggler"))],
            "in_doubt": in_doubt,
            "notes": notes}


def doubt_clause(good):
    """The bounds sentence's warning when some of its runs were predicted from constants in
    doubt (cost_model.doubts): a fit a run contradicted is passed over for another one, which
    then agrees with that run by selection, not by evidence."""
    n = sum(bool(p.get("in_doubt")) for p in good)
    if not n:
        return ""
    # counted against the runs of the sentence: 1 of 3 was '1 of it'
    who = ("it was" if len(good) == 1 else "all of them were" if n == len(good)
           else f"{n} of them {'was' if n == 1 else 'were'}")
    # no run in doubt within its bounds: no agreement to discount ('0 lie within ...; so this
    # agreement is not evidence' was printed)
    agreed = any(p.get("within") for p in good if p.get("in_doubt"))
    return (f"; {who} predicted from constants in doubt (the calibration notes say why), so "
            + ("this agreement is not evidence for the model" if agreed else
               "the misses test those constants as much as the model"))


def check_runs(runs, bench, computes, chunk=PS_CHUNK_BYTES, gamma=None, windowed=True):
    """Predictions for every ok run, each with constants fitted on the bench sizes around its
    largest bucket (windowed) or on all sizes."""
    refs, out, obs = {}, [], observed(runs)
    for r in runs:
        if r.get("status", "ok") == "ok" and r.get("step_time") and r.get("model"):
            win = window_for(run_buckets(r)) if windowed else None
            if win not in refs:
                refs[win] = reference(calibrate(bench, gamma, chunk, win, obs))
            p = predict_run(r, refs[win], computes, chunk)
            if p:
                out.append(p)
    return out

