"""Sweep files for the sweep driver's tests (test_sweep.py, test_sweep_interrupt.py)."""


def small_sweep(timeout, train_extra, rest):
    """A sweep file for the failure, fault, Ctrl-C and GPU tests: a 16-unit MLP on 512 synthetic
    samples, `train_extra` more [train] lines, then `rest` (grid and variants)."""
    return f"""
[sweep]
timeout_s = {timeout}
report = no

[train]
dataset = synthetic
synthetic-train = 512
synthetic-test = 128
hidden = 16
batch = 16
progress = off
{train_extra}
""" + rest
