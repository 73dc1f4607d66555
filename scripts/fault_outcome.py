"""What an injected fault (--fault KIND:RANK:STEP) cost a run, judged from its log: whether it
was injected, how long the job took to end after it, and whether the error lines name the
faulty rank (the sweep driver's records; starring_results re-exports these names)."""
import re

# What the rank that injects a fault prints just before it dies or goes silent (common/fault.cc's
# announce_fault, from trainer/straggler.cc and ps/server_loop.cc), with the host's wall clock, so
# the time to the job's end can be measured. --fault stop:RANK:STEP (a preemption notice to one
# worker) announces nothing: fault_outcome calls such a run "not injected".
FAULT_LINE = re.compile(r"\[starring\] (?:[a-z ]*?)rank (\d+): --fault (kill|hang)\b.*? at step "
                        r"(\d+) \(unix time ([0-9.]+)\)")


def fault_outcome(spec, log_text, end_unix, status, exit_code):
    """What an injected fault cost a run: {"spec", "kind", "rank", "step", "injected",
    "detect_s" (seconds from the fault to the job's end), "errors" (the `starring: error:` lines
    and mpirun's one-line verdict), "names_rank" (one of them names the faulty rank), "outcome"}.
    outcome: "detected" (the job failed, naming the rank), "detected, rank not named", "hung"
    (the sweep's time bound ended it), "not injected" (the run never reached the step), or
    "missed" (exit 0 after the fault)."""
    kind, _, rest = spec.partition(":")
    rank_s, _, step_s = rest.partition(":")
    out = {"spec": spec, "kind": kind, "rank": int(rank_s) if rank_s.isdigit() else None,
           "step": int(step_s) if step_s.isdigit() else None, "injected": False,
           "detect_s": None, "errors": [], "names_rank": False}
    for line in log_text.splitlines():
        m = FAULT_LINE.search(line)
        if m and not out["injected"]:
            out.update(injected=True, rank=int(m.group(1)), step=int(m.group(3)),
                       detect_s=round(end_unix - float(m.group(4)), 3))
        elif line.startswith(("starring: error:", "mpirun: ")):
            out["errors"].append(line.strip())
    if out["rank"] is not None:
        # The faulty rank's own "--fault ... injected" error (a silenced PS server throws it
        # after 3 x --timeout) names it without anyone having noticed: it does not count.
        named = re.compile(rf"\brank {out['rank']}\b")
        out["names_rank"] = any(named.search(e) for e in out["errors"] if "--fault " not in e)
    if not out["injected"]:
        out["outcome"] = "not injected"
    elif status == "timeout":
        out["outcome"] = "hung"
    elif exit_code == 0:
        out["outcome"] = "missed"
    else:
        out["outcome"] = "detected" if out["names_rank"] else "detected, rank not named"
    return out


def expected_failure(rec):
    """A run that failed because a fault was injected into it on purpose, and said so."""
    return rec.get("status") == "failed" and \
        str(rec.get("fault", {}).get("outcome", "")).startswith("detected")
