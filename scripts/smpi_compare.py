#!/usr/bin/env python3
"""The alpha-beta cost model (scripts/cost_model.py) against SimGrid/SMPI runs of the same code
on the same network: smpi_bench rows written by `scripts/smpi_bench.sh --json-out FILE`.

  scripts/smpi_compare.py FILE [--markdown] [--gamma-gbps G]

Each row's platform (recorded by smpi_bench.sh) gives the model its constants: alpha = the
host-to-host latency, 1/beta = the link bandwidth, gamma = 0 when the simulation charged no
computation (the default; with --compute runs give --gamma-gbps). The model's times are
cost_model.comm_time: the ring formula, 2(N-1) alpha + 2(N-1)/N D beta, for "ring", and for
"mpi" Rabenseifner's (recursive-halving reduce-scatter, recursive-doubling all-gather on
p = 2^floor(log2 N) ranks, the N - p others folded in before and out after), which is what
SMPI's "ompi" collective selector runs at these sizes; the last columns show what the
ring formula would say for MPI_Allreduce (the "as a ring" columns), which the model used before
it was checked here. Push + pull rows of the parameter server's message pattern (smpi_bench
--backends ps --servers S|colocated) get a second table against the dedicated-PS formula,
2 n max(W, S) alpha + max(D, W D/S) (1 + 1/n) beta with n = ceil(D / (S c)) chunks per server,
or the co-located one, 2 (W-1) n alpha + 2 (W-1)/W D beta with n = ceil(D / (W c))
(c = the rows' --ps-chunk-bytes, recorded in each row; --chunk-bytes for rows without it).
Standard library only.
"""
import argparse
import os
import signal
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cost_model as cm  # noqa: E402
import cost_model_cli as cli  # noqa: E402
import starring_results as sr  # noqa: E402


def consts_of(platform, gamma_gbps):
    if platform.get("compute") and not gamma_gbps:
        raise SystemExit("smpi_compare.py: rows simulated with --compute: give --gamma-gbps")
    gamma = 1.0 / (gamma_gbps * 1e9) if platform.get("compute") else 0.0
    return cm.Consts(alpha=platform["latency_us"] * 1e-6,
                     beta=1.0 / (platform["bandwidth_gbps"] * 1e9 / 8), gamma=gamma,
                     source="smpi platform")


def err(measured, model):
    return f"{100 * (model - measured) / measured:+.1f}%" if measured > 0 else "-"


def table(rows, gamma_gbps):
    """One line per (platform, np, size): SMPI and model times (us) for ring and mpi."""
    by = {}
    for r in rows:
        if r.get("simulated") and r.get("bench") == "allreduce":
            key = (sr_key(r["platform"]), r["np"], r["size"])
            name = "ring" if r["backend"] == "ring-p2p" else r["backend"]
            by.setdefault(key, {"platform": r["platform"]})[name] = r
    head = ["np", "size", "ring SMPI us", "ring model us", "ring err", "mpi SMPI us",
            "mpi model us", "mpi err", "mpi as a ring us", "as-ring err", "#wrong"]
    out = []
    for (_, n, size), g in sorted(by.items(), key=lambda kv: (kv[0][0], kv[0][1], kv[0][2])):
        c = consts_of(g["platform"], gamma_gbps)
        model = cm.comm_time("ring", size, n, 0, c) * 1e6
        rab = cm.comm_time("mpi", size, n, 0, c) * 1e6
        ring, mpi = g.get("ring"), g.get("mpi")
        line = [str(n), size_str(size)]
        line += [f"{ring['time_us']:.1f}", f"{model:.1f}", err(ring["time_us"], model)] if ring \
            else ["-", f"{model:.1f}", "-"]
        line += [f"{mpi['time_us']:.1f}", f"{rab:.1f}", err(mpi["time_us"], rab),
                 f"{model:.1f}", err(mpi["time_us"], model)] if mpi else ["-"] * 5
        line.append(str(sum(x["wrong"] for x in (ring, mpi) if x)))
        out.append(line)
    return head, out


def ps_table(rows, gamma_gbps, chunk):
    """One line per PS row: (W, S, size), SMPI and the dedicated-PS formula's time (us)."""
    head = ["W", "S", "size", "chunks/server", "PS SMPI us", "PS model us", "err", "#wrong"]
    out = []
    ps = [r for r in rows if r.get("simulated") and r.get("bench") == "pushpull"]
    for r in sorted(ps, key=lambda r: (sr_key(r["platform"]), r["servers"] == "colocated",
                                       r["workers"], str(r["servers"]), r["size"])):
        c = consts_of(r["platform"], gamma_gbps)
        ch = r.get("ps_chunk_bytes", chunk)
        coloc = r["servers"] == "colocated"
        kind, s = ("ps-colocated", 0) if coloc else ("ps", r["servers"])
        model = cm.comm_time(kind, r["size"], r["workers"], s, c, ch) * 1e6
        n = -(-r["size"] // ((r["workers"] if coloc else s) * ch))
        out.append([str(r["workers"]), "coloc." if coloc else str(s), size_str(r["size"]), str(n),
                    f"{r['time_us']:.1f}", f"{model:.1f}", err(r["time_us"], model),
                    str(r["wrong"])])
    return head, out


def sr_key(platform):
    return tuple(sorted((k, str(v)) for k, v in platform.items()))


def size_str(b):
    return f"{b >> 20} MiB" if b >= 1 << 20 and b % (1 << 20) == 0 else f"{b} B"


def main(argv=None):
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("rows", help="JSON lines from scripts/smpi_bench.sh --json-out")
    ap.add_argument("--markdown", action="store_true", help="a Markdown table")
    ap.add_argument("--gamma-gbps", type=float, help="reduction speed for --compute runs")
    ap.add_argument("--chunk-bytes", type=int, default=cm.PS_CHUNK_BYTES,
                    help="--ps-chunk-bytes of PS rows that do not record it (default 4 MiB)")
    a = ap.parse_args(argv)
    rows, bad = sr.read_jsonl(a.rows)
    for b in bad:
        print(f"# skipped unreadable line {b}", file=sys.stderr)
    if not rows:
        raise SystemExit(f"smpi_compare.py: no rows in {a.rows}")
    platforms = {sr_key(r["platform"]): r["platform"] for r in rows if "platform" in r}
    for p in platforms.values():
        print(f"# platform: {p['bandwidth_gbps']} Gb/s links, {p['latency_us']} us host to host, "
              f"network model {p['net_model']}, MPI_Allreduce selector '{p['coll_selector']}', "
              f"smpi/test {p['smpi_test_s']} s, computation "
              f"{'charged' if p['compute'] else 'free'}")
    print("# model err = (model - SMPI) / SMPI; model: scripts/cost_model.py comm_time")
    for head, out in (table(rows, a.gamma_gbps), ps_table(rows, a.gamma_gbps, a.chunk_bytes)):
        if out:
            print(cli.markdown(head, out) if a.markdown else cli.text(head, out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
