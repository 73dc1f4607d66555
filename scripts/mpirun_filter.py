#!/usr/bin/env python3
"""Condenses Open MPI's (4.x) own multi-line failure banners on mpirun's stderr to one short line.

scripts/mpirun.sh pipes mpirun's stderr through this filter. The ranks' own output passes
through unchanged, byte for byte and as soon as it arrives (progress bars included). What
mpirun itself prints when a job fails is a "help message" framed by lines of dashes; the known
ones are replaced by at most one line per job, e.g.

    mpirun: job stopped: rank 1 on node vm was killed by signal 9 (Killed)
    mpirun: job stopped: rank 0 called MPI_Abort (error code 1)
    mpirun: job stopped: rank 1 exited with code 2

(the program has already said why on its own line; an exit's line names the rank that line
names, where it names one: every rank exits with the job's code, and mpirun names the first
exit it saw), or, when the program could not be started
at all (a wrong path, not built yet),

    mpirun: job stopped: cannot start build/bin/starring on node vm: no such file from this
    folder, or not executable (scripts/build.sh builds build/bin/starring)

mpirun may print its MPI_Abort banner before it relays the `starring: error:` line the aborting
rank wrote just before (seen under load in test_cli_faults' hung-peer case): until such a line
has passed, that one line is held back and written right after the first one, or when mpirun
closes its stderr. Over TCP, a peer's hang-up (its frame, or a btl_tcp note of a reset connection,
a broken pipe) is held until the program's error line or mpirun's line says why, then dropped;
a connect that failed, which may be the cause, is kept (its frame at the end, dropped if mpirun
says a rank was killed: connects to it fail too). A line that starts on a rank's open
progress-bar line (another rank's error line, mpirun's banner) ends the bar's line first.
Frames this filter does not know are passed on unchanged, so nothing mpirun says is lost
except the known boilerplate.
With `--launcher-pid PID` (mpirun's pid, as scripts/mpirun.sh passes it), a crash of mpirun
itself (Open MPI 4.1's mpirun sometimes segfaults in PMIx_server_finalize while it stops a job
whose rank is stopped, after the program's own error line) is one line too, e.g.

    mpirun: crashed itself (Segmentation fault, in PMIx_server_finalize) as it ended the job

instead of its "*** Process received signal ***" backtrace; a rank's backtrace passes. Run
`STARRING_MPI_VERBOSE=1 scripts/mpirun.sh ...` to see mpirun's messages unfiltered.
"""
import os
import re
import signal
import sys

DASHES = re.compile(rb"^-{74}\r?$")  # the frame of every Open MPI help message
# Open MPI 4.1 race when two ranks abort at once: mpirun fails to print the second help message
# ("Data unpack would read past end of buffer", "Data unpack had inadequate space", "Out of
# resource", all in show_help.c), sometimes the only one, an MPI_Abort's banner: the ranks
# already said what went wrong.
HELP_LOST = re.compile(rb"ORTE_ERROR_LOG: .* in file .*show_help\.c")
# Lines mpirun prints outside frames that only add noise once the frames are condensed.
DROP = [
    re.compile(rb"more process(es)? ha(s|ve) sent help message"),
    re.compile(rb'Set MCA parameter "orte_base_help_aggregate" to 0'),
    HELP_LOST,
    # mpirun passing on the SIGCONT that `timeout` sends with its SIGTERM, and libevent's
    # complaint about a socket of a rank that has just been aborted.
    re.compile(rb"^mpirun: Forwarding signal 18 to job"),
    re.compile(rb"^\[warn\] Epoll MOD\(\d+\) on fd \d+ failed"),
]


def condense(frame):
    """The one line for a known frame (b"" to drop it), or None for an unknown frame."""
    text = b" ".join(frame.split())
    m = re.search(rb"MPI_ABORT was invoked on rank (\d+) in communicator .*? with errorcode (-?\d+)",
                  text)
    if m:
        return b"rank %s called MPI_Abort (error code %s)" % m.groups()
    if re.search(rb"Primary job terminated normally, but \d+ process(es)? returned", text):
        return b""  # always followed by the frame that names the process
    m = re.search(rb"exited with non-zero status.*?Process name: \[\[\d+,\d+\],(\d+)\] "
                  rb"Exit code: (-?\d+)", text)
    if m:
        if m.group(2) == b"75":  # experiments/commands.h, kStoppedExit
            return b"rank %s exited with code 75 (stopped on request after a checkpoint)" % m.group(1)
        return b"rank %s exited with code %s" % m.groups()
    m = re.search(rb"noticed that process rank (\d+) with PID (\d+) on node (\S+) exited on "
                  rb"signal (\d+)(?: \(([^)]*)\))?", text)
    if m:
        rank, _, node, sig, name = m.groups()  # Open MPI 4.1 reports pid 0 here
        name = b" (%s)" % name if name else b""
        return b"rank %s on node %s was killed by signal %s%s" % (rank, node, sig, name)
    m = re.search(rb"has exited due to process rank (\d+) with PID (\d+) on node (\S+) "
                  rb"(exiting improperly|calling \"abort\")", text)
    if m:
        rank, _, node, how = m.groups()
        what = b"called abort" if b"abort" in how else b"exited without calling MPI_Finalize"
        return b"rank %s on node %s %s" % (rank, node, what)
    # help-orterun.txt's orterun:proc-not-found: the program's path is wrong from the folder
    # mpirun runs in, or it is not built yet (mpirun then exits 132); nothing has started
    m = re.search(rb"unable to launch the specified application as it could not access or execute "
                  rb"an executable: Executable: (\S+) Node: (\S+)", text)
    if m:
        return (b"cannot start %s on node %s: no such file from this folder, or not executable "
                b"(scripts/build.sh builds build/bin/starring)" % m.groups())
    return None


# A rank's note that mpirun's SIGTERM stopped it (common/fault.h): what the user needs after
# Ctrl-C, noise when another rank's failure made mpirun stop the job. Held to the end and
# dropped when mpirun names a rank that failed.
STOPPED = re.compile(rb"^starring: rank \d+: stopped by SIG[A-Z]+(;|$)")  # bench's ends there
# A rank stopped (SIGSTOP) before MPI_Init and resumed by mpirun as it stops the job, after a
# rank said why on its own line (MPI_Init did not complete ...), finds the job's shared memory
# gone; its frame is dropped only then (before any error line it is passed on: a real problem).
SHM_INIT = re.compile(rb"A system call failed during shared memory initialization")
# Over TCP (ranks on several hosts, or STARRING_MPI_ARGS="--mca btl tcp,self"), a rank whose
# peer is gone says so through Open MPI's TCP transport: a frame (help-mpi-btl-tcp.txt's peer
# hung up) or notes (BTL_ERROR, "[host][[job,1],rank][file:line:function] text"),
# "[vm][[17527,1],0][.../btl_tcp_frag.c:135:mca_btl_tcp_frag_send] mca_btl_tcp_frag_send:
# writev failed: Connection reset by peer (104)", or Broken pipe (32), or the EFAULT form
# "... writev error (0x556ad1505598, 8)" followed by its own "\tBad address(3)" line and a blank
# one (btl_tcp_frag.c's format ends in "\n" and BTL_ERROR adds one). Seen from a rank stopped
# (SIGSTOP) and resumed by mpirun as it stops the job, after a rank's error line and mpirun's
# (28 of 45 jobs stopping a rank mid-training, docs/LIMITS.md), and from the survivors of a
# killed rank, before mpirun's line (5 of 5). Held until a program's error line or mpirun's own
# line says what happened, then dropped (as SHM_INIT's frame); passed on at the end otherwise.
TCP_GONE = re.compile(rb"An MPI communication peer process has unexpectedly disconnected")
TCP_NOTE = re.compile(rb"^\[[^\]]*\]\[\[\d+,\d+\],\d+\]\[[^\]]*/btl_tcp_\w+\.c:\d+:\w+\] ")
TCP_NOTE_GONE = re.compile(rb"\] mca_btl_tcp_frag_(?:send|recv): (?:writev|readv) (?:failed: "
                           rb"(?:Connection reset by peer \(104\)|Broken pipe \(32\))|"
                           rb"(error) \([^()]*, \d+\))\r?$")
TCP_NOTE_ERRNO = re.compile(rb"^\t[^\t]+\(\d+\)\r?$")  # the error form's "\t%s(%lu)" line
# A connect that failed (4.1's frame, help-mpi-btl-tcp.txt's client connect fail, "Open MPI
# failed to TCP connect to a peer MPI process"; older versions' note "[...btl_tcp_endpoint.c:NNN:
# mca_btl_tcp_endpoint_complete_connect] connect() to 172.17.0.1 failed: No route to host (113)")
# and any other TCP note may be the cause (a docker0 or virbr0 interface picked, a firewall; the
# waiting rank then times out): passed on as it comes, and dropped only after a program's error
# line or mpirun's own line, when a peer stopped or killed as the job ends makes connects fail.
TCP_CONNECT = re.compile(rb"Open MPI failed to TCP connect to a peer MPI process")
# The program's own error line (experiments/main.cc), which the launcher's line follows, and
# the rank it names, if any ("starring: error: rank 0: ...", "... server rank 2: ...").
ERROR = re.compile(rb"^starring: error: ")
ERROR_START = b"starring: error: "
ERROR_RANK = re.compile(rb"^starring: error: (?:server )?rank (\d+)[: ]")
# The condensed line for a rank's non-zero exit. Where the program's lines name the failing
# rank(s), every rank exits with the job's code (experiments/main.cc: the ranks agree on it and
# exit together), and mpirun names the first exit it saw, often another rank's: rank 0 refused
# its --metrics-file and mpirun said "rank 1 exited with code 2" in 5 of 6 runs. The line then
# names the first rank the program's lines named.
EXITED = re.compile(rb"^(mpirun: job stopped: rank )(\d+)( exited with code )")
# A rank's progress bar (--progress bar) leaves its line open: each redraw starts with "\r" and
# none ends it. mpirun relays what the other ranks write as it comes, so another rank's error
# line, a fault's note or mpirun's own banner landed on the bar's line ("... ETA 0:02 starring:
# error: server rank 2: ...": 6 of 6 np 3 ps jobs with rank 0's bar and rank 1 hung), where
# neither this filter nor a reader of the log (cli_case, the sweep's fault_outcome) took it for
# one. The start of such a line ends the bar's line first; the bar's own text has none of them.
LINE_START = re.compile(rb"starring: |\[starring\] |-{74}|mpirun: |\[[\w.-]+:\d+\] ")
# Open MPI's signal handler's backtrace, each line "[host:pid] ..." (pid zero-padded).
BACKTRACE = re.compile(rb"^\[[^\]:]+:0*(\d+)\] (.*)$")


def crash_line(lines):
    """The one line for mpirun's own backtrace (its lines without the "[host:pid] " prefix)."""
    sig = b"a signal"
    where = b""
    for ln in lines:
        m = re.match(rb"Signal: (.+)$", ln)
        if m:
            sig = m.group(1).strip()
        m = re.match(rb"\[ *\d+\] .*?\(([A-Za-z_]\w*)\+0x[0-9a-f]+\)", ln)
        if m and not where and m.group(1) not in (b"__restore_rt", b"__libc_start_main"):
            where = b", in " + m.group(1)
    sig = re.sub(rb" \(\d+\)$", b"", sig)
    return b"mpirun: crashed itself (%s%s) as it ended the job\n" % (sig, where)


def partial_line_start(data):
    """How many bytes at the end of `data` may begin a LINE_START the next read completes."""
    for k in range(min(len(data), 74), 0, -1):
        tail = data[-k:]
        if (any(w.startswith(tail) for w in (b"starring: ", b"[starring] ", b"mpirun: "))
                or tail.lstrip(b"-") == b"" or re.fullmatch(rb"\[[\w.-]*(:\d*)?", tail)):
            return k
    return 0


class Filter:
    def __init__(self, out, launcher_pid=None):
        self.out = out
        self.launcher_pid = launcher_pid  # mpirun's: its own backtrace becomes one line
        self.crash = None  # the lines of mpirun's backtrace so far, while it is being printed
        self.pending = b""  # an incomplete line that may turn out to be mpirun's
        self.midline = False  # the current line was passed on in part already
        self.midline_error = False  # ... and it is a program's error line
        self.bar = False  # ... and it is a progress bar's (began with a redraw, "\r")
        # a bar's line this filter ended: the newline its rank writes to end it is not passed on.
        # That newline comes before the program's next line, mpirun's frames and notes aside (a
        # rank stopped by mpirun ends its bar, then says so): a rank that died drawing its bar
        # writes none, so the flag lasts until then, not to the next blank line of any rank
        self.bar_cut = False
        self.cutting = False  # ... and the line that cut it has not ended yet
        self.frame = None  # lines of an open frame, dashes included
        self.said = False  # the one condensed line of this job was written or is held
        self.held = b""  # that line, an MPI_Abort's or an exit's, until a program's error line
        self.errors = False  # a program's "starring: error:" line has passed
        self.error_text = b""  # the start of a program's error line passed on in pieces
        self.named = []  # the ranks the program's error lines named, in order
        self.stopped = []  # STOPPED lines held until the end
        self.help_lost = False  # mpirun lost a help message (HELP_LOST), maybe an abort's banner
        self.open = False  # the last byte written was not a newline
        # after a TCP_NOTE_GONE's error form: its own lines still to come (b"errno", b"blank")
        # and whether the note was held (True) or dropped
        self.tcp_cont = None
        self.tcp_held = []  # TCP_GONE frames, TCP_NOTE_GONE lines until something says why
        # TCP_CONNECT frames seen before anything said why, until the end: dropped when mpirun
        # says a rank was killed (its survivors' connects to it fail: 1 of the CI runs of
        # test_killed_worker_over_tcp on 2026-12-02, "connect() to 127.0.0.1:1025 failed:
        # Operation now in progress (115)" before mpirun's line), passed on otherwise (on a
        # cluster the failed connect may be why a rank then timed out)
        self.connect_held = []

    def write(self, data):
        if data:
            os.write(self.out, data)
            self.open = not data.endswith(b"\n")

    def line(self, ln):
        bare = ln.rstrip(b"\n")
        cont, self.tcp_cont = self.tcp_cont, None
        m = BACKTRACE.match(bare) if self.launcher_pid is not None else None
        if m and int(m.group(1)) == self.launcher_pid and self.frame is None:
            if self.crash is None and m.group(2) == b"*** Process received signal ***":
                self.crash = []
                return
            if self.crash is not None:
                if m.group(2) == b"*** End of error message ***":
                    self.write(crash_line(self.crash))
                    self.crash = None
                else:
                    self.crash.append(m.group(2))
                return
        if self.frame is not None:
            self.frame.append(ln)
            if DASHES.match(bare):
                self.close_frame()
            return
        if DASHES.match(bare):
            self.frame = [ln]
        elif STOPPED.match(bare):
            self.stopped.append((ln, self.errors))
        elif cont and (TCP_NOTE_ERRNO.match(bare) if cont[0] == b"errno"
                       else bare in (b"", b"\r")):  # the note's own line: as the note
            if cont[0] == b"errno":
                self.tcp_cont = (b"blank", cont[1])
            if cont[1]:
                self.tcp_held.append(ln)
        elif TCP_NOTE.match(bare) and (self.errors or self.said or TCP_NOTE_GONE.search(bare)):
            keep = not (self.errors or self.said)  # a peer gone, and nothing said why yet
            if keep:
                self.tcp_held.append(ln)
            gone = TCP_NOTE_GONE.search(bare)
            if gone and gone.group(1):  # the error form: its errno line and a blank one follow
                self.tcp_cont = (b"errno", keep)
        elif not any(p.search(bare) for p in DROP):
            self.write(ln)
            if ERROR.match(bare):
                self.error_passed(bare)
        elif HELP_LOST.search(bare):
            self.help_lost = True

    def error_passed(self, text):  # a program's error line is out: the held line may follow it
        self.errors = True
        self.tcp_held = []
        m = ERROR_RANK.match(text)
        if m and int(m.group(1)) not in self.named:
            self.named.append(int(m.group(1)))
        self.write(self.as_named(self.held))
        self.held = b""

    def as_named(self, said):
        """`said` naming the program's failing rank where it names an exit of another one."""
        m = EXITED.match(said)
        if not m or not self.named or int(m.group(2)) in self.named:
            return said
        return m.group(1) + b"%d" % self.named[0] + m.group(3) + said[m.end():]

    def close_frame(self):
        frame, self.frame = self.frame, None
        body = b"".join(frame[1:-1])
        if not body.strip():  # two dash lines in a row: the second opens the next frame
            self.write(frame[0])
            self.frame = [frame[-1]]
            return
        short = condense(body)
        if short is None and self.errors and SHM_INIT.search(b" ".join(body.split())):
            short = b""  # a stopped rank resumed into MPI_Init while the job ends: noise
        if short is None and TCP_GONE.search(b" ".join(body.split())):
            if not (self.errors or self.said):
                self.tcp_held.append(b"".join(frame))
            return
        if short is None and TCP_CONNECT.search(b" ".join(body.split())):
            if not (self.errors or self.said):  # after those: its peer was stopped or killed
                self.connect_held.append(b"".join(frame))
            return
        if short is None:
            self.write(b"".join(frame))
        elif short and not self.said:
            self.said = True
            self.tcp_held = []  # a rank's peer was gone: this line says why
            if b"killed by signal" in short:
                self.connect_held = []  # connects to the killed rank failed
            said = b"mpirun: job stopped: " + short + b"\n"
            # an MPI_Abort's or an exit's line waits for the program's error line (an exit's
            # may then name the rank that line names)
            if (b"MPI_Abort" in short or EXITED.match(said)) and not self.errors:
                self.held = said
            else:
                self.write(self.as_named(said))

    def feed(self, data):
        data = self.pending + data
        self.pending = b""
        while data:
            # another line starts on a progress bar's line: end the bar's line first
            bar = (self.bar if self.midline else data.startswith(b"\r"))
            if bar:
                m = LINE_START.search(data, 0 if self.midline else 1)
                if m and b"\n" not in data[: m.start()]:
                    self.write(data[: m.start()] + b"\n")
                    self.midline = self.bar = False
                    self.bar_cut = self.cutting = True
                    data = data[m.start() :]
            nl = data.find(b"\n")
            if nl < 0:
                break
            ln, data = data[: nl + 1], data[nl + 1 :]
            if self.midline:
                self.write(ln)
                self.line_ended(ln)
                self.midline = self.bar = False
                if self.midline_error:
                    self.error_passed(self.error_text + ln)
                    self.error_text = b""
            elif (ln in (b"\n", b"\r\n") and self.bar_cut and self.frame is None
                  and not self.tcp_cont):
                self.bar_cut = False
            else:
                if ln.startswith(b"\r"):
                    self.bar_cut = False  # a bar again, and its line ended by its own newline
                self.line_ended(ln)
                self.line(ln)
        if not data:
            return
        # An incomplete line: hold it only while it could still be mpirun's (a dash line or a
        # "[host:pid] ..." note, or anything inside a frame) or the start of a program's error
        # line cut short (told from other lines only once it reads "starring: error: "); pass
        # anything else on now.
        if self.midline:
            keep = partial_line_start(data) if self.bar else 0
            self.write(data[: len(data) - keep])
            self.pending = data[len(data) - keep :]  # maybe the start of another line: held
            if self.midline_error:
                self.error_text += data
        elif (self.frame is not None or data.lstrip(b"-") == b"" or data.startswith(b"[")
              or ERROR_START.startswith(data)
              or (self.tcp_cont and self.tcp_cont[0] == b"errno" and data.startswith(b"\t"))):
            self.pending = data
        else:
            self.tcp_cont = None  # what follows a note is not its own line
            self.bar = data.startswith(b"\r")
            self.bar_cut = self.bar_cut and not self.bar
            keep = partial_line_start(data) if self.bar else 0
            self.write(data[: len(data) - keep])
            self.pending = data[len(data) - keep :]  # maybe the start of another line: held
            self.midline = True
            self.midline_error = bool(ERROR.match(data))
            self.error_text = data if self.midline_error else b""

    def line_ended(self, ln):
        """A line other than the cut bar's newline ended: a program's line after the one that
        cut the bar means the bar's rank wrote no newline before it (it died): a blank line
        later on is another's. Lines of mpirun's (a frame, a "[host:pid] " note) leave it."""
        if self.midline and self.bar:
            return  # the bar's own line, ended by its own newline
        if not self.midline and (self.frame is not None or self.tcp_cont or ln.startswith(b"-")
                                 or ln.startswith(b"mpirun: ") or BACKTRACE.match(ln)):
            self.cutting = False  # it may have been the line that cut the bar
            return
        if self.cutting:
            self.cutting = False
        else:
            self.bar_cut = False

    def finish(self):
        if self.pending:
            self.line(self.pending)
        if self.crash is not None:  # the backtrace was cut short (mpirun died printing it)
            self.write(crash_line(self.crash))
        if self.frame is not None:
            self.write(b"".join(self.frame))
        self.write(b"".join(self.connect_held))  # no rank was killed: maybe the cause
        self.write(b"".join(self.tcp_held))  # nothing said why: passed on
        # a rank's stop note is noise where mpirun stopped the job for a failed rank: it said so,
        # or it lost the banner that would have said so: then a SIGTERM (what mpirun sends) note
        # after a program's error line is its doing; one before, or another signal (a user's
        # Ctrl-C), may be the cause and is kept
        def noise(ln, after_error):
            return self.said or (self.help_lost and after_error and b"SIGTERM" in ln)
        rest = self.held + b"".join(ln for ln, after in self.stopped if not noise(ln, after))
        # a progress bar's last redraw, or a last line without its newline (a "[host:pid]" note
        # held while it might have been mpirun's), left its line open: end it
        if rest and self.open:
            self.write(b"\n")
        self.write(rest)


def main():
    # Ctrl-C reaches the whole process group, and so does a batch system's SIGUSR1 (a preemption
    # notice, scancel -b -s USR1): mpirun handles them; this filter keeps relaying until mpirun
    # closes its stderr (killed by SIGUSR1, it lost the stopped run's lines).
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGUSR1, signal.SIG_IGN)
    pid = None
    if len(sys.argv) == 3 and sys.argv[1] == "--launcher-pid" and sys.argv[2].isdigit():
        pid = int(sys.argv[2])
    elif len(sys.argv) != 1:
        sys.exit("usage: mpirun_filter.py [--launcher-pid PID] (mpirun's stderr on stdin)")
    f = Filter(sys.stderr.fileno(), pid)
    while True:
        try:
            chunk = os.read(sys.stdin.fileno(), 65536)
        except InterruptedError:
            continue
        if not chunk:
            break
        f.feed(chunk)
    f.finish()


if __name__ == "__main__":
    main()
