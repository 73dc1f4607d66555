// The nccl engine: ncclAllReduce on device buffers, on its own CUDA stream.
//
// Set-up: rank 0 creates the unique id and sends it to every other rank over the Comm; every
// rank then creates its communicator in NCCL's non-blocking mode, so that set-up and every
// collective can be polled against the timeout (ncclCommGetAsyncError / cudaStreamQuery) and a
// silent peer aborts the communicator with TimeoutError instead of hanging. force_ring sets
// NCCL_ALGO=Ring before the communicator is created (NCCL reads it only from the environment).
// Averaging: NCCL sums in float32, then the Device scales by 1/N, like the host engines.
#include <cuda_runtime.h>
#include <nccl.h>

#include <cstdlib>

#include "allreduce/allreducer.h"
#include "allreduce/progress_waiter.h"
#include "common/device.h"
#include "common/error.h"

namespace starring {

namespace {

constexpr int kNcclIdTag = tags::kRingBase + 900000;

void check_nccl(ncclResult_t rc, const char* call, const Comm& comm) {
  if (rc == ncclSuccess || rc == ncclInProgress) return;
  throw Error(comm.where() + ": " + call + " failed: " + ncclGetErrorString(rc));
}
void check_cuda(cudaError_t rc, const char* call, const Comm& comm) {
  if (rc == cudaSuccess) return;
  throw Error(comm.where() + ": " + call + " failed: " + cudaGetErrorString(rc));
}
#define CHECK_NCCL(call) check_nccl((call), #call, *comm_)
#define CHECK_CUDA(call) check_cuda((call), #call, *comm_)

class NcclAllreducer : public Allreducer {
 public:
  NcclAllreducer(std::shared_ptr<Comm> comm, Device* device, bool force_ring, Seconds timeout)
      : comm_(std::move(comm)), device_(device), timeout_(timeout) {
    if (!device_ || !device_->is_gpu())
      throw ConfigError(comm_->where() +
                        ": backend 'nccl' needs a GPU device (--device cuda), got " +
                        (device_ ? device_->name() : std::string("none")));
    if (force_ring) setenv("NCCL_ALGO", "Ring", 1);
    ncclUniqueId id;
    if (comm_->rank() == 0) {
      CHECK_NCCL(ncclGetUniqueId(&id));
      for (int r = 1; r < comm_->size(); ++r) comm_->send(&id, sizeof id, r, kNcclIdTag, timeout_);
    } else {
      comm_->recv(&id, sizeof id, 0, kNcclIdTag, timeout_);
    }
    CHECK_CUDA(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    CHECK_NCCL(ncclCommInitRankConfig(&nccl_, comm_->size(), id, comm_->rank(), &config));
    wait_ready("ncclCommInitRank");
  }

  ~NcclAllreducer() override {
    if (nccl_) failed_ ? ncclCommAbort(nccl_) : ncclCommDestroy(nccl_);
    if (stream_) cudaStreamDestroy(stream_);
  }

  std::string name() const override { return "nccl"; }
  bool on_device() const override { return true; }

  void run(const float* in, float* out, std::size_t count, float scale) override {
    if (count == 0) return;
    CHECK_NCCL(ncclAllReduce(in, out, count, ncclFloat, ncclSum, nccl_, stream_));
    wait_ready("ncclAllReduce");
    ProgressWaiter waiter(*comm_, timeout_);
    for (;;) {
      cudaError_t q = cudaStreamQuery(stream_);
      if (q == cudaSuccess) break;
      if (q != cudaErrorNotReady) CHECK_CUDA(q);
      poll_async("ncclAllReduce");
      guard([&] {
        waiter.idle([&] { return "ncclAllReduce of " + std::to_string(count) + " floats"; });
      });
    }
    if (scale != 1.0f) {
      device_->scale(out, scale, count);
      device_->synchronize();
    }
  }

  std::uint64_t wire_bytes(std::size_t count) const override {
    const std::uint64_t n = comm_->size();
    return n <= 1 ? 0 : 2 * (n - 1) * count * 4 / n;
  }

 private:
  // Polls until the non-blocking communicator has finished the last call.
  void wait_ready(const char* what) {
    ProgressWaiter waiter(*comm_, timeout_);
    for (;;) {
      ncclResult_t st = poll_async(what);
      if (st != ncclInProgress) return;
      guard([&] { waiter.idle([&] { return std::string(what); }); });
    }
  }
  ncclResult_t poll_async(const char* what) {
    ncclResult_t st = ncclSuccess;
    CHECK_NCCL(ncclCommGetAsyncError(nccl_, &st));
    if (st != ncclSuccess && st != ncclInProgress) {
      failed_ = true;
      throw Error(comm_->where() + ": " + what + " failed: " + ncclGetErrorString(st));
    }
    return st;
  }
  // Marks the communicator for abort when `f` throws (a timeout), so the destructor does not
  // wait for peers that will never answer.
  template <typename F>
  void guard(F&& f) {
    try {
      f();
    } catch (...) {
      failed_ = true;
      throw;
    }
  }

  std::shared_ptr<Comm> comm_;
  Device* device_;
  Seconds timeout_;
  cudaStream_t stream_ = nullptr;
  ncclComm_t nccl_ = nullptr;
  bool failed_ = false;
};

}  // namespace

std::unique_ptr<Allreducer> make_nccl_allreducer(std::shared_ptr<Comm> comm, Device* device,
                                                 bool force_ring, Seconds timeout) {
  return std::make_unique<NcclAllreducer>(std::move(comm), device, force_ring, timeout);
}

}  // namespace starring
