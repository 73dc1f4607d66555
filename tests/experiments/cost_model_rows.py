"""`starring bench --json` rows that follow the alpha-beta cost model (scripts/cost_model.py)
exactly, for the cost model's tests (test_cost_model.py, test_cost_model_cli.py)."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))), "scripts"))
import cost_model as cm  # noqa: E402

MIB = 1 << 20
SIZES = [65536 * 4**k for k in range(6)]  # 64 KiB .. 64 MiB


def bench_rows(kind, workers, servers, consts, memcpy_gbps, np_=None, cores=64):
    """`starring bench --json` rows whose times follow the model exactly."""
    backend = {"ps-colocated": "ps"}.get(kind, kind)
    srv = "colocated" if kind == "ps-colocated" else servers
    np_ = np_ or workers + (servers if kind == "ps" else 0)
    return [{"bench": "pushpull" if kind.startswith("ps") else "allreduce", "backend": backend,
             "np": np_, "workers": workers, "servers": srv, "size": d, "count": d // 4,
             "type": "float", "wrong": 0, "memcpy_GBps": memcpy_gbps, "cores": cores,
             "oversubscribed": np_ > cores, "algbw_GBps": 1.0, "busbw_GBps": 1.0,
             "time_us": 1e6 * cm.comm_time(kind, d, workers, servers, consts)} for d in SIZES]


# The main sweep's --quick bench as it came out of one run on this 2-core machine (3 ranks: the
# co-located pair time-shares with the idle server rank): 64 KiB at 1.9 ms, 256 KiB at 0.1 ms.
QUICK_COLOCATED_US = {65536: 1930.9316, 262144: 101.183, 1048576: 1272.1162}


def quick_rows():
    truth = cm.Consts(alpha=10e-6, beta=1 / 20e9, gamma=1.5 / 20e9)
    ring = [r for r in bench_rows("ring", 2, 0, truth, 20.0, cores=2) if r["size"] <= MIB]
    ps = [r for r in bench_rows("ps", 2, 1, truth, 20.0, cores=2) if r["size"] <= MIB]
    col = [r for r in bench_rows("ps-colocated", 2, 0, truth, 20.0, np_=3, cores=2)
           if r["size"] <= MIB]
    for r in col:
        r["backend"], r["time_us"] = "ps-colocated@2", QUICK_COLOCATED_US[r["size"]]
    return ring + ps + col
