"""Reading one rank's Chrome trace file, a killed rank's '.partial' too (read_trace_events,
trace_base), and merging per-rank trace files into one (starring_results.merge_traces: the sweep
driver, scripts/add_run.py, scripts/merge_traces.py) without holding the events in memory.
starring_results re-exports read_trace_events and trace_base.

The files `starring train --trace` writes (common/trace.cc) hold one event per line between a
first line '{"traceEvents":[' (a finished file) or '[' (a '.partial': a rank that died, perhaps
with its last line cut by the kill) and a line starting with ']'. Those are copied line by line:
loading them as JSON took about 5 bytes of memory per byte of trace and a minute for a 10 s run
of a small model (three ranks' 610 MB: 2.9 GB resident, 55 s, after the run's time bound, in the
sweep driver, which a longer traced run could take out before the run was recorded). A file in
any other layout (a trace written by another tool) is read whole, as before."""
import json
import os

from result_files import write_whole


def read_trace_events(path):
    """The events of one rank's trace file. A finished file is a JSON object; a rank that died
    leaves '<file>.partial': Chrome's JSON Array Format, one event per line, without the closing
    ']' (which Perfetto and chrome://tracing do not need); a last line cut by the kill is dropped.
    A '.partial' beside the file is read in its place: it is always the newer run's (close()
    renames it away; open() starts a new one), and the file an earlier run's at the same path.
    `path` may name either. Raises OSError or ValueError."""
    path = trace_base(path)
    if os.path.exists(path + ".partial"):
        path += ".partial"
    with open(path, encoding="utf-8") as f:
        text = f.read()
    if not path.endswith(".partial"):
        return json.loads(text)["traceEvents"]
    body = text.strip()
    if body.startswith("{"):  # finished in place, killed before the rename
        return json.loads(body)["traceEvents"]
    if not body.startswith("["):
        raise ValueError(f"{path}: not a Chrome trace (JSON array format)")
    if body.endswith(TRACE_OBJECT_END):  # completed, killed before '{"traceEvents":' went in
        try:
            return json.loads('{"traceEvents":' + body)["traceEvents"]
        except ValueError:
            pass
    lines = body[1:].strip().rstrip(",").split(",\n")
    for keep in (len(lines), len(lines) - 1):
        try:
            return json.loads("[" + ",".join(lines[:keep]) + "]")
        except ValueError:
            continue
    raise ValueError(f"{path}: not a Chrome trace (JSON array format)")


TRACE_OBJECT_END = ',"displayTimeUnit":"ms"}'  # common/trace.cc kObjectEnd, without its newline


def trace_base(path):
    """A rank's trace file name, given it or its '.partial'."""
    return path[:-len(".partial")] if path.endswith(".partial") else path


HEADS = ('{"traceEvents":[', "[")


def _event_lines(path):
    """The event lines of one of our files (each a JSON object, no trailing comma), or None when
    the file is not in that layout. A line that is not an object ends the file's events only
    when it is an unfinished file's last line (cut by the kill); elsewhere it is a ValueError."""
    with open(path, encoding="utf-8") as f:
        if f.readline().strip() not in HEADS:
            return None
        pending, count, ended = None, 0, False
        for line in f:
            s = line.strip()
            if not s:
                continue
            if s.startswith("]"):
                ended = True
                break
            if pending is not None:
                if not (pending.startswith("{") and pending.endswith("}")):
                    raise ValueError(f"{path}: line {count + 2} is not a trace event")
                count += 1
            pending = s.rstrip(",")
        if pending is not None:
            try:  # only the last line can be cut, and only in a file that did not end
                ok = isinstance(json.loads(pending), dict)
            except ValueError:
                ok = False
            if ok:
                count += 1
            elif ended:
                raise ValueError(f"{path}: its last event is not a JSON object")
    return count


DAY_US = 86400e6


def _utc_day(path):
    """The UTC day a file of ours counts its times from (its process_name event's args.utc_day,
    common/trace.cc), or None (another layout, or a file written before it was recorded)."""
    try:
        with open(path, encoding="utf-8") as f:
            for _, line in zip(range(4), f):
                if "process_name" in line:
                    day = json.loads(line.strip().rstrip(",")).get("args", {}).get("utc_day")
                    return day if isinstance(day, int) else None
    except (OSError, ValueError, AttributeError):
        pass
    return None


def _copy_events(path, count, out, first, shift_days=0):
    """Writes the first `count` event lines of `path` to `out`, their times moved `shift_days`
    days later (a rank whose times count from a later day than the others'); returns whether
    `first` is still true (no event written yet)."""
    with open(path, encoding="utf-8") as f:
        f.readline()
        for line in f:
            if count == 0:
                break
            s = line.strip()
            if not s:
                continue
            s = s.rstrip(",")
            if shift_days:
                event = json.loads(s)
                if isinstance(event.get("ts"), (int, float)):
                    event["ts"] += shift_days * DAY_US
                if event.get("name") == "process_name" and "utc_day" in event.get("args", {}):
                    event["args"]["utc_day"] -= shift_days
                s = json.dumps(event, separators=(",", ":"))
            out.write(("" if first else ",\n") + s)
            first = False
            count -= 1
    return first


def merge(paths, out_path, skipped=None):
    """starring_results.merge_traces: see there. The merged file is written whole, through a
    temporary of this process's own (result_files.write_whole: two merges into one output, a
    sweep's and a hand-run merge_traces.py, shared '<out>.tmp', and one renamed the other's
    half-written file into place)."""
    merged = []
    write_whole(out_path, lambda tmp: merged.extend(_merge_into(paths, tmp, skipped)))
    return merged


def _source(path):
    """The file read for `path`: its '.partial' where there is one (read_trace_events)."""
    base = trace_base(path)
    return base + ".partial" if os.path.exists(base + ".partial") else base


def _merge_into(paths, tmp, skipped):
    """merge()'s body: writes the merged file to `tmp`; returns the paths merged."""
    merged, done = [], {}
    # Each rank's times count from 00:00 UTC of its utc_day: ranks that started on both sides of
    # a midnight are put on the earlier day's count (times past 86400 s: Perfetto drops negative
    # times).
    days = [d for d in (_utc_day(_source(p)) for p in paths) if d is not None]
    first_day = min(days, default=None)
    with open(tmp, "w", encoding="utf-8") as out:
        out.write('{"traceEvents":[\n')
        first = True
        for path in paths:
            base = trace_base(path)
            if base not in done:
                done[base] = False
                src = _source(path)
                try:
                    count = _event_lines(src)
                    if count is None:  # another layout: read it whole
                        for event in read_trace_events(base):
                            out.write(("" if first else ",\n") + json.dumps(event))
                            first = False
                    else:
                        day = _utc_day(src)
                        first = _copy_events(src, count, out, first,
                                             0 if day is None else day - first_day)
                    done[base] = True
                except (OSError, ValueError, KeyError, TypeError) as e:
                    if skipped is not None:
                        skipped[path] = (f"{e.strerror}: {e.filename}" if isinstance(e, OSError)
                                         and e.strerror else f"{type(e).__name__}: {e}")
            if done[base]:
                merged.append(path)
        out.write('\n],"displayTimeUnit":"ms"}\n')
    return merged
