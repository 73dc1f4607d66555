// MpiComm: Comm over a private duplicate of an MPI communicator (so StarRing's messages never
// match anyone else's). Requires MPI_THREAD_MULTIPLE: a backend's communication thread and the
// trainer thread call MPI concurrently. Waits poll MPI_Test (which also drives Open MPI's
// progress engine) with a short back-off until the deadline, then throw TimeoutError.
#pragma once
#include <mpi.h>

#include <atomic>
#include <memory>

#include "common/comm.h"

namespace starring {

// Throws starring::Error with the MPI error string and the call that failed.
void check_mpi(int rc, const char* call, const char* file, int line);
#define CHECK_MPI(call) ::starring::check_mpi((call), #call, __FILE__, __LINE__)

class MpiComm : public Comm {
 public:
  // Duplicates `parent` (MPI_Comm_dup). Throws if MPI provides a thread level below
  // `thread_level` or if MPI_TAG_UB is below tags::kMaxTag. The default, MPI_THREAD_MULTIPLE,
  // is what every backend with a communication thread needs; a single-threaded program (the
  // SimGrid/SMPI bench, smpi/smpi_bench.cc: SMPI provides MPI_THREAD_SINGLE) may ask for less.
  explicit MpiComm(MPI_Comm parent, int thread_level = MPI_THREAD_MULTIPLE);
  ~MpiComm() override;
  MpiComm(const MpiComm&) = delete;
  MpiComm& operator=(const MpiComm&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  int node_rank() const override { return node_rank_; }
  std::unique_ptr<Request> isend(const void* buf, std::size_t bytes, int peer, int tag) override;
  std::unique_ptr<Request> irecv(void* buf, std::size_t bytes, int peer, int tag) override;
  void barrier(Seconds timeout) override;

  // The duplicated communicator, for baselines that call MPI collectives directly.
  MPI_Comm mpi_comm() const { return comm_; }
  // A collective on the communicator was left pending (a timeout: MPI can neither cancel nor
  // free one): the destructor then leaves the communicator allocated, since Open MPI goes on
  // progressing the collective in later MPI calls and crashed on a freed one.
  void collective_left_pending() noexcept override { collective_left_ = true; }

 private:
  friend class MpiRequest;
  void on_recv_done(std::size_t bytes) { count_recv(bytes); }
  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0, size_ = 1, node_rank_ = 0;
  std::atomic<bool> collective_left_{false};
};

// The ranks of `comm` on this rank's host, ordered by `key` (collective over `comm`; the caller
// frees it): MPI_Comm_split_type(MPI_COMM_TYPE_SHARED), divided by test host under the test hook
// STARRING_TEST_HOSTS (common/test_hosts.h). Decisions made by host use this one.
MPI_Comm host_comm(MPI_Comm comm, int key);

// The MPI communicator under `comm` when it is an MpiComm; otherwise throws an Error naming
// `what` (e.g. "backend 'mpi'") and saying it needs an MPI communicator.
MPI_Comm mpi_comm_of(const Comm& comm, const char* what);

}  // namespace starring
