// The vendor baseline: Open MPI's all-reduce on the MpiComm's (duplicated) communicator.
// Blocking mode calls MPI_Allreduce exactly as an application would (the bench baseline);
// non-blocking mode uses MPI_Iallreduce and polls MPI_Test so a silent peer raises
// TimeoutError instead of hanging (the trainer backend).
#include <mpi.h>

#include "allreduce/allreducer.h"
#include "allreduce/progress_waiter.h"
#include "common/kept_memory.h"
#include "common/mpi_comm.h"

namespace starring {

namespace {

class MpiAllreducer : public Allreducer {
 public:
  MpiAllreducer(std::shared_ptr<Comm> comm, MpiMode mode, Seconds timeout)
      : comm_(std::move(comm)),
        mpi_(mpi_comm_of(*comm_, "backend 'mpi' (MPI_Allreduce)")),
        mode_(mode),
        timeout_(timeout) {}
  std::string name() const override { return "mpi"; }

  void run(const float* in, float* out, std::size_t count, float scale) override {
    if (count == 0) return;
    STARRING_CHECK(count <= static_cast<std::size_t>(INT32_MAX), comm_->where(),
                   ": MPI_Allreduce of ", count, " floats exceeds MPI's int count");
    const void* src = in == out ? MPI_IN_PLACE : in;
    const int n = static_cast<int>(count);
    if (mode_ == MpiMode::kBlocking) {
      CHECK_MPI(MPI_Allreduce(src, out, n, MPI_FLOAT, MPI_SUM, mpi_));
    } else {
      MPI_Request req;
      CHECK_MPI(MPI_Iallreduce(src, out, n, MPI_FLOAT, MPI_SUM, mpi_, &req));
      // Yield between tests, never sleep: Open MPI advances an MPI_Iallreduce one round at a
      // time, and only inside MPI_Test, while the request shows no progress until the end; the
      // waiter's back-off sleeps (up to 500 us) stalled every round. Wide MLP, 2 ranks on 2
      // cores: communication per step 141 ms with sleeps, 58 ms yielding; 4 ranks (two per
      // core) 511 -> 981 samples/s.
      ProgressWaiter waiter(*comm_, timeout_, std::chrono::microseconds(0), /*max_sleep_us=*/0,
                            liveness_);
      try {
        for (;;) {
          int done = 0;
          CHECK_MPI(MPI_Test(&req, &done, MPI_STATUS_IGNORE));
          if (done) break;
          waiter.idle([&] { return "MPI_Iallreduce of " + std::to_string(count) + " floats"; });
        }
      } catch (...) {
        // MPI forbids freeing a pending collective: it is left as it stands (its communicator
        // too), and may still read `in` and write `out` should a stopped peer go on; their
        // owners keep them (common/kept_memory.h).
        comm_->collective_left_pending();
        note_left_to_mpi(out, count * sizeof(float));
        if (in != out) note_left_to_mpi(in, count * sizeof(float));
        throw;
      }
    }
    if (scale != 1.0f)
      for (std::size_t i = 0; i < count; ++i) out[i] *= scale;
  }

  std::uint64_t wire_bytes(std::size_t count) const override {
    return reference_wire_bytes(comm_->size(), count);
  }
  bool can_watch_peers() const override { return mode_ == MpiMode::kNonBlocking; }
  void watch_peers(PeerLiveness* liveness) override { liveness_ = liveness; }

 private:
  std::shared_ptr<Comm> comm_;
  MPI_Comm mpi_;
  MpiMode mode_;
  Seconds timeout_;
  PeerLiveness* liveness_ = nullptr;
};

}  // namespace

std::unique_ptr<Allreducer> make_mpi_allreducer(std::shared_ptr<Comm> comm, MpiMode mode,
                                                Seconds timeout) {
  return std::make_unique<MpiAllreducer>(std::move(comm), mode, timeout);
}

}  // namespace starring
