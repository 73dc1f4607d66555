"""Which fits of StarRing's cost model (scripts/cost_model.py) to trust: how far a fit's line
misses the bench rows it is not drawn through (fit_spread), why its constants cannot rank
backends at other scales (doubts), why they are wrong (unfit), the one fit per backend that
predictions use (reference) and what a reader must be told of it (used_caveats). The fits
come from cost_model.calibrate; the order and the caveats: docs/COST_MODEL.md, *Predicting
other scales*. Standard library only."""


def median(xs):
    """The median of xs: the mean of the two middle values for an even count (the upper one
    alone read 2 bench rows' memcpy figures, or 2 runs' compute times, as the larger one);
    None when xs is empty."""
    xs = sorted(xs)
    n = len(xs)
    return (xs[(n - 1) // 2] + xs[n // 2]) / 2 if xs else None


POOR_FIT = 0.25  # a median residual above this: the alpha-beta line does not describe the rows


def fit_spread(f):
    """The median |relative residual| over the sizes the fit was free to miss, or None when
    there is none. An L1 fit of k constants passes through k rows, whose residuals are 0 by
    construction: with the --quick bench's 3 sizes the plain median was always 0, and a bench
    whose times scattered 19-fold read as a perfect fit. k counts the constants fitted here and
    above 0 (a term clamped at 0 frees a row; a windowed refit's alpha is given)."""
    k = int(f.consts.beta > 0) + int(f.consts.alpha > 0 and f.base is None)
    return median(sorted(abs(r) for r in f.residuals)[k:])


def doubts(f, alpha_given=False, beta_given=False):
    """Why a fit's constants cannot rank backends at other worker counts (empty: no reason
    seen): bench rows of a pass on a busy host (sr.host_busy: other processes' CPUs and the
    job's ranks outnumbered the cores), a measured run that contradicts the fit (contradiction),
    a term clamped at 0 by the non-negativity of the fit (a windowed refit inherits its
    alpha), or a poor fit (fit_spread over POOR_FIT, on the sizes this fit used: an all-sizes fit
    that a cache boundary bends is what the window is for). A term the user gave (--alpha-us,
    --bandwidth-gbps) replaces the fitted one and its doubt; both given, nothing of the bench
    is left to doubt."""
    out = []
    both = alpha_given and beta_given
    if not both and f.host_busy is not None:
        out.append(f"bench on a busy host (other processes kept {f.host_busy:.1f} CPUs busy "
                   f"beside its {f.ranks} ranks on {f.cores} cores: it timed the wait for a CPU)")
    if not both and f.contradicted:
        out.append(f"contradicted by run {f.contradicted[1]} (the fit gives its communication "
                   f"alone {f.contradicted[0]:.0f}x the run's whole measured step)")
    if not alpha_given and f.consts.alpha <= 0:
        out.append("alpha fitted 0 (clamped: no cost per message, so its step time stays flat "
                   "as W multiplies the messages)")
    if not beta_given and f.consts.beta <= 0:
        out.append("beta fitted 0 (clamped: no cost per byte, 1/beta infinite)")
    spread = fit_spread(f)
    if not both and spread is not None and spread > POOR_FIT:
        out.append(f"poor fit (of the bench sizes {_sizes(f.sizes)}, those the line is not "
                   f"drawn through miss it by a median {100 * spread:.0f}%)")
    return out


def _sizes(sizes):
    """'64K, 256K, 1M': a fit's bench sizes, short."""
    return ", ".join(next((f"{b // d}{u}" for u, d in (("M", 1 << 20), ("K", 1024)) if b % d == 0
                           and b >= d), str(b)) for b in map(int, sizes))



def unfit(f, alpha_given=False, beta_given=False):
    """Why the constants themselves are wrong (empty: none seen), unlike the pass's circumstances
    (busy host, time-shared): a term clamped at 0, a median error over POOR_FIT (fit_spread), a
    run that contradicts it. The main job's mpi np 2 fit (1/beta inf, 90%) was just '[used]'.
    A term the user gave (--alpha-us, --bandwidth-gbps) replaces the fitted one and its fault;
    both given, nothing of the fit is left to fault (as in doubts)."""
    out = []
    both = alpha_given and beta_given
    if not beta_given and f.consts.beta <= 0:
        out.append("beta clamped at 0, 1/beta infinite")
    if not alpha_given and f.consts.alpha <= 0:
        out.append("alpha clamped at 0")
    spread = fit_spread(f)
    if not both and spread is not None and spread > POOR_FIT:
        out.append(f"median error {100 * spread:.0f}%, over the {100 * POOR_FIT:.0f}% allowed")
    if not both and f.contradicted:
        out.append(f"contradicted by run {f.contradicted[1]}")
    return out


def fit_name(f):
    return f"{f.consts.source} np={f.ranks}"


def used_caveats(f, alpha_given=False, beta_given=False):
    """What a reader must be told of a fit reference() chose (empty: nothing): it is unfit, or
    time-shared in place of core-per-rank fits it passed over (and why they were). With a term
    given (alpha_given, beta_given), the fitted term's faults are not the prediction's."""
    out = []
    why = unfit(f, alpha_given, beta_given)
    if why:
        out.append(f"unfit ({'; '.join(why)}), used only because no sound {f.kind} fit was "
                   "found: its predictions are not evidence")
    if f.oversubscribed and f.passed_over:
        out.append(f"time-shared ({f.ranks} ranks on {f.cores or '?'} cores), used in place of "
                   + ", ".join(f"the core-per-rank fit {fit_name(o)} ({'; '.join(unfit(o))})"
                               for o in f.passed_over))
    return out


def reference(fits):
    """One fit per backend for predictions, in this order: not unfit, not contradicted, clean (on
    the cores, not on a busy host), on the cores, the largest W on the cores (else the fewest
    ranks), the smaller fit error. So an unfit or busy-host fit is used only when nothing better
    was measured and stays in doubt (doubts); used_caveats says so, and names the core-per-rank
    fits a time-shared one was used in place of (passed_over)."""
    best = {}
    for f in fits:
        clean = not f.oversubscribed and f.host_busy is None
        rank = (not unfit(f), not f.contradicted, clean, not f.oversubscribed,
                f.workers if not f.oversubscribed else -f.ranks, -f.max_rel_err)
        if f.kind not in best or rank > best[f.kind][0]:
            best[f.kind] = (rank, f)
    for _, f in best.values():
        f.passed_over = ([o for o in fits if o.kind == f.kind and not o.oversubscribed]
                         if f.oversubscribed else [])
    return {k: v[1] for k, v in best.items()}
