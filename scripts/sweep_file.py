"""Reading a sweep file (experiments/sweeps/<name>.ini) for the sweep driver, scripts/sweep.py,
whose docstring gives the file's sections and keys: the sections and values checked (a wrong one
is a usage error, exit 2), --quick's overrides applied, and the runs the grid and the variants
expand to, with each run's ranks and roles."""
import configparser
import itertools
import math
import os
import shlex
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sweep_jobs import usage_error  # noqa: E402

OMIT = "-"  # a value that leaves its flag out
YES = ("yes", "true", "on", "1")  # [sweep]: trace, report, recovery
NO = ("no", "false", "off", "0")


def load_sweep(path, quick):
    cp = configparser.ConfigParser(inline_comment_prefixes=(";", "#"), interpolation=None,
                                   delimiters=("=",))
    cp.optionxform = str  # keep flag names as written
    try:
        if not cp.read(path):
            usage_error(f"sweep: cannot read sweep file {path}")
    except configparser.Error as e:  # a duplicate section, a line that is not `key = value`
        usage_error(f"sweep: {path}: " + " ".join(str(e).split()))
    sec = {name: dict(cp[name]) for name in cp.sections()}
    sweep = {"timeout_s": "600", "trace": "no", "report": "yes", "description": "",
             "repeats": "1", "recovery": "no"}
    check_sections(path, sec, sweep)
    sweep.update(sec.get("sweep", {}))
    train = dict(sec.get("train", {}))
    grid = {k: v.split() for k, v in sec.get("grid", {}).items()}
    variants = {n[len("variant "):].strip(): dict(v) for n, v in sec.items()
                if n.startswith("variant ")}
    benches = {n[len("bench "):].strip(): dict(v) for n, v in sec.items() if n.startswith("bench ")}
    if quick:
        for key, value in sec.get("quick", {}).items():
            if key == "variants":
                variants = {n: v for n, v in variants.items() if n in value.split()}
            elif key == "benches":
                benches = {n: v for n, v in benches.items() if n in value.split()}
            elif key in sweep:
                sweep[key] = value
            elif key in grid or key == "workers":  # workers: never a train flag
                grid[key] = value.split()
            else:
                train[key] = value
        for name, over in sec.items():
            if name.startswith("quick "):
                target = name[len("quick "):].strip()
                for table, prefix in ((variants, "variant "), (benches, "bench ")):
                    if target.startswith(prefix) and target[len(prefix):] in table:
                        table[target[len(prefix):]].update(over)
    if "workers" in train:  # it became `--workers N`, refused as no train option
        usage_error(f"sweep: {path}: [train] workers: the worker counts go in [grid] or a "
                    "[variant NAME] (`workers = 1 2 4`); [train] holds `starring train` flags")
    if not variants:
        variants = {"default": {}}
    for b in benches.values():
        b.setdefault("np", "2")  # what a pass without `np` runs on (and --dry-run counts)
    check_values(sweep, benches)
    return sweep, train, grid, variants, benches


def check_sections(path, sec, sweep_keys):
    """A section or a [sweep]/[bench] key the driver does not read is an error, not skipped:
    `[varaint ring]` or `timeout = 30` (for timeout_s) were dropped without a word, and a
    `starring train --config` file ([data], [model], [sync]) ran as one default run."""
    for name, keys in sec.items():
        kind, _, rest = name.partition(" ")
        if not (name in ("sweep", "train", "grid", "quick")
                or (kind in ("variant", "bench") and rest)
                or (kind == "quick" and rest in sec and rest.split(" ")[0] in ("variant", "bench"))):
            usage_error(f"sweep: {path}: section [{name}] "
                        + (f"names no [{rest}]" if kind == "quick" else "is not one the driver reads")
                        + " (a sweep file has [sweep], [train], [grid], [variant NAME], [bench "
                        "NAME], [quick], [quick variant|bench NAME]; see scripts/sweep.py's top)")
        allowed = (sweep_keys if name == "sweep" else
                   ("np", "args") if kind == "bench" or rest.startswith("bench ") else ())
        for key in keys:
            if allowed and key not in allowed:
                usage_error(f"sweep: {path}: [{name}] {key}: not a key of that section "
                            f"({', '.join(allowed)})")


def check_values(sweep, benches):
    """Values the driver itself reads, checked before any run (a bad one used to surface as a
    Python traceback, a bench pass's `np` only after every training run had been made)."""
    try:  # inf passed `>= 1`, then int(inf) at the first run was a traceback
        ok = math.isfinite(float(sweep["timeout_s"])) and float(sweep["timeout_s"]) >= 1
    except ValueError:
        ok = False
    if not ok:
        usage_error(f"sweep: [sweep] timeout_s = {sweep['timeout_s']}: expected seconds >= 1")
    for key in ("trace", "report", "recovery"):  # `trace = y` was read as no, without a word
        if sweep[key].lower() not in YES + NO:
            usage_error(f"sweep: [sweep] {key} = {sweep[key]}: expected yes or no (or true/false, "
                        "on/off, 1/0)")
    for name, b in benches.items():
        if not all(n.isdigit() and int(n) >= 1 for n in b["np"].split()):
            usage_error(f"sweep: bench {name}: np = {b['np']}: expected rank counts >= 1")
        try:
            shlex.split(b.get("args", ""))
        except ValueError as e:
            usage_error(f"sweep: bench {name}: args: {e}")


def expand_runs(train, grid, variants):
    """One dict per run: variant, flags (ordered), workers."""
    runs = []
    for vname, vkeys in variants.items():
        vgrid = dict(grid)
        vflags = {}
        for k, v in vkeys.items():
            if k in vgrid or k == "workers":
                vgrid[k] = v.split()
            elif k != "requires":
                vflags[k] = v
        for k, values in vgrid.items():  # no values: no combination, so no run at all
            if not values:
                where = f"variant {vname}:" if k in vkeys else "[grid]"
                usage_error(f"sweep: {where} {k}: no values (a grid key lists the values to "
                            "run, space separated)")
        dims = list(vgrid.keys())
        for combo in itertools.product(*(vgrid[d] for d in dims)):
            point = dict(zip(dims, combo))
            workers = point.pop("workers", "1")
            if not workers.isdigit() or int(workers) < 1:
                usage_error(f"sweep: variant {vname}: workers = {workers}: expected a count >= 1")
            workers = int(workers)
            flags = dict(train)
            flags.update(point)
            flags.update(vflags)
            if flags.get("servers") == "half":
                flags["servers"] = str(max(1, workers // 2))
            flags = {k: v for k, v in flags.items() if v != OMIT}
            if flags.get("fault", "").startswith("stop"):
                # announces nothing and exits 75 ("resume me"): fault_outcome would record a
                # failed run whose fault was "not injected", and a recovery sweep resumes kills
                usage_error(f"sweep: variant {vname}: fault = {flags['fault']}: a stop request is "
                            "not a fault a sweep measures (kill or hang are; a stop is "
                            "`starring train --fault stop:RANK:STEP`, see docs/FAULTS.md, "
                            "*Preemption*)")
            requires = vkeys.get("requires", "")
            if requires not in ("", "gpu", "shared-gpu"):
                usage_error(f"sweep: variant {vname}: requires = {requires}: expected gpu "
                            "(one GPU per rank) or shared-gpu (ranks may share one)")
            runs.append({"variant": vname, "flags": flags, "workers": workers,
                         "point": point, "requires": requires})
    return runs


def roles_of(flags, workers):
    """(np, dedicated server ranks, roles) from the flags: with `backend = ps` and a numeric
    `servers` (the trainer's default is 1) the servers are extra ranks beside the workers."""
    servers = flags.get("servers", "1")
    if flags.get("backend") == "ps" and servers.isdigit():
        s = int(servers)
        return workers + s, s, {"worker": workers, "server": s}
    if flags.get("backend") == "ps" and servers == "colocated":
        return workers, 0, {"worker": workers, "server": 0, "colocated_server": workers}
    return workers, 0, {"worker": workers, "server": 0}
