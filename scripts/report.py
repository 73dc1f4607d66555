#!/usr/bin/env python3
"""StarRing's report: `scripts/report.py RESULTS_DIR [--out DIR] [--quiet] [--table-sweep NAME]`.

Reads RESULTS_DIR/runs.jsonl (one record per `starring train` run, written by
scripts/sweep.sh or scripts/add_run.py), RESULTS_DIR/bench.jsonl (`starring bench --json`
rows) and the per-run metrics files they name, and writes to DIR (default RESULTS_DIR/report):
  report.html  one self-contained page (PNGs embedded as base64) with every plot and caption,
  *.png        the plots,
  summary.md   a table, one row per configuration (a repeated one: its median run): backend,
               workers, servers, samples/s, step-time breakdown, bytes per rank per step
               against theory, accuracy (also printed here, or only one sweep's rows with
               --table-sweep), then the runs that did not succeed and the other studies' tables.
Plots whose data is absent are skipped, and the page says so (their PNGs from an earlier report
in DIR, the ones its summary.md or report.html names, are removed).
"""
import argparse
import base64
import datetime
import html
import os
import sys

try:
    import matplotlib  # noqa: F401
except ImportError:  # Debian's matplotlib lives with /usr/bin/python3; a pyenv python may lack it
    if os.path.exists("/usr/bin/python3") and os.path.realpath(sys.executable) != \
            os.path.realpath("/usr/bin/python3"):
        os.execv("/usr/bin/python3", ["/usr/bin/python3"] + sys.argv)
    sys.exit("report.py: matplotlib is missing: run scripts/setup.sh (python3-matplotlib)")

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import report_convergence as rc  # noqa: E402
import report_model as rm  # noqa: E402
import report_plots as rp  # noqa: E402
import report_scaling as rsc  # noqa: E402
import report_faults as rf  # noqa: E402
from report_inputs import (load, not_ok, failed_passes, pass_words, has_log,  # noqa: E402
                           not_ok_where, safe_note, not_drawn_note, passes_note)
import report_recovery as rrec  # noqa: E402
import report_overlap as ro  # noqa: E402
import report_studies as rs  # noqa: E402
import report_traffic as rt  # noqa: E402
import starring_results as sr  # noqa: E402
from report_notes import (NOT_MEASURED, STEP_MS_NOTE, async_note, load_note,  # noqa: E402
                          opaque_note, star_note)


def _mb(x):
    """MB with 3 significant digits, trailing zeros kept (8.00 beside 5.34, not 8); 0 as 0."""
    return f"{x / 1e6:#.3g}".rstrip(".") if x else "0"  # 160.24 MB: "160", not "160."


def _dev(measured, theory):
    d = sr.deviation_pct(measured, theory)
    if d is None:
        return ""
    return "0%" if abs(d) < 0.05 else f"{d:+.1f}%"


def _extra(r):
    point = {k: v for k, v in r.get("grid_point", {}).items() if k not in ("workers",)}
    return " ".join(f"{k}={v}" for k, v in point.items())


def shown_runs(runs):
    """The successful runs as the report shows them: one per configuration, a repeated one as
    its median run carrying the others' figures (starring_results.collapse_repeats)."""
    return sr.collapse_repeats([r for r in runs if r.get("status") == "ok" and sr.table_ready(r)])


def _rate(r):
    """Samples/s; for a repeated configuration the median run's, with the range of all."""
    rates = r.get("repeat_samples_per_s")
    text = f"{r['samples_per_s']:,.0f}"
    if rates:
        gits = r.get("repeat_git")
        text += (f" [{rates[0]:,.0f}..{rates[-1]:,.0f}, {len(rates)} runs"
                 + (f" of {len(gits)} commits" if gits else "") + "]")
    return text


def commits_note(runs, sep=" "):
    """What the table's 'of N commits' means, when a configuration's runs (the folder given to
    two sweeps, a change between them) came from different code: they were pooled as repeats,
    the median and range mixing the versions, with only the page's list of commits to say so."""
    pooled = [r for r in shown_runs(runs) if r.get("repeat_git")]
    if not pooled:
        return ""
    gits = sorted({g for r in pooled for g in r["repeat_git"]})
    return (f"{sep}{len(pooled)} configuration(s) have runs from several commits "
            f"({', '.join(gits)}), taken as repeats of one configuration: their median and range "
            "mix the code versions (the table says 'of N commits'); to compare commits, give "
            "each its own results folder (--out).")


def table_rows(runs):
    """One row per successful run; a leading sweep column when the folder holds several."""
    rows = []
    several = len({r.get("sweep") for r in runs if r.get("status") == "ok"}) > 1
    ok = shown_runs(runs)
    order = {}
    for r in ok:  # sweeps and backends in the order they ran
        order.setdefault(r.get("sweep", ""), len(order))
        order.setdefault((r.get("sweep", ""), sr.backend_label(r)), len(order))
    ok.sort(key=lambda r: (order[r.get("sweep", "")], r["model"]["params"],
                           order[(r.get("sweep", ""), sr.backend_label(r))], r["workers"],
                           _extra(r)))
    for r in ok:
        st = r["step_time"]
        th = sr.theory_bytes(r)
        servers = r["num_servers"] if sr.is_dedicated_ps(r) else (
            "coloc." if sr.is_colocated(r) else "-")
        wsent = sr.busiest(r, "worker_sent")
        wbytes = f"{_mb(wsent)} / {_mb(th['worker'])} ({_dev(wsent, th['worker'])})"
        if r.get("backend") in rt.OPAQUE:  # the theory itself: 0% would claim a measurement
            wbytes = f"- / {_mb(th['worker'])} ({NOT_MEASURED})"
        srecv = sr.busiest(r, "server_recv")
        sbytes = "-" if th["server"] is None else \
            f"{_mb(srecv)} / {_mb(th['server'])} ({_dev(srecv, th['server'])})"
        rows.append([
            sr.backend_label(r), rp.model_label(r).split(" (")[0], str(r["workers"]), str(servers),
            _rate(r) + ("*" if r.get("oversubscribed") else ""),
            f"{1e3 * st['total_s']:.2f} / {1e3 * st['compute_s']:.2f} / {1e3 * st['comm_s']:.2f}"
            f" / {1e3 * st['wait_s']:.2f}", wbytes, sbytes,
            f"{r['test_accuracy']:.4f}", _extra(r) or "-"])
        if several:  # "main", not "main: -", for a sweep that varies no knob
            rows[-1][-1] = r.get("sweep", "?") + ("" if rows[-1][-1] == "-" else
                                                   f": {rows[-1][-1]}")
    return rows


HEADER = ["backend", "model", "workers", "servers", "samples/s",
          "step ms (total / compute / comm / wait)",
          "busiest worker MB sent/step: measured / theory (dev)",
          "busiest server MB recv/step: measured / theory (dev)", "test acc", "swept"]


def markdown_table(rows):
    lines = ["| " + " | ".join(HEADER) + " |", "|" + "---|" * len(HEADER)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def text_table(rows):
    """A plain aligned table for the terminal (the same content as summary.md). The header takes
    three lines so that no column is much wider than its cells: on one line it made the main
    job's table 158 characters wide, wrapping every row in a 120-column terminal. The bytes
    cells read 'measured / theory (deviation)', as the header's third line says."""
    head = [("backend", "", ""), ("model", "", ""), ("W", "", ""), ("S", "", ""),
            ("samples/s", "", ""), ("step ms", "tot / cmp / comm / wait", ""),
            ("busiest worker", "MB sent/step", "meas/theory (dev)"),
            ("busiest server", "MB recv/step", "meas/theory (dev)"), ("acc", "", ""),
            ("swept", "", "")]
    head = [list(line) for line in zip(*head)]
    if rows and all(row[-1] == "-" for row in rows):  # one sweep varying nothing: a column of -
        head, rows = [h[:-1] for h in head], [row[:-1] for row in rows]
    cells = head + rows
    n = len(head[0])
    widths = [max(len(c[i]) for c in cells) for i in range(n)]
    return "\n".join("  ".join(c[i].ljust(widths[i]) for i in range(n)).rstrip()
                     for c in cells) + star_note(rows, "\n") + opaque_note(rows, "\n")


def sweep_scope(runs, bench, sweep):
    """The runs and bench records of one sweep (--table-sweep), or all of them."""
    if not sweep:
        return runs, bench
    return ([r for r in runs if r.get("sweep") == sweep],
            [b for b in bench if b.get("sweep") == sweep])


def write_summary(out, runs, bench, figures):
    rows = table_rows(runs)
    parts = ["# StarRing results", "",
             f"{len(runs)} runs" + (": " if runs else "") + ", ".join(
                 f"{sum(1 for r in runs if r.get('status') == s)} {s}" for s in sr.STATUSES
                 if any(r.get("status") == s for r in runs)) + f"; {sum(1 for b in bench if 'size' in b)} bench rows.",
             "", "Samples/s and step ms (the mean per step over workers) leave out each run's "
             "first steps (`--untimed-steps`, 5 by default, at most a quarter of the run: GPU "
             "kernel loading, first-touch memory, connection set-up); the summary's "
             "`samples_per_s_all_steps` counts them. " + STEP_MS_NOTE + " Bytes are per rank "
             "per optimizer "
             "step; theory: ring/MPI/co-located 2(N-1)/N x D per rank, dedicated PS D per "
             "worker and W x D/S per server, the busiest worker and server shown (a mean "
             "hides --ps-partition tensor's unbalanced shards; D = model bytes, halved "
             "with fp16/bf16). A "
             "configuration run several times (`scripts/sweep.sh --repeat N`) shows its median "
             "run (by samples/s; of an even number of runs, the slower of the middle two), with "
             "the range of all its runs in brackets."
             + async_note(runs) + star_note(rows) + opaque_note(rows) + load_note(runs, bench)
             + commits_note(runs), "",
             markdown_table(rows) if rows else "(no successful run)", ""]
    bad = not_ok(runs)
    if bad or failed_passes(bench):
        parts += ["## Runs that did not succeed", ""]
        parts += [f"- `{r.get('run_id')}`: {r.get('status')} (exit {r.get('exit_code')})"
                  f"{': ' + r['reason'] if r.get('reason') else ''}"
                  + (f"; log: `{r.get('log_file', '')}`" if has_log(r) else "")
                  for r in bad]
        parts += [f"- {pass_words(b)}" for b in failed_passes(bench)]
        parts.append("")
    parts += rm.summary_lines(shown_runs(runs),
                              sr.collapse_bench_repeats(bench))
    parts += rf.summary_lines(runs)
    parts += rrec.summary_lines(runs)
    parts += ["## Plots", ""] + [f"- `{f.file}`: {f.title}" for f in figures
                                 if isinstance(f, rp.Figure)]
    text = "\n".join(parts) + "\n"
    sr.write_text_whole(os.path.join(out, "summary.md"), text)
    return rows


CSS = """body{font-family:sans-serif;max-width:1300px;margin:2em auto;padding:0 1em;color:#222}
figure{margin:2em 0;border-top:1px solid #ddd;padding-top:1em}img{max-width:100%}
figcaption{max-width:1000px;color:#333}table{border-collapse:collapse;font-size:13px}
td,th{border:1px solid #ccc;padding:3px 6px;text-align:left}.skip{color:#777}
pre{background:#f6f6f6;padding:.5em;overflow-x:auto;font-size:12px}"""


def origins(records):
    """' Hosts: a, b; commits: c.' of the runs and bench rows that name them ('' where none
    does: a folder of bench rows written by hand read 'Hosts: ; commits: .')."""
    hosts, gits = ({str(x[k]) for x in records if x.get(k)} for k in ("host", "git"))
    parts = [f"{what}: {', '.join(sorted(v))}" for what, v in (("Hosts", hosts),
                                                                ("commits", gits)) if v]
    return f" {'; '.join(parts)}." if parts else ""


def write_html(out, results, runs, bench, figures, rows, problems):
    e = html.escape
    body = [f"<h1>StarRing report</h1><p>Results: <code>{e(os.path.abspath(results))}</code>; "
            f"generated {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M UTC}. "
            f"{len(runs)} train runs ({sum(1 for r in runs if r.get('status') == 'ok')} ok), "
            f"{sum(1 for b in bench if 'size' in b)} bench rows.{e(origins(runs + bench))}</p>"]
    if rows:
        body.append("<h2>Summary</h2><table><tr>" + "".join(f"<th>{e(h)}</th>" for h in HEADER)
                    + "</tr>" + "".join("<tr>" + "".join(f"<td>{e(c)}</td>" for c in row)
                                        + "</tr>" for row in rows) + "</table>"
                    + f"<p>{e(STEP_MS_NOTE)}</p>"
                    + (f"<p>{e(star_note(rows, ''))}</p>" if star_note(rows) else "")
                    + (f"<p>{e(opaque_note(rows, ''))}</p>" if opaque_note(rows) else "")
                    + (f"<p>{e(load_note(runs, bench, ''))}</p>" if load_note(runs, bench)
                       else "")
                    + (f"<p>{e(commits_note(runs, ''))}</p>" if commits_note(runs) else ""))
    # The cost model's three tables go just above its two figures (whose captions point to
    # "the table above"): placed after the summary, they stood between the reader and the
    # measured plots.
    model_section = rm.html_section(shown_runs(runs), sr.collapse_bench_repeats(bench))
    fault_rows = rf.rows(runs)
    if fault_rows:
        body.append("<h2>Faults</h2><p>Each run had a rank killed (SIGKILL) or silenced at a "
                    "given step; 'ended after' is the time from the fault (the rank's own wall "
                    "clock) to the job's exit.</p><table><tr>"
                    + "".join(f"<th>{e(h)}</th>" for h in rf.HEADER) + "</tr>"
                    + "".join("<tr>" + "".join(f"<td>{e(c)}</td>" for c in row) + "</tr>"
                              for row in fault_rows) + "</table>")
    rec_rows = rrec.rows(runs)
    if rec_rows:
        body.append("<h2>Recovery</h2><p>" + e(rrec.summary_lines(runs)[2]) + "</p><table><tr>"
                    + "".join(f"<th>{e(h)}</th>" for h in rrec.HEADER) + "</tr>"
                    + "".join("<tr>" + "".join(f"<td>{e(c)}</td>" for c in row) + "</tr>"
                              for row in rec_rows) + "</table>")
    for f in figures:
        if isinstance(f, rp.Figure) and f.file.startswith("cost_model") and model_section:
            body.append(model_section)
            model_section = ""
        if isinstance(f, rp.Figure):
            with open(os.path.join(out, f.file), "rb") as img:
                data = base64.b64encode(img.read()).decode("ascii")
            body.append(f'<figure id="{e(f.file[:-4])}"><h2>{e(f.title)}</h2>'
                        f'<img src="data:image/png;base64,{data}" alt="{e(f.file)}">'
                        f"<figcaption>{e(f.caption)} <a href=\"{e(f.file)}\">{e(f.file)}</a>"
                        "</figcaption></figure>")
    if model_section:  # no cost-model figure was drawn
        body.append(model_section)
    traced = [r for r in runs if r.get("trace_merged")]
    if traced:
        body.append("<h2>Timelines</h2><p>Chrome trace-event files, one process per rank "
                    "(forward, backward, each bucket's communication, waits, server work): open "
                    "one in <a href='https://ui.perfetto.dev'>ui.perfetto.dev</a> or "
                    "chrome://tracing to see overlap and stalls.</p><ul>" + "".join(
                        f"<li><a href=\"{e(os.path.relpath(os.path.join(results, r['trace_merged']), out))}\">"
                        f"{e(r['run_id'])}</a> ({r['np']} ranks)</li>" for r in traced) + "</ul>")
    skipped = [f for f in figures if isinstance(f, rp.Skipped)]
    if skipped:
        body.append("<h2>Plots not drawn</h2><ul class='skip'>" + "".join(
            f"<li>{e(s.title)}: {e(s.reason)}</li>" for s in skipped) + "</ul>")
    bad = not_ok(runs)
    if bad or failed_passes(bench):
        body.append("<h2>Runs that did not succeed</h2>")
        for b in failed_passes(bench):
            body.append(f"<p><b>{e(pass_words(b))}</b><br><code>{e(b.get('command', ''))}</code>"
                        "</p>" + (f"<pre>{e(b['log_tail'])}</pre>" if b.get("log_tail") else ""))
        for r in bad:
            body.append(f"<p><b>{e(str(r.get('run_id')))}</b>: {e(str(r.get('status')))} "
                        f"(exit {e(str(r.get('exit_code')))}) {e(r.get('reason', ''))}<br>"
                        f"<code>{e(r.get('command', ''))}</code></p>"
                        + (f"<pre>{e(r['log_tail'])}</pre>" if r.get("log_tail") else ""))
    if problems:
        body.append("<h2>Problems reading the results</h2><ul>" + "".join(
            f"<li>{e(p)}</li>" for p in problems[:50]) + "</ul>")
    page = ("<!DOCTYPE html><html><head><meta charset='utf-8'><title>StarRing report</title>"
            f"<style>{CSS}</style></head><body>" + "\n".join(body) + "</body></html>\n")
    sr.write_text_whole(os.path.join(out, "report.html"), page)


# Every PNG the plot modules write (their _save calls; test_report_inputs checks the list).
PLOT_FILES = ("throughput.png", "efficiency.png", "breakdown.png", "bytes_per_rank.png",
              "busbw.png", "overlap.png", "convergence.png", "straggler.png", "staleness.png",
              "crossover.png", "bucket.png", "faults.png", "recovery.png", "cost_model_check.png",
              "cost_model_scaling.png")


def remove_stale_plots(out, figures):
    """Removes the report's PNGs that this run did not draw: run again on changed results (a
    bench pass dropped), the report folder kept the earlier run's busbw.png beside the new
    summary.md, which no longer lists it. Only those the earlier report's summary.md or
    report.html (not yet replaced) names: a throughput.png of the user's own in `--out .` was
    removed too. Other files in the folder are not the report's."""
    drawn = {f.file for f in figures if isinstance(f, rp.Figure)}
    named = ""
    for page in ("summary.md", "report.html"):
        try:
            with open(os.path.join(out, page), encoding="utf-8", errors="replace") as f:
                named += f.read()
        except OSError:  # none: no earlier report here
            pass
    for name in PLOT_FILES:
        if name not in drawn and (f"- `{name}`: " in named or f'alt="{name}"' in named):
            try:
                os.remove(os.path.join(out, name))
            except FileNotFoundError:
                pass


def make_figures(runs, bench, metrics, out):
    # A configuration run several times is drawn as its median run (with the spread where a
    # plot can show it); the fault table keeps every run.
    ok = shown_runs(runs)
    missing, passes = safe_note(not_drawn_note, runs), safe_note(passes_note, bench)
    bench = sr.collapse_bench_repeats(bench)
    makers = [("throughput", lambda: rsc.throughput(ok, out)),
              ("efficiency", lambda: rsc.efficiency(ok, out)),
              ("breakdown", lambda: rsc.breakdown(ok, out)),
              ("bytes per rank", lambda: rt.bytes_per_rank(ok, out)),
              ("busbw", lambda: rt.busbw(bench, out)),
              ("overlap", lambda: ro.overlap(bench, out)),
              ("convergence", lambda: rc.convergence(ok, metrics, out)),
              ("straggler", lambda: rs.straggler(ok, out)),
              ("staleness", lambda: rs.staleness(ok, out)),
              ("crossover", lambda: rs.crossover(ok, out)),
              ("bucket", lambda: rs.bucket(ok, out)),
              ("faults", lambda: rf.faults(runs, out)),
              ("recovery", lambda: rrec.recovery(runs, out)),
              ("cost model check", lambda: rm.predicted_vs_measured(ok, bench, out)),
              ("cost model scaling", lambda: rm.extrapolation(ok, bench, out))]
    figures = []
    for name, make in makers:
        try:
            fig = make()
        except (KeyError, IndexError, TypeError, ValueError, ZeroDivisionError) as err:
            # A malformed record must not cost the rest of the report: say which plot failed.
            fig = rp.Skipped(name, f"could not be drawn: {err!r}")
        note = {"throughput": missing, "efficiency": missing, "breakdown": missing,
                "busbw": passes}.get(name)
        if note:
            if isinstance(fig, rp.Figure):
                fig.caption += note
            else:
                fig.reason += f" ({note.strip()})"
        figures.append(fig)
    return figures


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("results", help="a results folder written by scripts/sweep.sh")
    ap.add_argument("--out", help="where to write report.html, PNGs, summary.md "
                    "(default RESULTS/report)")
    ap.add_argument("--quiet", action="store_true", help="do not print the table")
    ap.add_argument("--table-sweep", metavar="NAME",
                    help="print only this sweep's runs in the terminal table (the HTML page and "
                    "summary.md keep every run)")
    a = ap.parse_args(argv)
    if os.path.isfile(a.results):  # runs.jsonl given for its folder
        ap.exit(2, f"report.py: {a.results} is a file, not a results folder (give the folder: "
                f"scripts/report.py {os.path.dirname(a.results) or '.'})\n")
    if not os.path.isdir(a.results):  # bad input: exit 2, as starring, sweep.sh, add_run.py
        ap.exit(2, f"report.py: {a.results}: no such folder (give the results folder of a "
                "sweep)\n")
    if not os.path.exists(os.path.join(a.results, "runs.jsonl")) and \
            not os.path.exists(os.path.join(a.results, "bench.jsonl")):
        ap.exit(2, f"report.py: {a.results} has neither runs.jsonl nor bench.jsonl\n")
    out = a.out or os.path.join(a.results, "report")
    try:
        os.makedirs(out, exist_ok=True)
    except OSError as e:  # a file of that name, no right to write there: one line
        sys.exit(f"report.py: cannot create the report folder {out}: {e.strerror}")
    try:  # ... or one that exists and takes no files (a read-only copy of the results): one
        sr.check_writable_folder(out)  # line before the first plot, not a PermissionError's trace
    except OSError as e:
        sys.exit(f"report.py: cannot write in the report folder {out}: {e.strerror}")
    try:
        runs, bench, metrics, problems = load(a.results)
    except OSError as e:  # runs.jsonl a folder, or not readable: one line, not a traceback
        sys.exit(f"report.py: cannot read {e.filename or a.results}: {e.strerror or e}")
    sr.remove_stale_tmp(out, PLOT_FILES + ("summary.md", "report.html"))  # of killed reports
    try:
        figures = make_figures(runs, bench, metrics, out)
        remove_stale_plots(out, figures)
        rows = write_summary(out, runs, bench, figures)
        write_html(out, a.results, runs, bench, figures, rows, problems)
    except OSError as e:  # a full disk: one line; each file is whole or absent (write_whole)
        sys.exit(f"report.py: cannot write the report in {out}: "
                 f"{e.filename or ''}{': ' if e.filename else ''}{e.strerror or e}")
    if not a.quiet:
        shown, shown_bench = sweep_scope(runs, bench, a.table_sweep)
        if a.table_sweep:
            rows = table_rows(shown)
        if rows:
            print(text_table(rows) + load_note(shown, shown_bench, "\n")
                  + commits_note(shown, "\n"))
        for r in not_ok(runs):
            print(f"{r.get('status', '?').upper()}: {r.get('run_id')} ({not_ok_where(r)})")
        for b in failed_passes(bench):
            print(f"{b.get('status', '?').upper()}: {pass_words(b)}")
        for p in problems[:10]:
            print(f"warning: {p}", file=sys.stderr)
        drawn = sum(isinstance(f, rp.Figure) for f in figures)
        print(f"report: {os.path.abspath(os.path.join(out, 'report.html'))} "
              f"({drawn} plots; summary.md beside it)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
