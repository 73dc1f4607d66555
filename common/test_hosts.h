// A test hook, no option, off by default: STARRING_TEST_HOSTS makes the ranks of a job on one
// machine believe they run on several hosts, so that the multi-host and mixed paths of a cluster
// (some ranks share a host, others do not) run where everything is one host.
//
// With STARRING_TEST_HOSTS=H0,H1,...  (one non-negative integer per world rank, e.g. 0,0,1,1),
// world rank r takes itself for a rank of test host H_r. Every decision StarRing makes by host
// goes through one of two functions, and both honour it:
//   - this_host_name() (common/gpu_assignment.h) returns "<real name>~test-host-H_r": the parameter
//     server's shared-memory segments (ps/shared_segment.cc, which a peer maps only from the same
//     host), the host fields of the run summary and its time-sharing note, `starring env`;
//   - host_comm() (common/mpi_comm.h) splits the ranks of a real host by H: MpiComm::node_rank
//     (the GPU a rank computes on) and the ring's shared-memory window (allreduce/shm_ring.cc,
//     only when every rank is on one host).
// Not the ranks a Ctrl-C waits for (experiments/interrupt_wait.h): those are the ranks one mpirun
// daemon stops together, which are a real host's whatever the test hosts say.
// The test hosts divide real hosts, never join them: ranks on two real hosts stay apart whatever
// H says. What they cannot divide is hardware: ranks of two test hosts on one machine may pick
// the same GPU, which the nccl backend's one-GPU-per-rank check (keyed by host) then takes for
// two GPUs, and the summary's time-sharing note counts each test host's ranks against CPUs the
// others use too (4 ranks on 2 CPUs as 0,0,1,1: "oversubscribed": false).
// Every rank of the job must see the same value (mpirun passes its environment to the ranks it
// starts on its own host; on others, -x STARRING_TEST_HOSTS), or the ranks disagree on collective
// splits. The variable is read at each call (tests may set it between cases).
#pragma once

namespace starring {

// H_r for this process's MPI_COMM_WORLD rank r, or -1 when STARRING_TEST_HOSTS is unset or
// empty, or MPI is not running. Throws ConfigError naming the variable when it is not one
// non-negative integer per world rank (parse_int_list, common/config_detail.h: as --hidden).
int test_host_index();

}  // namespace starring
