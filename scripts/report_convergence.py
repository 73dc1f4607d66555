"""The convergence figure of StarRing's report (scripts/report.py): training loss and test
accuracy against the seconds spent training, and how a run's metrics lines are read for it.
Same conventions as report_plots.py (Figure or Skipped, Agg backend)."""
import matplotlib.pyplot as plt

import starring_results as sr

from report_plots import (Figure, Skipped, _facets, _save, busy_runs_note, color_of,
                          oversub_note, scaling_runs, scaling_skip_reason, series_labels)


def _smooth(values, k):
    out, acc = [], 0.0
    for i, v in enumerate(values):
        acc += v
        if i >= k:
            acc -= values[i - k]
        out.append(acc / min(i + 1, k))
    return out


def step_loss(m):
    """A step line's training loss: the mean over every worker's (global_loss, written since
    --metrics-loss all) where the line has it, else worker 0's (older runs, --metrics-loss
    worker0). A null global_loss (a worker's loss was not a number) is NaN, a gap in the curve,
    not worker 0's loss, which would hide the divergence."""
    if "global_loss" not in m:
        return m["loss"]
    g = m["global_loss"]
    return g if isinstance(g, (int, float)) else float("nan")


def training_clock(record, lines):
    """A run's metrics lines with every time_s on the training clock (evaluation and checkpoints
    not counted). Runs recorded before 6673712 (no job.leg_train_s in their summary) counted in a
    step line's time_s the evaluations and checkpoints before it, which the event lines' time_s
    did not: their step lines move back by that time, read at the first step after each event
    (its time_s less the event's and less its own compute + wait)."""
    if "leg_train_s" in (record.get("job") or {}):
        return lines
    out, offset, event_at = [], 0.0, None
    for m in lines:
        if not isinstance(m.get("time_s"), (int, float)):
            out.append(m)
            continue
        if "event" in m:
            event_at = m["time_s"]
            out.append(m)
            continue
        if event_at is not None:
            step_s = m.get("compute_s", 0.0) + m.get("wait_s", 0.0)
            offset = max(0.0, m["time_s"] - event_at - step_s)
            event_at = None
        out.append(dict(m, time_s=m["time_s"] - offset) if offset else m)
    return out


# What a run trained with, beyond its backend: runs that differ in any of these (another sweep's
# dataset, lr or epochs) end apart for that reason, not for the order of the summation.
_TRAINING = ("dataset", "epochs", "lr", "batch", "accum", "compress", "quick", "straggler")
_BACKEND = ("backend", "servers", "variant", "workers", "consistency")


def _training_settings(r):
    """A run's settings apart from its backend (and servers, variant, worker count)."""
    out = {k: r.get(k) for k in _TRAINING}
    out["widths"] = tuple((r.get("model") or {}).get("widths") or ())
    for source in (r.get("config") or {}, r.get("grid_point") or {}):
        out.update({k: v for k, v in source.items() if k not in _BACKEND})
    return out


def _same_steps_note(runs, names):
    """The caption sentence for synchronous runs of one worker count whose final accuracies
    differ: the quickstart's W=4 runs ended at 0.8880 (ring) and 0.8862 (both parameter-server
    layouts), 0.826 and 0.834 after the first epoch, beside a caption saying the curves differ
    in speed, not in shape. The summation order differs (ring order against worker order), and
    training amplifies the rounding. Only runs of one worker count with the same settings apart
    from the backend are compared so, and only where two backends are among them: a second ring
    W=2 run from another sweep (other dataset, lr and epochs) read as the backends' rounding.
    Runs that end apart with other settings are said to, naming the settings that differ."""
    sync = [r for r in runs if not (r.get("backend") == "ps"
                                    and r.get("consistency") in ("ssp", "asp"))
            and isinstance(r.get("test_accuracy"), (int, float))]
    parts, other, spread = [], [], 0.0
    for w in sorted({r["workers"] for r in sync}):
        at_w = [r for r in sync if r["workers"] == w]
        groups = []  # [settings, runs], in the order first met
        for r in at_w:
            s = _training_settings(r)
            g = next((g for g in groups if g[0] == s), None)
            if g is None:
                groups.append([s, [r]])
            else:
                g[1].append(r)
        for _, g in groups:
            at = sorted(g, key=lambda r: names[id(r)])
            accs = [r["test_accuracy"] for r in at]
            if (len({sr.backend_label(r) for r in at}) > 1
                    and max(accs) - min(accs) >= 0.0005):
                spread = max(spread, max(accs) - min(accs))
                parts.append(f"W={w}: " + ", ".join(f"{names[id(r)]} {r['test_accuracy']:.4f}"
                                                     for r in at))
        accs = [r["test_accuracy"] for r in at_w]
        if len(groups) > 1 and max(accs) - min(accs) >= 0.0005:
            differ = sorted({k for a, _ in groups for b, _ in groups for k in set(a) | set(b)
                             if a.get(k) != b.get(k)})
            at = sorted(at_w, key=lambda r: names[id(r)])
            other.append(f"W={w}: " + ", ".join(f"{names[id(r)]} {r['test_accuracy']:.4f}"
                                                 for r in at) + f" ({', '.join(differ)} differ)")
    out = ""
    if parts:
        out += (" The synchronous runs of one worker count and the same settings still end "
                "apart here (" + "; ".join(parts) + "): the backends add the workers' "
                "gradients in different orders (the ring in ring order, a parameter server in "
                "worker order, MPI_Allreduce in Open MPI's), and training amplifies the rounding "
                "over the steps (docs/TESTING.md, Equivalence of the backends)"
                + ("; over a point apart is more than that usually gives: compare the runs' "
                   "settings" if spread >= 0.01 else "") + ".")
    if other:
        out += (" Runs of one worker count that trained with different settings end apart for "
                "that reason: " + "; ".join(other) + ".")
    return out


def convergence(runs, metrics, out_dir):
    every = runs
    runs = [r for r in scaling_runs(runs) if r.get("history") or metrics.get(r["run_id"])]
    if not runs:
        return Skipped("Loss and accuracy vs wall time", scaling_skip_reason(
            every, lambda r: r.get("history") or metrics.get(r["run_id"]),
            "a history or metrics file"))
    facets = _facets(runs)
    model, runs = next(iter(facets.items()))  # the smallest model only: one panel per W
    others = list(facets.items())[1:]  # said in the caption: their curves are on no plot
    workers = sorted({r["workers"] for r in runs})
    names = series_labels(runs)  # two sweeps' ring runs: two lines of one name
    fig, axes = plt.subplots(2, len(workers), figsize=(4.6 * len(workers), 7.2), squeeze=False)
    evaluations = []  # per run drawn: how many accuracy points
    for col, w in enumerate(workers):
        for r in sorted((r for r in runs if r["workers"] == w), key=lambda r: names[id(r)]):
            color = color_of(names[id(r)])
            label = names[id(r)] + (f" ({r['np']} ranks on {r['cores']} cores)"
                                    if r.get("oversubscribed") else "")
            lines = training_clock(r, metrics.get(r["run_id"], []))
            steps = [m for m in lines if "loss" in m and "time_s" in m]
            if steps:
                k = max(1, len(steps) // 40)
                axes[0][col].plot([m["time_s"] for m in steps],
                                  _smooth([step_loss(m) for m in steps], k), color=color,
                                  label=label)
            evals = [m for m in lines if m.get("event") == "eval"]
            pts = [(m["time_s"], m["test_accuracy"]) for m in evals] or [
                (h["wall_s"], h["test_accuracy"]) for h in r.get("history") or []]
            if pts:
                axes[1][col].plot([p[0] for p in pts], [p[1] for p in pts], "o-", color=color,
                                  label=label)
                evaluations.append(len(pts))
        # A fraction: autoscale around runs that all reached 1.0 (the scaling sweep's synthetic
        # data) drew the axis up to 1.04.
        lo, hi = axes[1][col].get_ylim()
        if hi > 1.0:
            axes[1][col].set_ylim(lo, 1.0 + 0.1 * (1.0 - min(lo, 0.99)))
        axes[0][col].set_title(f"{w} worker{'s' if w > 1 else ''}")
        axes[0][col].set_ylabel("training loss (moving average)")
        axes[1][col].set_ylabel("test accuracy (fraction)")
        for row in (0, 1):
            axes[row][col].set_xlabel("training seconds (evaluation, checkpoints not counted)")
            axes[row][col].grid(alpha=0.3)
            if axes[row][col].lines:
                axes[row][col].legend(fontsize=8)
    fig.suptitle(f"{model}: training loss and test accuracy vs wall time")
    name = _save(fig, out_dir, "convergence.png")
    return Figure(name, "Loss and accuracy vs wall time",
                  f"{model}: training loss per step (the mean over every worker's, the metrics' "
                  "global_loss; worker 0's in runs recorded without it; moving average) and test "
                  "accuracy after each epoch, against the seconds spent training since the first "
                  "step (the metrics' time_s, the history's wall_s: evaluation and checkpoints "
                  "not counted; runs recorded before 6673712, whose step lines counted them, are "
                  "moved back by them), "
                  "one column per worker count. Under synchronous training the backends compute "
                  "the same steps, so the curves differ in speed, not in shape."
                  + (" Runs of the other models are not drawn: " + "; ".join(
                      f"{m}, {len(rs)} run{'s' if len(rs) > 1 else ''}" for m, rs in others)
                     + "; the summary table gives their test accuracy." if others else "")
                  + (" Every run here was evaluated once, at its end"
                     # a longer run evaluated once had --eval-each-epoch off
                     + (" (one epoch or fewer)" if all(0 < r.get("epochs", 0) <= 1 for r in runs)
                        else "")
                     + ", so the accuracy row has one point per run: its final accuracy against "
                     "its training time."
                     if evaluations and max(evaluations) == 1 else "")
                  + _same_steps_note(runs, names) + oversub_note(runs) + busy_runs_note(runs))
