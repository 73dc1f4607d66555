#!/usr/bin/env python3
"""scripts/mpirun_filter.py alone on canned Open MPI 4.1 output (no binary, no mpirun):
  test_mpirun_filter.py
Open MPI's banners for MPI_Abort, a non-zero exit and a rank killed by a signal become one
`mpirun: job stopped: ...` line after the ranks' own lines; a stopped note goes last unless
mpirun names a failed rank; everything else passes unchanged, in whatever pieces it arrives.
What a user sees from the real executable under scripts/mpirun.sh: test_cli_*.py.
"""
import os
import select
import subprocess
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
FILTER = os.path.join(REPO, "scripts", "mpirun_filter.py")

# Open MPI 4.1's own stderr for: two ranks calling MPI_Abort, a rank killed by a signal, and a
# job whose ranks exit non-zero; plus what a rank prints, partial progress lines included.
DASH = "-" * 74 + "\n"
ABORT = (DASH + "MPI_ABORT was invoked on rank 1 in communicator MPI_COMM_WORLD\nwith errorcode 1."
         "\n\nNOTE: invoking MPI_ABORT causes Open MPI to kill all MPI processes.\nYou may or may "
         "not see output from other processes, depending on\nexactly when Open MPI kills them.\n"
         + DASH)
NONZERO = (DASH + "Primary job  terminated normally, but 1 process returned\na non-zero exit code."
           " Per user-direction, the job has been aborted.\n" + DASH + DASH
           + "mpirun detected that one or more processes exited with non-zero status, thus "
           "causing\nthe job to be terminated. The first process to do so was:\n\n  Process name:"
           " [[19852,1],3]\n  Exit code:    2\n" + DASH)
KILLED = (DASH + "Primary job  terminated normally, but 1 process returned\na non-zero exit code."
          " Per user-direction, the job has been aborted.\n" + DASH + DASH
          + "mpirun noticed that process rank 1 with PID 0 on node vm exited on signal 9 "
          "(Killed).\n" + DASH)
# A rank that exited without MPI_Finalize, one that called abort() (help-orterun.txt's
# proc-exit-no-sync and proc-ordered-abort), and a rank stopped on request after a checkpoint.
NOSYNC = (DASH + "mpirun has exited due to process rank 2 with PID 0 on\nnode vm exiting "
          "improperly. There are three reasons this could occur:\n\n3. this process called "
          "\"MPI_Abort\" or \"orte_abort\" and the mca parameter\norte_create_session_dirs is set "
          "to false.\n" + DASH)
ORDERED = (DASH + "mpirun has exited due to process rank 0 with PID 0 on\nnode vm calling "
           "\"abort\". This may have caused other processes\nin the application to be terminated "
           "by signals sent by mpirun\n(as reported here).\n" + DASH)
SHMINIT = (DASH + "A system call failed during shared memory initialization that should\nnot have."
           "  It is likely that your MPI job will now either abort or\nexperience performance "
           "degradation.\n\n  Local host:  vm\n  System call: open(2) \n  Error:       No such "
           "file or directory (errno 2)\n" + DASH)
# A program that cannot be started (help-orterun.txt's orterun:proc-not-found), and a frame
# this filter does not know (orte_rmaps_base:all-available-resources-used).
MISSING = (DASH + "mpirun was unable to launch the specified application as it could not "
           "access\nor execute an executable:\n\nExecutable: build/bin/starring\nNode: vm\n\n"
           "while attempting to start process rank 0.\n" + DASH)
UNKNOWN = (DASH + "There are not enough slots available in the system to satisfy the 4\nslots "
           "that were requested by the application:\n\n  ./a.out\n\nEither request fewer slots "
           "for your application, or make more slots\navailable for use.\n" + DASH)


# Open MPI 4.1's mpirun crashing as it stopped a job whose rank 1 was stopped (SIGSTOP) after
# rank 0's error (test_cli_stopped's test_rank_stopped_at_its_exit, once in a loaded run); a rank's
# own backtrace has the same shape with the rank's pid.
CRASH = "".join("[vm:02956] " + l + "\n" for l in [
    "*** Process received signal ***", "Signal: Segmentation fault (11)",
    "Signal code: Address not mapped (1)", "Failing at address: (nil)",
    "[ 0] /lib/x86_64-linux-gnu/libc.so.6(+0x3c050)[0x7fd3f7d46050]",
    "[ 1] /lib/x86_64-linux-gnu/libpmix.so.2(PMIx_server_finalize+0xb08)[0x7fd3f4c7d118]",
    "[ 2] /usr/lib/x86_64-linux-gnu/openmpi/lib/openmpi3/mca_pmix_ext3x.so(ext3x_server_finalize"
    "+0x386)[0x7fd3f763e6f6]",
    "[ 6] mpirun(+0x13ea)[0x562a0cbe23ea]",
    "[ 8] /lib/x86_64-linux-gnu/libc.so.6(__libc_start_main+0x85)[0x7fd3f7d31305]",
    "*** End of error message ***"])


def filtered(data, chunk=7, launcher_pid=None):
    pid = [] if launcher_pid is None else ["--launcher-pid", str(launcher_pid)]
    p = subprocess.Popen([sys.executable, FILTER] + pid, stdin=subprocess.PIPE,
                         stderr=subprocess.PIPE)
    for i in range(0, len(data), chunk):  # small writes: lines arrive in pieces
        p.stdin.write(data[i:i + chunk].encode())
        p.stdin.flush()
    p.stdin.close()
    with p.stderr:
        out = p.stderr.read().decode()
    p.wait(timeout=30)
    return out


class Filter(unittest.TestCase):
    def test_abort_banners_become_one_line(self):
        rank = "starring: error: rank 1: boom\n"
        agg = ("[vm:10853] 1 more process has sent help message help-mpi-api.txt / mpi-abort\n"
               '[vm:10853] Set MCA parameter "orte_base_help_aggregate" to 0 to see all help / '
               "error messages\n")
        race = ("[vm:10956] [[17970,0],0] ORTE_ERROR_LOG: Data unpack had inadequate space in file "
                "../../../orte/util/show_help.c at line 513\n"
                "[vm:10957] [[17971,0],0] ORTE_ERROR_LOG: Data unpack would read past end of "
                "buffer in file ../../../orte/util/show_help.c at line 501\n"
                "[vm:12607] [[24001,0],0] ORTE_ERROR_LOG: Out of resource in file "
                "../../../orte/util/show_help.c at line 501\n"
                "mpirun: Forwarding signal 18 to job\n"
                "[warn] Epoll MOD(1) on fd 24 failed. Old events were 6; read change was 0 (none); "
                "write change was 2 (del); close change was 0 (none): Bad file descriptor\n")
        out = filtered(rank + ABORT + race + ABORT + agg)
        self.assertEqual(out, rank + "mpirun: job stopped: rank 1 called MPI_Abort (error code 1)"
                         "\n")

    def test_the_condensed_line_comes_after_the_ranks_lines(self):
        # mpirun may print its MPI_Abort banner before it relays the line the aborting rank
        # wrote just before (under load, in test_hung_ring_peer_ends_soon): the rank's line first
        rank = "starring: error: rank 0: timeout after 2.0 s in shared-memory ring\n"
        self.assertEqual(filtered(ABORT + rank), rank + "mpirun: job stopped: rank 1 called "
                         "MPI_Abort (error code 1)\n")

    def test_mpirun_crashing_itself_is_one_line(self):
        rank = "starring: error: rank 0: the job finished, but rank 1 did not reach its exit\n"
        line = ("mpirun: crashed itself (Segmentation fault, in PMIx_server_finalize) as it ended "
                "the job\n")
        self.assertEqual(filtered(rank + CRASH, launcher_pid=2956), rank + line)
        # cut short (mpirun died printing it): the line all the same, at the end
        cut = CRASH[:CRASH.index("[vm:02956] [ 2]")]
        self.assertEqual(filtered(rank + cut, launcher_pid=2956), rank + line)
        # a rank's backtrace (another pid), or no launcher pid given: passed on as it is
        self.assertEqual(filtered(rank + CRASH, launcher_pid=2957), rank + CRASH)
        self.assertEqual(filtered(rank + CRASH), rank + CRASH)

    def test_exit_and_signal_banners(self):
        self.assertEqual(filtered("x\n" + NONZERO), "x\nmpirun: job stopped: rank 3 exited with "
                         "code 2\n")
        self.assertEqual(filtered(KILLED), "mpirun: job stopped: rank 1 on node vm was killed by "
                         "signal 9 (Killed)\n")

    def test_an_exit_is_named_by_the_rank_the_error_names(self):
        # Every rank exits with the job's code and mpirun names the first exit it saw: rank 0
        # refused its --metrics-file, and the line said "rank 1 exited with code 2" (5 of 6 runs)
        err = "starring: error: rank 0: --metrics-file: folder '/nonexistent' does not exist\n"
        named = "mpirun: job stopped: rank 0 exited with code 2\n"
        self.assertEqual(filtered(err + NONZERO), err + named)
        self.assertEqual(filtered(err + NONZERO, chunk=1), err + named)  # in pieces
        self.assertEqual(filtered(NONZERO + err), err + named)  # relayed after mpirun's frame
        server = "starring: error: server rank 2: timeout after 2 s: worker rank 1 sent nothing\n"
        self.assertEqual(filtered(server + NONZERO), server + named.replace("0", "2", 1))
        # the exit mpirun names is one the program's lines name, or they name no rank: as is
        also = "starring: error: rank 3: boom\n"
        self.assertEqual(filtered(err + also + NONZERO),
                         err + also + "mpirun: job stopped: rank 3 exited with code 2\n")
        every = "starring: error: unknown backend 'x'\n"
        self.assertEqual(filtered(every + NONZERO),
                         every + "mpirun: job stopped: rank 3 exited with code 2\n")
        # a killed rank is the one killed, whatever the lines say
        self.assertEqual(filtered(err + KILLED), err + "mpirun: job stopped: rank 1 on node vm "
                         "was killed by signal 9 (Killed)\n")

    def test_improper_exit_abort_and_a_stop_on_request(self):
        self.assertEqual(filtered(NOSYNC), "mpirun: job stopped: rank 2 on node vm exited without "
                         "calling MPI_Finalize\n")
        self.assertEqual(filtered(ORDERED), "mpirun: job stopped: rank 0 on node vm called abort\n")
        self.assertEqual(filtered(NONZERO.replace("Exit code:    2", "Exit code:    75")),
                         "mpirun: job stopped: rank 3 exited with code 75 (stopped on request "
                         "after a checkpoint)\n")

    def test_a_program_that_cannot_be_started_is_one_line(self):
        # the new user's mistake (a relative path from another folder, or not built yet): Open
        # MPI's 9-line frame on stderr (its 'N total processes failed to start' goes to stdout)
        self.assertEqual(filtered(MISSING), "mpirun: job stopped: cannot start build/bin/starring "
                         "on node vm: no such file from this folder, or not executable "
                         "(scripts/build.sh builds build/bin/starring)\n")

    def test_a_frame_that_arrives_in_pieces_is_condensed(self):
        # the dash line that opens a frame cut short by a read: held until its newline
        data = "x\n" + NONZERO
        for cut in (len("x\n") + 30, len("x\n") + len(NONZERO) - 10):
            p = subprocess.Popen([sys.executable, FILTER], stdin=subprocess.PIPE,
                                 stderr=subprocess.PIPE)
            p.stdin.write(data[:cut].encode())
            p.stdin.flush()
            # The filter passes "x\n" on once it has read the first piece (one write under
            # PIPE_BUF, so read whole): only then comes the second, whatever the machine's load
            # (a fixed sleep let a slow start read both pieces at once, testing nothing).
            first = p.stderr.read(2)
            p.stdin.write(data[cut:].encode())
            p.stdin.close()
            with p.stderr:
                out = (first + p.stderr.read()).decode()
            p.wait(timeout=30)
            self.assertEqual(out, "x\nmpirun: job stopped: rank 3 exited with code 2\n", cut)

    def test_a_stopped_note_shows_unless_mpirun_names_a_failed_rank(self):
        note = ("starring: rank 0: stopped by SIGTERM; checkpoints written so far are whole, "
                "metrics stay in their .partial file\n")
        self.assertEqual(filtered("a\n" + note + "b\n"), "a\nb\n" + note)  # Ctrl-C: at the end
        self.assertEqual(filtered(note + KILLED), "mpirun: job stopped: rank 1 on node vm was "
                         "killed by signal 9 (Killed)\n")  # another rank died: only that
        # a progress bar redrawn after the note (the training thread was still running): the
        # note, held to the end, was glued to the bar's last ETA
        bar = "\r[##..] step 5/9 ETA 0:01 "
        self.assertEqual(filtered(bar + "\n" + note + bar), bar + "\n" + bar + "\n" + note)
        # a last line without its newline that was held as possibly mpirun's ("[host:pid] ...")
        part = "[vm:1234] a note cut short"
        self.assertEqual(filtered(note + part), part + "\n" + note)
        bench = "starring: rank 0: stopped by SIGTERM\n"  # bench, env: nothing kept to mention
        self.assertEqual(filtered(bench + "b\n"), "b\n" + bench)
        self.assertEqual(filtered(bench + KILLED), "mpirun: job stopped: rank 1 on node vm was "
                         "killed by signal 9 (Killed)\n")

    def test_a_stopped_note_after_an_error_whose_abort_banner_mpirun_lost(self):
        # Open MPI 4.1 sometimes loses the MPI_Abort banner itself (its show_help race), so no
        # condensed line names the failed rank; the note of a rank mpirun then stopped read as if
        # the user had pressed Ctrl-C (ps --fault hang, np 3: 1 of 6 jobs dedicated, 1-2 of 6
        # co-located, on 2026-12-02)
        note = ("starring: rank 0: stopped by SIGTERM; checkpoints written so far are whole, "
                "metrics stay in their .partial file\n")
        error = "starring: error: server rank 2: timeout after 2 s: worker rank 1 sent nothing\n"
        lost = ("[vm:31448] [[5670,0],0] ORTE_ERROR_LOG: Data unpack would read past end of "
                "buffer in file ../../../orte/util/show_help.c at line 501\n")
        self.assertEqual(filtered(error + lost + note), error)
        self.assertEqual(filtered(error + note + lost), error)
        # without a program's error line, or without the lost banner, the note stays
        self.assertEqual(filtered(lost + note), note)
        self.assertEqual(filtered(error + note), error + note)
        # a note before the error line, or of another signal (the user's Ctrl-C), may be the cause
        self.assertEqual(filtered(note + error + lost), error + note)  # notes are held to the end
        ctrl_c = note.replace("SIGTERM", "SIGINT")
        self.assertEqual(filtered(error + lost + ctrl_c), error + ctrl_c)

    def test_a_stopped_ranks_late_shared_memory_frame_after_an_error(self):
        # A rank stopped before MPI_Init, resumed as mpirun stops the job another rank failed
        # (test_cli_stopped's test_rank_stopped_before_mpi_init): its frame is noise then
        err = "starring: error: rank 0: MPI_Init did not complete within 11 s (...)\n"
        exited = (DASH + "mpirun detected that one or more processes exited with non-zero status, "
                  "thus causing\nthe job to be terminated. The first process to do so was:\n\n"
                  "  Process name: [[19852,1],0]\n  Exit code:    1\n" + DASH)
        self.assertEqual(filtered(err + SHMINIT + exited),
                         err + "mpirun: job stopped: rank 0 exited with code 1\n")
        # before any program's error line it may be the problem itself: passed on
        self.assertEqual(filtered(SHMINIT), SHMINIT)

    def test_tcp_complaints_of_a_peer_gone_after_an_error_or_mpiruns_line(self):
        # Over TCP a rank stopped (SIGSTOP) and resumed by mpirun as it stops the job finds its
        # peers gone (ring-p2p -np 2, rank 0 stopped mid-step), and a killed rank's survivors
        # too: Open MPI's TCP frames and notes are noise once the program's line or mpirun's
        # says what happened, and passed on without one
        err = ("starring: error: rank 1: timeout after 2.0 s in ring all-reduce step 0, recv "
               "from rank 0 (tag 65536); rank 0 sent nothing for 2.1 s (...)\n")
        note = ("[vm][[17527,1],0][../../../../../../opal/mca/btl/tcp/btl_tcp_frag.c:135:"
                "mca_btl_tcp_frag_send] mca_btl_tcp_frag_send: writev failed: Connection reset by "
                "peer (104)\n")
        errno_note = ("[vm][[2939,1],2][../../../../../../opal/mca/btl/tcp/btl_tcp_frag.c:128:"
                      "mca_btl_tcp_frag_send] mca_btl_tcp_frag_send: writev error "
                      "(0x556ad1505598, 8)\n\tBad address(3)\n\n")
        hung_up = (DASH + "An MPI communication peer process has unexpectedly disconnected.  This"
                   "\nusually indicates a failure in the peer process (e.g., a crash or\n"
                   "otherwise exiting without calling MPI_FINALIZE first).\n\n  Local host: vm\n"
                   "  Local PID:  16145\n  Peer host:  vm\n" + DASH)
        connect = (DASH + "WARNING: Open MPI failed to TCP connect to a peer MPI process.  This\n"
                   "should not happen.\n\nYour Open MPI job may now hang or fail.\n\n  Local "
                   "host: vm\n  PID:        26340\n  Message:    connect() to 192.0.2.2:1029 "
                   "failed\n  Error:      Operation now in progress (115)\n" + DASH)
        self.assertEqual(filtered(err + ABORT + note + errno_note + hung_up + connect + note),
                         err + "mpirun: job stopped: rank 1 called MPI_Abort (error code 1)\n")
        # the survivors of a killed rank say it before mpirun does: its line says why
        self.assertEqual(filtered(hung_up + note + KILLED), "mpirun: job stopped: rank 1 on node "
                         "vm was killed by signal 9 (Killed)\n")
        # with nothing that says why, they are passed on (at the end; a connect that failed, as
        # it comes: it may be the cause, test_tcp_connect_failures_pass_before_an_error)
        noise = note + errno_note + hung_up
        self.assertEqual(filtered(noise + connect), connect + noise)
        self.assertEqual(filtered(noise + connect, chunk=1), connect + noise)
        self.assertEqual(filtered(hung_up + "a rank's line\n"), "a rank's line\n" + hung_up)

    def test_tcp_connect_failures_pass_before_an_error(self):
        # A connect that fails is the cause on a real cluster (a docker0/virbr0 interface picked,
        # a firewall): the rank that waits then times out. Open MPI 4.1's frame (help-mpi-btl-
        # tcp.txt's client connect fail) and older versions' note pass as they come, and stay
        # when the program's timeout line follows (the frame at the end: until then a kill may
        # explain it)
        connect = (DASH + "WARNING: Open MPI failed to TCP connect to a peer MPI process.  This\n"
                   "should not happen.\n\nYour Open MPI job may now hang or fail.\n\n  Local "
                   "host: vm\n  PID:        26340\n  Message:    connect() to 172.17.0.1:1029 "
                   "failed\n  Error:      No route to host (113)\n" + DASH)
        err = ("starring: error: rank 1: timeout after 2.0 s in ring all-reduce step 0, recv "
               "from rank 0 (tag 65536); rank 0 sent nothing for 2.1 s (...)\n")
        self.assertEqual(filtered(connect + err), err + connect)
        self.assertEqual(filtered(connect + err + NONZERO),
                         err + "mpirun: job stopped: rank 1 exited with code 2\n" + connect)
        # the survivors of a killed rank fail to connect to it before mpirun says it was killed
        # (1 CI run of test_killed_worker_over_tcp, 2026-12-02): the kill says why, dropped
        self.assertEqual(filtered(connect + KILLED), filtered(KILLED))
        self.assertNotIn("TCP connect", filtered(connect + KILLED))
        note = ("[h1][[4242,1],0][../../../../../opal/mca/btl/tcp/btl_tcp_endpoint.c:796:"
                "mca_btl_tcp_endpoint_complete_connect] connect() to 172.17.0.1 failed: No route "
                "to host (113)\n")
        self.assertEqual(filtered(note + err), note + err)
        # passed on as it comes, not at the end: a user watching a hung run sees it
        p = subprocess.Popen([sys.executable, FILTER], stdin=subprocess.PIPE,
                             stderr=subprocess.PIPE)
        p.stdin.write(note.encode())
        p.stdin.flush()
        # stdin still open: a held note would come only once it closes (a bound, not a timing)
        came = select.select([p.stderr], [], [], 30)[0]
        first = os.read(p.stderr.fileno(), 65536) if came else b""
        p.stdin.close()
        with p.stderr:
            rest = p.stderr.read()
        p.wait(timeout=30)
        self.assertEqual(first.decode(), note)
        self.assertEqual(rest, b"")
        # after the program's line they are noise of the job's end, as a peer's hang-up
        self.assertEqual(filtered(err + note + connect), err)

    def test_only_a_tcp_notes_own_continuation_is_taken_with_it(self):
        # a rank's own tab-indented lines after a TCP note are the rank's: passed unchanged
        note = ("[vm][[17527,1],0][../../../../../../opal/mca/btl/tcp/btl_tcp_frag.c:135:"
                "mca_btl_tcp_frag_send] mca_btl_tcp_frag_send: writev failed: Connection reset by "
                "peer (104)\n")
        mine = "\tloss 2.1 at step 5\n\n\tloss 1.9 at step 6\n"
        self.assertEqual(filtered(note + mine), mine + note)
        err = "starring: error: rank 1: timeout after 2.0 s in recv from rank 0 (tag 65536)\n"
        self.assertEqual(filtered(err + note + mine), err + mine)
        # the writev error form's errno line and blank line go with it, and nothing after them
        errno_note = ("[vm][[2939,1],2][../../../../../../opal/mca/btl/tcp/btl_tcp_frag.c:128:"
                      "mca_btl_tcp_frag_send] mca_btl_tcp_frag_send: writev error "
                      "(0x556ad1505598, 8)\n\tBad address(3)\n\n")
        self.assertEqual(filtered(err + errno_note + mine), err + mine)
        self.assertEqual(filtered(err + errno_note + mine, chunk=1), err + mine)
        self.assertEqual(filtered(errno_note + mine), mine + errno_note)

    def test_a_line_that_starts_on_a_progress_bars_line_gets_its_own(self):
        # Rank 0's --progress bar leaves its line open; mpirun relayed the server's error line, a
        # fault's note and its own banner onto it ("... ETA 0:02 starring: error: ..."), and the
        # error line was not taken for one (scripts/mpirun.sh -np 3 ... --backend ps --servers 1
        # --fault hang:1:10 --straggler 0:60 --progress bar: 6 of 6 jobs, 2026-12-02)
        bar = "\r[#####.......................] step 8/40  epoch 1  loss 2.3671  ETA 0:02 "
        note = "[starring] rank 1: --fault hang: going silent at step 10 (unix time 17.0)\n"
        err = "starring: error: server rank 2: timeout after 1.5 s: worker rank 1 sent nothing\n"
        stop = "starring: rank 0: stopped by SIGTERM\n"
        lost = ("[vm:31448] [[5670,0],0] ORTE_ERROR_LOG: Out of resource in file "
                "../../../orte/util/show_help.c at line 501\n")
        abort = "mpirun: job stopped: rank 1 called MPI_Abort (error code 1)\n"
        killed = "mpirun: job stopped: rank 1 on node vm was killed by signal 9 (Killed)\n"
        for chunk in (1, 7, 4096):  # in pieces, or the bar and the next line in one read
            with self.subTest(chunk=chunk):
                self.assertEqual(filtered(bar + note + bar + err + ABORT, chunk),
                                 bar + "\n" + note + bar + "\n" + err + abort)
                # the banner lost: the error line is one, so the stop note after it is dropped
                self.assertEqual(filtered(bar + err + bar + lost + bar + stop, chunk),
                                 bar + "\n" + err + bar + "\n" + bar + "\n")
                self.assertEqual(filtered(bar + KILLED, chunk), bar + "\n" + killed)
        # the newline with which the bar's rank then ends the line (before its own note) is not
        # passed on: the filter ended that line already
        self.assertEqual(filtered(bar + err + "\n" + stop + "x\n", 5), bar + "\n" + err + "x\n"
                         + stop)
        self.assertEqual(filtered(bar + err + bar + "\n", 5), bar + "\n" + err + bar + "\n")
        # the bar's own redraws and its last newline pass as they are
        self.assertEqual(filtered(bar + bar + "\n" + err, 3), bar + bar + "\n" + err)
        # the bar's rank died drawing it and never ended its line: its newline would have come
        # before the program's next line (mpirun's frames and notes aside, as in the recordings
        # below), so a blank line after that line is another's and passes (it was dropped)
        note_of_mpirun = "[vm:31448] a note of mpirun's\n"
        for chunk in (1, 7, 4096):
            with self.subTest(chunk=chunk):
                self.assertEqual(filtered(bar + note + "x\n" + "\n" + "y\n", chunk),
                                 bar + "\n" + note + "x\n" + "\n" + "y\n")
                self.assertEqual(filtered(bar + note + "x" + "\n\n", chunk),
                                 bar + "\n" + note + "x\n" + "\n")
                self.assertEqual(filtered(bar + note_of_mpirun + "x\n" + "\n", chunk),
                                 bar + "\n" + note_of_mpirun + "x\n" + "\n")

    def test_recorded_fault_jobs_name_the_silent_rank_on_a_line_of_its_own(self):
        # Open MPI 4.1's stderr (STARRING_MPI_VERBOSE=1) of real np 3 ps jobs whose worker 1 hung
        # (--fault hang:1:5; one server, co-located; rank 0's --progress bar: hang:1:10,
        # --straggler 0:60), 2026-12-02: with the MPI_Abort banner, without it (its show_help
        # race, 9 of 24 such jobs), twice without it. Whatever mpirun lost, the program's line
        # names worker rank 1 at the start of a line, mpirun's line comes after it or not at all,
        # and nothing of the race, no stop note and no empty line is left.
        folder = os.path.join(HERE, "fixtures", "mpirun_stderr")
        names = sorted(os.listdir(folder))
        self.assertEqual(len(names), 7, names)
        for name in names:
            with open(os.path.join(folder, name), encoding="utf-8", newline="") as fh:
                raw = fh.read()  # a bar's "\r" kept
            for chunk in (4096, 61):
                with self.subTest(name=name, chunk=chunk):
                    out = filtered(raw, chunk)
                    self.assertTrue(out.endswith("\n"), out)
                    lines = out[:-1].split("\n")  # a bar's redraws ("\r") stay on their line
                    errors = [i for i, l in enumerate(lines) if l.startswith("starring: error: ")]
                    self.assertTrue(errors, out)
                    self.assertIn("worker rank 1 (worker 1) sent nothing", lines[errors[0]], out)
                    launcher = [i for i, l in enumerate(lines) if l.startswith("mpirun:")]
                    self.assertLessEqual(len(launcher), 1, out)
                    self.assertTrue(all(i > errors[0] for i in launcher), out)
                    self.assertEqual("banner_lost" in name, not launcher, out)
                    for bad in ("ORTE_ERROR_LOG", "stopped by SIGTERM", "MPI_ABORT", "-" * 74):
                        self.assertNotIn(bad, out)
                    self.assertNotIn("", lines, out)
                    for line in lines:  # a bar's redraws, or one line that starts where it should
                        rest = line.split("\r")[-1]
                        self.assertNotIn("starring: error:", rest[1:], out)
                        self.assertNotIn("[starring]", rest[1:], out)

    def test_everything_else_passes_unchanged(self):
        text = ("\r[####....] step 3/8 loss 2.1\r[########] step 8/8 loss 1.9\n"
                "[starring] rank 1: --fault hang: going silent at step 5\n" + UNKNOWN
                + "------\nno newline at the end")
        self.assertEqual(filtered(text), text)


if __name__ == "__main__":
    unittest.main(verbosity=2)
