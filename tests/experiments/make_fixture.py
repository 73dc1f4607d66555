#!/usr/bin/env python3
"""Writes the small results folder the report test reads (tests/experiments/fixtures/results).

Every number is a closed-form function of the configuration (workers, servers, model size), so
the fixture is reproducible: `python3 tests/experiments/make_fixture.py` rewrites it identically.
It holds what a real sweep folder holds: ok runs of three sweeps (main, straggler, crossover,
bucket), a failed, a timed-out and a skipped run, runs of the faults sweep (a killed and a silent
rank: detected and named, detected without a name, hung), bench rows, and per-run metrics files.
"""
import json
import os
import shutil
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))), "scripts"))
import starring_results as sr  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "fixtures", "results")
CORES = 2


def mlp_params(widths):
    return sum(widths[i] * widths[i + 1] + widths[i + 1] for i in range(len(widths) - 1))


def summary(sweep, run_id, variant, workers, backend, servers="-", hidden=(256, 128), batch=64,
            straggler="", consistency="bsp", bucket_mb=25.0, overlap=True, grid=None):
    widths = [784, *hidden, 10]
    params = mlp_params(widths)
    d = 4 * params
    dedicated = backend == "ps" and servers != "colocated"
    nserv = int(servers) if dedicated else (workers if servers == "colocated" else 0)
    np_ = workers + (nserv if dedicated else 0)
    compute = 1e-9 * 6 * params * batch / 4.0           # 4 GFLOP/s per core
    comm = 1e-3 * (0.05 + d / 1e9) * (1 if workers > 1 or dedicated else 0)
    wait = (0.05 if straggler and consistency == "bsp" else 0.0) + 1e-4 * (workers - 1)
    total = (compute + comm + wait) * 1.1 * max(1.0, np_ / CORES)
    compute = total - wait  # the trainer's convention: compute + wait = step; comm may overlap
    w_sent = d if dedicated else 2 * (workers - 1) / workers * d
    s_bytes = workers * d / nserv if dedicated else 0.0
    acc = 0.84 - (0.02 if straggler and consistency != "bsp" else 0.0) - 0.01 * (workers - 1) / 4
    steps = 60
    ranks = [{"rank": i, "role": "worker" if i < workers else "server",
              "bytes_sent_per_step": w_sent if i < workers else s_bytes,
              "bytes_recv_per_step": w_sent if i < workers else s_bytes,
              "compute_s": compute if i < workers else 0.0, "comm_s": comm, "wait_s": wait,
              "busy_s": total} for i in range(np_)]
    cfg = {"backend": backend, "batch": str(batch)}
    if backend == "ps":
        cfg["servers"] = servers
    rec = {
        "record_schema": "starring.sweep.v1", "sweep": sweep, "run_id": run_id,
        "variant": variant, "config": cfg, "grid_point": grid or {},
        "np": np_, "workers": workers, "num_servers": nserv if dedicated else 0,
        "roles": {"worker": workers, "server": nserv if dedicated else 0},
        "command": f"scripts/mpirun.sh -np {np_} build/bin/starring train --backend {backend}",
        "status": "ok", "exit_code": 0, "elapsed_s": total * steps + 2.0, "git": "0123456789ab",
        "host": "fixture", "date": "2026-11-29T12:00:00Z", "cores": CORES,
        "oversubscribed": np_ > CORES, "quick": False,
        "summary_file": f"runs/{run_id}/summary.json", "metrics_file": f"runs/{run_id}/metrics.jsonl",
        "log_file": f"runs/{run_id}/log.txt",
        "schema": "starring.run.v1", "run_name": run_id, "backend": backend,
        "servers": servers if backend == "ps" else None, "consistency": consistency,
        "staleness": 2, "compress": "none", "bucket_mb": bucket_mb, "overlap": overlap,
        "straggler": straggler, "world_size": np_, "dataset": "synthetic",
        "model": {"widths": widths, "params": params, "bytes": d}, "batch": batch, "accum": 1,
        "global_batch": batch * workers, "lr": 0.05, "epochs": 2, "steps": steps,
        "wall_s": total * steps, "samples_per_s": batch * workers / total,
        "step_time": {"total_s": total, "compute_s": compute, "comm_s": comm, "wait_s": wait},
        "bytes_per_step": {"worker_sent": w_sent, "worker_recv": w_sent,
                           "server_sent": s_bytes, "server_recv": s_bytes},
        "ranks": ranks, "test_accuracy": acc, "test_loss": 0.45, "final_train_loss": 0.4,
        "history": [{"epoch": e, "wall_s": total * steps * e / 2, "train_loss": 0.8 / e,
                     "test_accuracy": acc - 0.03 * (2 - e)} for e in (1, 2)],
        "staleness_hist": ({"0": 50, "1": 30, "2": 20} if consistency != "bsp" else {}),
    }
    # worker w's loss (1 + 0.02 w) times worker 0's: the mean, lowest and highest in closed form
    metrics = [{"step": s, "epoch": s * 2 // steps, "time_s": total * s, "loss": 2.3 / (1 + s / 10),
                "global_loss": 2.3 / (1 + s / 10) * (1 + 0.01 * (workers - 1)),
                "loss_min": 2.3 / (1 + s / 10), "loss_max": 2.3 / (1 + s / 10) * (1 + 0.02 * (workers - 1)),
                "loss_max_worker": workers - 1,
                "grad_norm": 1.0, "lr": 0.05, "samples_per_s": batch * workers / total,
                "compute_s": compute, "comm_s": comm, "wait_s": wait, "bytes_sent": w_sent,
                "bytes_recv": w_sent} for s in range(1, steps + 1)]
    for e in (1, 2):
        metrics.insert(e * steps // 2, {"event": "eval", "epoch": e, "test_loss": 0.45,
                                        "test_accuracy": acc - 0.03 * (2 - e),
                                        "time_s": total * steps * e / 2 + 0.01 * e})
    return rec, metrics


def not_ok(run_id, variant, status, rc, np_, workers, log_tail):
    rec = {"record_schema": "starring.sweep.v1", "sweep": "main", "run_id": run_id,
           "variant": variant, "config": {"backend": "ps", "servers": "1"}, "grid_point": {},
           "np": np_, "workers": workers, "num_servers": 1, "roles": {"worker": workers, "server": 1},
           "command": "" if status == "skipped" else "scripts/mpirun.sh -np 9 ...",
           "status": status, "exit_code": rc, "elapsed_s": 0.0 if status == "skipped" else 90.0,
           "git": "0123456789ab", "host": "fixture", "date": "2026-11-29T12:00:00Z",
           "cores": CORES, "oversubscribed": np_ > CORES, "log_file": f"runs/{run_id}/log.txt"}
    if log_tail is not None:
        rec["log_tail"] = log_tail
    else:
        rec["reason"] = "variant requires a GPU and none was found"
    return rec


FAULT_T = 1795970000.0  # the faulted rank's wall clock at the fault


def faulted(variant, backend, servers, spec, status, rc, after, errors):
    """A faults-sweep record whose `fault` object comes from the real parser on a log."""
    kind, rank, step = spec.split(":")
    np_ = 2 + (int(servers) if servers.isdigit() else 0)
    run_id = f"faults-{variant}-{kind}"
    rec = not_ok(run_id, variant, status, rc, np_, 2, "\n".join(errors))
    rec.update(sweep="faults", num_servers=np_ - 2, config={"backend": backend, "servers": servers,
               "fault": spec, "timeout": "5"}, grid_point={"workers": "2", "fault": spec},
               roles={"worker": 2, "server": np_ - 2}, elapsed_s=after + 0.4)
    what = "hang: going silent" if kind == "hang" else kind
    log = f"[starring] rank {rank}: --fault {what} at step {step} (unix time {FAULT_T:.6f})\n"
    rec["fault"] = sr.fault_outcome(spec, log + "\n".join(errors), FAULT_T + after, status, rc)
    return rec


def fault_records():
    kill = ["mpirun: job stopped: rank 1 on node vm was killed by signal 9 (Killed)"]
    return [
        faulted("ring", "ring", "-", "kill:1:30", "failed", 137, 1.0, kill),
        faulted("ring", "ring", "-", "hang:1:30", "failed", 1, 8.0,
                ["starring: error: rank 0: timeout after 5.0 s in shared-memory ring, waiting "
                 "for data from rank 1 (tag 65536)"]),
        faulted("mpi", "mpi", "-", "hang:1:30", "failed", 1, 8.0,
                ["starring: error: rank 0: timeout after 5.0 s in MPI_Iallreduce of 235146 floats",
                 "mpirun: job stopped: rank 0 called MPI_Abort (error code 1)"]),
        faulted("ps-1-server", "ps", "1", "hang:2:30", "timeout", 124, 119.0, ["(killed)"]),
    ]


def bench_rows():
    rows = []
    for np_ in (2, 4):
        for backend, eff in (("ring", 0.9), ("mpi", 0.5)):
            size = 65536
            while size <= 16 << 20:
                t = 5.0 + size / (4e9 * eff) * 1e6
                algbw = size / t / 1e3
                rows.append({"bench": "allreduce", "backend": backend, "np": np_, "workers": np_,
                             "servers": 0, "size": size, "count": size // 4, "type": "float",
                             "time_us": t, "algbw_GBps": algbw,
                             "busbw_GBps": algbw * 2 * (np_ - 1) / np_, "wrong": 0,
                             "memcpy_GBps": 8.0, "bytes_sent_per_rank": size * 2 * (np_ - 1) / np_,
                             "bytes_recv_per_rank": size * 2 * (np_ - 1) / np_,
                             "cores": CORES, "oversubscribed": np_ > CORES})
                size *= 4
    size = 65536
    while size <= 16 << 20:
        t = 8.0 + 2 * size / 2e9 * 1e6
        rows.append({"bench": "pushpull", "backend": "ps", "np": 3, "workers": 2, "servers": 1,
                     "size": size, "count": size // 4, "type": "float", "time_us": t,
                     "algbw_GBps": size / t / 1e3, "busbw_GBps": 2 * size / t / 1e3, "wrong": 0,
                     "memcpy_GBps": 8.0, "bytes_sent_per_rank": size, "bytes_recv_per_rank": size,
                     "server_bytes_in": [2 * size], "server_bytes_out": [2 * size],
                     "cores": CORES, "oversubscribed": True})
        size *= 4
    size = 65536
    while size <= 16 << 20:  # co-located shards on 2 ranks (for the cost model's calibration)
        t = 20.0 + size / 2e9 * 1e6
        rows.append({"bench": "pushpull", "backend": "ps-colocated", "np": 2, "workers": 2,
                     "servers": "colocated", "size": size, "count": size // 4, "type": "float",
                     "time_us": t, "algbw_GBps": size / t / 1e3, "busbw_GBps": size / t / 1e3,
                     "wrong": 0, "memcpy_GBps": 8.0, "bytes_sent_per_rank": size,
                     "bytes_recv_per_rank": size, "server_bytes_in": [size / 2, size / 2],
                     "server_bytes_out": [size / 2, size / 2], "cores": CORES,
                     "oversubscribed": False})
        size *= 4
    for backend, hide in (("ring", 0.95), ("mpi-nothread", 0.0)):  # bench --mode overlap
        size = 1 << 20
        while size <= 64 << 20:
            comm = 10.0 + size / 4e9 * 1e6
            for kind, h in (("sleep", hide), ("busy", 0.05 * hide), ("serial", 0.0)):
                compute = comm * 1.05
                total = compute + (1 - h) * comm
                rows.append({"bench": "overlap", "backend": backend, "compute": kind, "np": 2,
                             "workers": 2, "servers": 0, "sync_overlap": True, "size": size,
                             "count": size // 4, "tensors": 4, "iters": 20, "t_comm_us": comm,
                             "t_compute_us": compute, "t_total_us": total,
                             "t_inside_us": compute, "overlap_pct": 100.0 * h,
                             "cores": CORES, "oversubscribed": False})
            size *= 4
    rows.append({"status": "failed", "exit_code": 1, "np": 8, "bench_id": "main-bench-x-np8",
                 "command": "scripts/mpirun.sh -np 8 ...", "log_tail": "error"})
    return rows


def runs():
    out = []
    for variant, backend, servers in (("ring", "ring", "-"), ("ps-1", "ps", "1"),
                                      ("ps-colocated", "ps", "colocated")):
        for w in (1, 2, 4):
            out.append(summary("main", f"main-{variant}-w{w}", variant, w, backend, servers,
                               grid={"workers": str(w)}))
    for w in (1, 2):  # a second model, so the scaling plots get two panels
        out.append(summary("main", f"main-wide-ring-w{w}", "ring", w, "ring", hidden=(4096, 4096),
                           grid={"workers": str(w), "preset": "wide"}))
    for variant, backend, cons in (("ring", "ring", "bsp"), ("ps-bsp", "ps", "bsp"),
                                   ("ps-ssp", "ps", "ssp"), ("ps-asp", "ps", "asp")):
        for strag in ("", "1:50"):
            out.append(summary("straggler", f"straggler-{variant}-{strag or 'none'}", variant, 4,
                               backend, "1" if backend == "ps" else "-", straggler=strag,
                               consistency=cons, grid={"workers": "4", "straggler": strag or "-"}))
    for variant, backend, servers in (("ring", "ring", "-"), ("ps-1", "ps", "1")):
        for width in (32, 512, 2048):
            out.append(summary("crossover", f"crossover-{variant}-{width}", variant, 2, backend,
                               servers, hidden=(width, width),
                               grid={"workers": "2", "hidden": f"{width},{width}"}))
    for mb in (1.0, 16.0, 512.0):
        for overlap in (True, False):
            out.append(summary("bucket", f"bucket-ring-{mb:g}-{overlap}", "ring", 2, "ring",
                               bucket_mb=mb, overlap=overlap,
                               grid={"workers": "2", "bucket-mb": f"{mb:g}",
                                     "overlap": "on" if overlap else "off"}))
    return out


def main():
    shutil.rmtree(OUT, ignore_errors=True)
    os.makedirs(OUT)
    with open(os.path.join(OUT, "runs.jsonl"), "w") as f:
        for rec, metrics in runs():
            f.write(json.dumps(rec, sort_keys=True) + "\n")
            if rec["sweep"] == "main":
                os.makedirs(os.path.join(OUT, "runs", rec["run_id"]))
                with open(os.path.join(OUT, rec["metrics_file"]), "w") as m:
                    m.writelines(json.dumps(x, sort_keys=True) + "\n" for x in metrics)
        for rec in (not_ok("main-ps-1-w8", "ps-1", "failed", 1, 9, 8, "rank 3: timeout waiting for rank 8"),
                    not_ok("main-ps-1-w16", "ps-1", "timeout", 124, 17, 16, "(killed after 90 s)"),
                    not_ok("main-nccl-w2", "nccl", "skipped", 0, 2, 2, None)):
            f.write(json.dumps(rec, sort_keys=True) + "\n")
        for rec in fault_records():
            f.write(json.dumps(rec, sort_keys=True) + "\n")
    with open(os.path.join(OUT, "bench.jsonl"), "w") as f:
        f.writelines(json.dumps(r, sort_keys=True) + "\n" for r in bench_rows())


if __name__ == "__main__":
    main()
