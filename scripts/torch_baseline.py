#!/usr/bin/env python3
"""PyTorch's training step on StarRing's two MLPs, timed the way `starring bench-model` times its
own, so that both can run side by side on one machine (the issue's yardstick is PyTorch with one
thread). Needs PyTorch (not installed by scripts/setup.sh; the GPU check machine has it).

  scripts/torch_baseline.py [--device cpu|cuda] [--threads 1] [--batch 64] [--json FILE]

Per model (default 784-256-128-10, wide 784-4096-4096-10): nn.Linear layers with ReLU, softmax
cross-entropy, SGD with momentum 0.9 (lr 0.05), on one fixed random batch, as bench-model does.
Timing: 5 untimed steps, then rounds of 20 steps (2 for the wide model), the GPU synchronized at
the end of each round, until at least 5 rounds and 2 s; the median round gives samples/s.
"""
import argparse
import json
import sys
import time

from result_files import write_text_whole

MODELS = {"default": [784, 256, 128, 10], "wide": [784, 4096, 4096, 10]}


def mlp(torch, widths):
    layers = []
    for i, (a, b) in enumerate(zip(widths, widths[1:])):
        layers.append(torch.nn.Linear(a, b))
        if i + 2 < len(widths):
            layers.append(torch.nn.ReLU())
    return torch.nn.Sequential(*layers)


def time_model(torch, name, widths, device, batch):
    torch.manual_seed(42)
    model = mlp(torch, widths).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    x = torch.rand(batch, widths[0], device=device)
    y = torch.randint(0, widths[-1], (batch,), device=device)
    loss_fn = torch.nn.CrossEntropyLoss()

    def step():
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()

    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    for _ in range(5):
        step()
    sync()
    iters = 2 if sum(a * b for a, b in zip(widths, widths[1:])) > 5_000_000 else 20
    rounds, start = [], time.perf_counter()
    while len(rounds) < 5 or time.perf_counter() - start < 2.0:
        t0 = time.perf_counter()
        for _ in range(iters):
            step()
        sync()
        rounds.append((time.perf_counter() - t0) / iters)
    rounds.sort()
    med = rounds[len(rounds) // 2]
    params = sum(p.numel() for p in model.parameters())
    return {"bench": "torch-model", "model": name, "params": params, "device": device,
            "batch": batch, "threads": torch.get_num_threads(), "torch": torch.__version__,
            "steps_timed": len(rounds) * iters, "step_ms": med * 1e3,
            "samples_per_s": batch / med}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--threads", type=int, default=1, help="torch.set_num_threads (CPU)")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--json", help="write the rows here, one JSON object per line")
    a = ap.parse_args()
    try:
        import torch
    except ImportError:
        print("torch_baseline: PyTorch is not installed", file=sys.stderr)
        return 2
    if a.device == "cuda" and not torch.cuda.is_available():
        print("torch_baseline: --device cuda but PyTorch sees no GPU", file=sys.stderr)
        return 2
    torch.set_num_threads(a.threads)
    where = torch.cuda.get_device_name(0) if a.device == "cuda" else f"{a.threads} thread(s)"
    print(f"# PyTorch {torch.__version__} on {a.device} ({where}), batch {a.batch}, SGD momentum")
    print(f"# {'model':<8} {'params':>10} {'samples/s':>10} {'step(ms)':>9}")
    rows = []
    for name, widths in MODELS.items():
        r = time_model(torch, name, widths, a.device, a.batch)
        rows.append(r)
        print(f"  {name:<8} {r['params']:>10} {r['samples_per_s']:>10.0f} {r['step_ms']:>9.3f}")
    if a.json:
        write_text_whole(a.json, "".join(json.dumps(r) + "\n" for r in rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
