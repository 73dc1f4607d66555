// `mpi-nothread`, a reference for `bench --mode overlap` only: osu_iallreduce's own pattern
// behind the GradientSync seam - the last tensor_ready posts one MPI_Iallreduce (in place, sum)
// of the whole buffer and wait_params/flush complete it, with NO communication thread. Open MPI
// moves a non-blocking collective's data only inside MPI calls, so nothing should progress while
// the training thread computes; set beside `mpi` (the same MPI_Iallreduce on BucketSync's
// communication thread) it shows what that thread buys. Not a training backend: it neither
// averages nor applies the optimizer.
#include <mpi.h>

#include <chrono>
#include <thread>

#include "allreduce/private_comm.h"
#include "common/comm_util.h"
#include "common/error.h"
#include "common/kept_memory.h"
#include "common/mpi_comm.h"
#include "experiments/bench_overlap.h"

namespace starring {
namespace {

class NoThreadIallreduce : public GradientSync {
 public:
  NoThreadIallreduce(std::shared_ptr<Comm> world, Seconds timeout)
      : comm_(private_comm(world)),
        mpi_(mpi_comm_of(*comm_, "bench backend 'mpi-nothread' (MPI_Iallreduce)")),
        timeout_(timeout) {}
  ~NoThreadIallreduce() override {
    try {
      complete();
    } catch (...) {
    }
  }

  void start(const ParamLayout& layout, SyncBuffers b, const OptimizerConfig&) override {
    STARRING_CHECK(layout.total() <= static_cast<std::size_t>(INT32_MAX), comm_->where(),
                   ": MPI_Iallreduce of ", layout.total(), " floats exceeds MPI's int count");
    grads_ = b.grads;
    count_ = layout.total();
    tensors_ = layout.num_tensors();
  }
  void begin_step(std::int64_t, float) override { ready_ = 0; }
  void tensor_ready(std::size_t) override {
    if (++ready_ < tensors_) return;
    CHECK_MPI(MPI_Iallreduce(MPI_IN_PLACE, grads_, static_cast<int>(count_), MPI_FLOAT, MPI_SUM,
                             mpi_, &req_));
  }
  void wait_params(std::size_t) override { complete(); }
  void flush() override { complete(); }
  SyncStepStats take_stats() override { return {}; }
  void shutdown() override { complete(); }
  std::string name() const override { return "mpi-nothread"; }

 private:
  // MPI_Wait with a deadline: MPI_Test until done.
  void complete() {
    if (req_ == MPI_REQUEST_NULL) return;
    const auto deadline = std::chrono::steady_clock::now() +
                          std::chrono::duration_cast<std::chrono::steady_clock::duration>(timeout_);
    for (int done = 0;;) {
      CHECK_MPI(MPI_Test(&req_, &done, MPI_STATUS_IGNORE));
      if (done) return;
      if (std::chrono::steady_clock::now() > deadline) {
        // MPI forbids freeing a pending collective: left as it stands, it may still read and
        // write the gradients should a stopped peer go on; their owner keeps them
        // (common/kept_memory.h), as the mpi engine's (allreduce/mpi_allreduce.cc); so is the
        // communicator, which Open MPI goes on progressing it on (common/mpi_comm.h)
        comm_->collective_left_pending();
        note_left_to_mpi(grads_, count_ * sizeof(float));
        throw TimeoutError(timeout_message(*comm_, timeout_, "MPI_Iallreduce (mpi-nothread)"));
      }
      std::this_thread::yield();
    }
  }

  std::shared_ptr<Comm> comm_;
  MPI_Comm mpi_;
  Seconds timeout_;
  MPI_Request req_ = MPI_REQUEST_NULL;
  float* grads_ = nullptr;
  std::size_t count_ = 0, tensors_ = 0, ready_ = 0;
};

}  // namespace

std::unique_ptr<GradientSync> make_nothread_iallreduce(std::shared_ptr<Comm> world,
                                                       Seconds timeout) {
  return std::make_unique<NoThreadIallreduce>(std::move(world), timeout);
}

}  // namespace starring
