#!/usr/bin/env python3
"""A rank stopped (SIGSTOP: alive, silent, STARRING_TEST_STOP in common/fault.h) where no --fault
step reaches: set-up, data loading, the end of the run, its exit. Each ended the job only by
mpirun's own wait (forever), or after 120 s: every other rank now leaves within --timeout plus
the census and agreement, naming the stopped rank where it can, and mpirun ends the stopped
one too (ranks_in in run_case).
  test_cli_stopped.py --bin build/bin/starring
The checks every case shares, and why some cases run at once: cli_case.py.
"""
import sys

import bin_main
import cli_case
from cli_case import TINY, CliCase


class LooselyBounded(CliCase):
    """Waits of --timeout + 10 s and the like, each bounded by 30-40 s or by 8 s over
    its wait and start-up: all nine at once (each job only waits: 24 s with six at once, two
    rounds of the 11 s waits, at load 11)."""
    overlap = 9

    def test_rank_stopped_in_the_mpi_bench_row(self):
        # bench's mpi rows call the blocking MPI_Allreduce (as nccl-tests does): it waited for the
        # stopped rank for good; now each iteration must complete within --timeout + 10 s
        self.run_case(2, ["bench", "--backends", "mpi", "-b", "1K", "-e", "1K", "-n", "5",
                          "--timeout", "1"], 1,
                      ["did not complete within 11 s", "bench: an iteration of mpi at 1024 B",
                       "blocking MPI_Allreduce"], rank=0, bound=40, stop_at="bench-loop:1")

    def test_rank_stopped_before_the_jobs_communicators(self):
        # MPI_Comm_dup and the other set-up collectives waited for it without a limit; now
        # --timeout + 10 s (common/stall_watch.h), no rank named: the collective does not say
        self.run_case(2, ["train", "--backend", "ring", "--timeout", "1"] + TINY, 1,
                      ["did not complete within 11 s", "MPI_Comm_dup",
                       "another rank is stopped or stuck before it"], rank=0, bound=40,
                      stop_at="comm-setup:1")

    def test_ring_rank_stopped_before_the_backends_communicators(self):
        # The ring's MPI_Comm_create_group / shared-memory window waited for it without a limit
        self.run_case(2, ["train", "--backend", "ring", "--timeout", "1"] + TINY, 1,
                      ["did not complete within 11 s", "another rank is stopped or stuck"],
                      rank=0, bound=40, stop_at="backend-setup:1")

    def test_rank_0_stopped_after_the_others_figures_came(self):
        # Ranks 1 and 2 had sent rank 0 their figures (or the sends had left eagerly: rank 0
        # stopped at sync-end did it about 1 run in 10) and waited for the outcome's agreement
        # without a limit: the job never ended. Now 2 x --timeout + 10 s, rank 0 named. Rank 1's
        # wait starts when it has finished, a little before rank 0 announces its stop (after
        # writing the summary): 11.94 s after the announcement at load 13, so 1 s less at least.
        timeout = 1
        self.run_case(3, ["train", "--backend", "ring-p2p", "--timeout", str(timeout)] + TINY,
                      1, ["rank 0 did not finish within 12 s"], rank=1, stop_at="summary:0",
                      finished=True, after_fault=(2 * timeout + 10 - 1, 2 * timeout + 10 + 8))

    def test_rank_0_stopped_after_the_bench_table(self):
        # bench and env waited for the outcome's agreement without a limit (only train bounded
        # it): rank 0 stopped once its table was out held rank 1 there for good. Now as train's,
        # 2 x --timeout + 10 s, rank 0 named
        self.run_case(2, ["bench", "--backends", "ring", "-b", "1K", "-e", "1K", "-n", "2",
                          "-w", "1", "--timeout", "0.5"], 1,
                      ["rank 0 did not finish within 11 s", "finished starring bench",
                       "agree on the job's outcome"], rank=1, bound=40,
                      stop_at="command-end:0")

    def test_rank_0_stopped_after_the_env_report(self):
        self.run_case(2, ["env", "--timeout", "0.5"], 1,
                      ["rank 0 did not finish within 11 s", "finished starring env"], rank=1,
                      bound=40, stop_at="command-end:0")

    def test_rank_stopped_before_the_options_are_agreed(self):
        # The agreement on every rank's checks (MPI_Allreduce) waited for it without a limit
        # (as for rank 0 stopped reading a --resume checkpoint): --timeout + 10 s, rank named
        self.run_case(2, ["train", "--backend", "ring", "--timeout", "1"] + TINY, 1,
                      ["timeout after 11 s", "rank 1 did not get there"], rank=0, bound=40,
                      stop_at="setup:1")

    def test_rank_stopped_before_mpi_init(self):
        # MPI_Init waits for every rank without a limit: bounded by --timeout + 10 s
        self.run_case(2, ["train", "--backend", "ring", "--timeout", "1"] + TINY, 1,
                      ["MPI_Init did not complete within 11 s"], rank=0, bound=40,
                      stop_at="init:1")

    def test_ring_rank_stopped_after_its_last_step(self):
        # The shared-memory ring's end-of-run vote waited a fixed 120 s for it
        self.run_case(2, ["train", "--backend", "ring", "--timeout", "2"] + TINY, 1,
                      ["timeout after 2", "finish with it at the end of the run",
                       "rank 1 did not time out"], rank=0, bound=40, stop_at="sync-end:1",
                      trained=True)  # its metrics were whole before: training had ended

    def test_ring_rank_stopped_after_its_last_step_on_two_hosts(self):
        # Across hosts (as on a cluster) the ring runs over MPI messages, with no end-of-run
        # vote: rank 0 waited for the stopped rank's totals and said only "timeout after 2 s in
        # recv from rank 1 (tag 102)"
        self.run_case(2, ["train", "--backend", "ring", "--timeout", "2"] + TINY, 1,
                      ["timeout after 2", "rank 1 did not send its totals for the run summary"],
                      rank=0, bound=40, stop_at="sync-end:1", trained=True, hosts="0,1")

    def test_rank_stopped_at_its_exit(self):
        # After the outcome was agreed, MPI_Finalize waited for it without a limit; the run's
        # outputs are whole (the summary was written before)
        self.run_case(2, ["train", "--backend", "ring", "--timeout", "2"] + TINY, 1,
                      ["rank 1 did not reach its exit within --timeout (2 s)"], rank=0,
                      bound=30, stop_at="exit:1", finished=True)


class TimedFromTheStop(CliCase):
    """Each ends within 5-7 s of the stop plus the job's start-up (run_case's
    after_fault): their waits overlap, beside no other class's cases (bin_main's `apart`), but
    each starts once the one before has reached its stop (the start-up, the control, as long as
    alone: `staggered`). One at a time: 43 s at load 11."""
    overlap = 5
    apart = True
    staggered = True

    def test_rank_stopped_before_it_loaded_its_data(self):
        # The others wait for every rank's data --timeout plus an allowance by the data's size
        # (experiments/train_run.h); it was a fixed 60 s, too long for a test (66.5 s after the
        # stop). Now 2 + 5 s for TINY, then the census (1.5 s) and the failing rank's 3 s at the
        # outcome's agreement: 11.5 s after the stop
        timeout = 2
        self.run_case(2, ["train", "--backend", "ring", "--timeout", str(timeout)] + TINY, 1,
                      ["while every rank loaded its data (allowed: --timeout + 5 s",
                       "rank 1 did not get here"], rank=0, stop_at="load:1",
                      after_fault=(timeout + 5, timeout + 5 + 7))

    def test_ps_server_stopped_before_its_goodbye(self):
        # The workers' wait for the goodbye named no server and took 2 x (--timeout + grace):
        # 4 + 2 + 3 s after the stop at --timeout 2 (agreement's 3 s included), now 2 + 1 + 3
        timeout = 2
        self.run_case(3, ["train", "--backend", "ps", "--servers", "1", "--timeout",
                          str(timeout)] + TINY, 1,
                      ["the servers' goodbye", "no goodbye from server rank 2"],
                      stop_at="server-end:2", trained=True, after_fault=(timeout, timeout + 5))

    def test_ps_server_stopped_before_its_start_acknowledgement(self):
        # The workers' wait for the servers' start acknowledgements named no server and took
        # 2 x (--timeout + grace), where every other wait takes --timeout (+ grace): 4 + 2 + 3 s
        # after the stop at --timeout 2 (agreement's 3 s included), now 2 + 1 + 3
        timeout = 2
        self.run_case(3, ["train", "--backend", "ps", "--servers", "1", "--timeout",
                          str(timeout)] + TINY, 1,
                      ["the servers' start acknowledgements",
                       "no start acknowledgement from server rank 2"],
                      # 6 s and mpirun's teardown, 8.0 s at load 5 (its start-up, the control,
                      # is 0.1 s: the stop comes before the first step); the old wait took 9 + 1
                      stop_at="server-start:2", after_fault=(timeout, timeout + 6.5))

    def test_colocated_worker_0_stopped_writing_a_checkpoint(self):
        # Worker 1 times out in the checkpoint's agreement; its failure path then waited for the
        # servers' goodbye (2 x --timeout + grace) that its own shard, waiting for worker 0, could
        # not give: 3 + 9 + 3 s after the stop, now 3 + 3.
        timeout = 3
        self.run_case(2, ["train", "--backend", "ps", "--servers", "colocated", "--timeout",
                          str(timeout), "--checkpoint-dir", "ck"] + TINY, 1, ["rank 0"],
                      rank=1, stop_at="checkpoint-write:0", after_fault=(timeout, timeout + 6))

    def test_colocated_worker_stopped_after_its_last_step(self):
        # Every other rank's shard waits for its goodbye and names it after --timeout ("worker
        # rank 2 ... sent nothing"), but the workers waited for the shards' goodbyes until
        # --timeout + grace and then named every server rank instead, the stopped one among them.
        # Mixed test hosts (ranks 0 and 1 share one): shared memory and messages between shards.
        timeout = 2
        self.run_case(3, ["train", "--backend", "ps", "--servers", "colocated", "--timeout",
                          str(timeout)] + TINY, 1, ["worker rank 2", "sent nothing"],
                      stop_at="sync-end:2", trained=True, after_fault=(timeout, timeout + 6),
                      hosts="0,0,1")  # + 6: at load 7 it took 7.3-8.0 s against 7.3 s allowed


if __name__ == "__main__":
    bin_main.main(sys.modules[__name__], shared=[cli_case])
