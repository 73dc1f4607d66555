"""Writing and reading StarRing's result files so that several processes (two sweeps appending
to one results folder, two reports writing one folder, on one host or several) never see or
leave a half-written file: JSON lines appended whole (append_jsonl) and read past a bad line
(read_jsonl), files written whole through a temporary of the writer's own
(`<file>.<host>.<pid>.tmp`: write_whole, tmp_name, remove_stale_tmp), and run names claimed
in one step (claim_unique_name).

Standard library only; starring_results re-exports all of it (sr.write_whole, ...)."""
import json
import os
import re
import socket
import tempfile


def check_writable_folder(path):
    """Makes folder `path` (and its parents) and writes and removes a probe file in it: raises
    OSError when it cannot (a read-only mount, a plain file on the path), so a tool can say so in
    one line before it writes anything else."""
    os.makedirs(path, exist_ok=True)
    fd, probe = tempfile.mkstemp(dir=path, prefix=".starring-write-test-")
    os.close(fd)
    os.remove(probe)


def read_jsonl(path, lines=None):
    """Records of a JSON-lines file; a line that does not parse is reported, not fatal. A list
    `lines` gets each record's line number."""
    records, bad = [], []
    if not os.path.exists(path):
        return records, bad
    with open(path, encoding="utf-8", errors="replace") as f:  # bytes not UTF-8: a bad line
        for n, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            try:
                records.append(json.loads(line))
                if lines is not None:
                    lines.append(n)
            except json.JSONDecodeError as e:
                bad.append(f"{path}:{n}: {e}")
    return records, bad


# This host in write_whole's temporary names: a folder on shared storage may be written from
# several hosts, and a pid says whether its writer is alive on its own host only.
HOST_TAG = re.sub(r"[^A-Za-z0-9_-]", "_", socket.gethostname()) or "host"


def tmp_name(path, pid=None):
    """write_whole's temporary name for `path`: `path`.<host>.<pid>.tmp."""
    return f"{path}.{HOST_TAG}.{os.getpid() if pid is None else pid}.tmp"


def write_whole(path, write):
    """Writes a file whole or not at all: `write(tmp)` writes it to tmp_name(path), which then
    replaces `path`. A write that fails (a full disk) removes the .tmp and raises, so no cut
    file is left looking complete and an earlier good one stays."""
    tmp = tmp_name(path)  # two writers of one path (two reports, two hosts) never share it
    try:
        write(tmp)
        os.replace(tmp, path)
    except BaseException as e:
        if isinstance(e, OSError) and e.filename in (None, tmp):
            e.filename = path  # the file meant, not its temporary (which is gone)
        try:
            os.remove(tmp)
        except OSError:
            pass
        raise


def write_text_whole(path, text):
    """write_whole for a text file (UTF-8)."""
    def write(tmp):
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
    write_whole(path, write)


def remove_stale_tmp(folder, names):
    """Removes write_whole's `<name>.<host>.<pid>.tmp` files in `folder` of this host, for
    `names`, whose writer is gone (no process `pid` here): a report killed by SIGTERM or SIGKILL
    left them, and no later run removed them. A live writer's (another report in the same
    folder) stays, and so does another host's (its pid says nothing here)."""
    names = set(names)
    try:
        entries = os.listdir(folder)
    except OSError:
        return
    for entry in entries:
        m = re.fullmatch(r"(.+)\.%s\.(\d+)\.tmp" % re.escape(HOST_TAG), entry)
        if not m or m.group(1) not in names or int(m.group(2)) == os.getpid():
            continue
        try:
            os.kill(int(m.group(2)), 0)
            continue  # alive
        except ProcessLookupError:
            pass
        except (PermissionError, OverflowError, ValueError):  # another user's process
            continue
        try:
            os.remove(os.path.join(folder, entry))
        except OSError:
            pass


def append_jsonl(path, record):
    """Appends one record as one line (a single write, so concurrent readers see whole lines).
    A file whose last line was cut (a full disk, a killed writer) gets its newline first: the
    cut line stays the one bad line read_jsonl reports, instead of swallowing this record. A
    write that fails (a full disk) is undone, so this one never leaves a cut line."""
    line = json.dumps(record, sort_keys=True) + "\n"
    with open(path, "ab+", buffering=0) as f:
        size = f.seek(0, os.SEEK_END)
        if size > 0:
            f.seek(-1, os.SEEK_END)
            if f.read(1) != b"\n":
                line = "\n" + line
        data = line.encode("utf-8")
        try:  # a write that fails part-way (a full disk) leaves no cut record behind
            done = 0
            while done < len(data):
                done += f.write(data[done:])
        except OSError:
            f.truncate(size)
            raise


def unique_name(folder, name, ext=""):
    """`name`, or `name`-2, -3, ... : the first with no `folder`/<it><ext> yet, so that a run
    appended to a results folder that already holds one of that name (the same sweep again with
    --out, a hand-added run) gets files of its own instead of overwriting the earlier run's."""
    candidate, k = name, 1
    while os.path.exists(os.path.join(folder, candidate + ext)):
        k += 1
        candidate = f"{name}-{k}"
    return candidate


def claim_unique_name(folder, name, ext=""):
    """unique_name's name, made in the same step: a folder `folder`/<it> (ext "") or an empty
    file `folder`/<it><ext>, created only if nothing of that name is there (mkdir, O_EXCL), so
    that two sweeps appending to one results folder at the same moment never take one name
    (a look, then a makedirs(exist_ok=True), let both write into the same run folder)."""
    os.makedirs(folder, exist_ok=True)
    candidate, k = name, 1
    while True:
        path = os.path.join(folder, candidate + ext)
        try:
            if ext:
                os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644))
            else:
                os.mkdir(path)
            return candidate
        except FileExistsError:
            k += 1
            candidate = f"{name}-{k}"
