// The nccl engine: ncclAllReduce on device buffers, on its own CUDA stream.
//
// Set-up: the engine first makes the Device's GPU current on the constructing thread (the stream
// and the communicator belong to the current GPU). Every rank sends rank 0 the UUID of that GPU;
// two ranks on one GPU (NCCL needs a GPU per rank) are refused with ConfigError on every rank
// at once, naming both ranks and the GPU. Otherwise rank 0 creates the unique id and sends it,
// with a status, to every other rank over the Comm (a failed ncclGetUniqueId is reported on every
// rank instead of leaving the others waiting for the timeout). Every rank then creates its
// communicator in NCCL's non-blocking mode, so that set-up and every collective can be polled
// against the timeout (ncclCommGetAsyncError / cudaStreamQuery) and a silent peer aborts the
// communicator with TimeoutError instead of hanging. force_ring sets NCCL_ALGO=Ring before the
// communicator is created (NCCL reads it only from the environment, at communicator creation).
// Ordering: `in` must be complete when run() is called -- BucketSync and the bench synchronize
// the Device that wrote it -- and run() returns once NCCL's stream has finished, so the compute
// stream can use `out` at once. Averaging: NCCL sums in float32, then the Device scales by 1/N,
// like the host engines. Tear-down: ncclCommFinalize polled up to the timeout, then
// ncclCommDestroy; a communicator that failed or timed out is aborted instead.
#include <cuda_runtime.h>
#include <nccl.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "allreduce/allreducer.h"
#include "allreduce/progress_waiter.h"
#include "common/device.h"
#include "common/error.h"

namespace starring {

namespace {

constexpr int kNcclIdTag = tags::kRingBase + 900000;
constexpr int kGpuIdTag = kNcclIdTag + 1;

// NCCL's name for the code, and its last warning when it left one (the specific reason).
std::string nccl_error_text(ncclResult_t rc, ncclComm_t comm) {
  std::string text = ncclGetErrorString(rc);
  const char* last = ncclGetLastError(comm);
  if (last && *last) text += std::string(" (") + last + ")";
  return text;
}
void check_nccl(ncclResult_t rc, const char* call, const Comm& comm) {
  if (rc == ncclSuccess || rc == ncclInProgress) return;
  throw Error(comm.where() + ": " + call + " failed: " + nccl_error_text(rc, nullptr));
}
void check_cuda(cudaError_t rc, const char* call, const Comm& comm) {
  if (rc == cudaSuccess) return;
  throw Error(comm.where() + ": " + call + " failed: " + cudaGetErrorName(rc) + ": " +
              cudaGetErrorString(rc));
}
#define CHECK_NCCL(call) check_nccl((call), #call, *comm_)
#define CHECK_CUDA(call) check_cuda((call), #call, *comm_)

// Which GPU a rank drives: sent to rank 0 to find two ranks on one GPU. Two ranks share a GPU
// when host, PCI address and UUID all match (the UUID alone could read as zeros in a VM).
struct GpuId {
  unsigned char uuid[16];
  int ordinal;
  char host[64];
  char pci[32];
  bool same_gpu(const GpuId& o) const {
    return std::memcmp(uuid, o.uuid, sizeof uuid) == 0 && std::strcmp(host, o.host) == 0 &&
           std::strcmp(pci, o.pci) == 0;
  }
};
// Rank 0's answer: status 0 = go (id valid), 1 = configuration refused, 2 = NCCL failed.
struct IdMessage {
  int status;
  char text[400];
  ncclUniqueId id;
};

std::string uuid_text(const unsigned char* u) {
  char buf[48];
  std::snprintf(buf, sizeof buf,
                "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", u[0],
                u[1], u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12], u[13],
                u[14], u[15]);
  return buf;
}

void set_text(IdMessage& m, const std::string& s) {
  std::snprintf(m.text, sizeof m.text, "%s", s.c_str());
}

class NcclAllreducer : public Allreducer {
 public:
  NcclAllreducer(std::shared_ptr<Comm> comm, Device* device, bool force_ring, Seconds timeout)
      : comm_(std::move(comm)), device_(device), timeout_(timeout) {
    if (!device_ || !device_->is_gpu())
      throw ConfigError(comm_->where() +
                        ": backend 'nccl' needs a GPU device (--device cuda), got " +
                        (device_ ? device_->name() : std::string("none")));
    try {
      setup(force_ring);
    } catch (...) {
      release(/*abort=*/true);  // the destructor does not run for a throwing constructor
      throw;
    }
  }

  ~NcclAllreducer() override { release(failed_); }

  std::string name() const override { return "nccl"; }
  bool on_device() const override { return true; }

  void run(const float* in, float* out, std::size_t count, float scale) override {
    if (count == 0) return;
    guard([&] {
      CHECK_NCCL(ncclAllReduce(in, out, count, ncclFloat, ncclSum, nccl_, stream_));
      wait_ready("ncclAllReduce");
      // Yield, never sleep, as for MPI_Iallreduce: a sleep of up to 500 us would be added to
      // every all-reduce longer than 2 ms (not measured: one GPU runs NCCL on one rank only).
      ProgressWaiter waiter(*comm_, timeout_, std::chrono::microseconds(0), /*max_sleep_us=*/0);
      for (;;) {
        cudaError_t q = cudaStreamQuery(stream_);
        if (q == cudaSuccess) break;
        if (q != cudaErrorNotReady) CHECK_CUDA(q);
        poll_async("ncclAllReduce");
        waiter.idle([&] { return "ncclAllReduce of " + std::to_string(count) + " floats"; });
      }
    });
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
  void setup(bool force_ring) {
    // CudaDevice::synchronize makes its GPU current on this thread (device.h): the stream and
    // the communicator below are created on that GPU, not on whichever one this thread had.
    device_->synchronize();
    CHECK_CUDA(cudaGetDevice(&ordinal_));
    IdMessage msg = exchange_id();
    if (msg.status == 1) throw ConfigError(comm_->where() + ": " + msg.text);
    if (msg.status != 0) throw Error(comm_->where() + ": " + msg.text);
    if (force_ring) setenv("NCCL_ALGO", "Ring", 1);
    CHECK_CUDA(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    ncclResult_t rc = ncclCommInitRankConfig(&nccl_, comm_->size(), msg.id, comm_->rank(), &config);
    CHECK_NCCL(rc);
    guard([&] { wait_ready("ncclCommInitRank"); });
  }

  // Gathers every rank's GPU on rank 0, which checks them and answers with the unique id (or
  // why there is none); every rank returns the same status.
  IdMessage exchange_id() {
    cudaDeviceProp prop{};
    CHECK_CUDA(cudaGetDeviceProperties(&prop, ordinal_));
    GpuId mine{};
    std::memcpy(mine.uuid, prop.uuid.bytes, sizeof mine.uuid);
    mine.ordinal = ordinal_;
    gethostname(mine.host, sizeof mine.host - 1);
    CHECK_CUDA(cudaDeviceGetPCIBusId(mine.pci, sizeof mine.pci - 1, ordinal_));
    IdMessage msg{};
    if (comm_->rank() != 0) {
      comm_->send(&mine, sizeof mine, 0, kGpuIdTag, timeout_);
      comm_->recv(&msg, sizeof msg, 0, kNcclIdTag, timeout_);
      return msg;
    }
    std::vector<GpuId> all(comm_->size());
    all[0] = mine;
    for (int r = 1; r < comm_->size(); ++r)
      comm_->recv(&all[r], sizeof(GpuId), r, kGpuIdTag, timeout_);
    for (int a = 0; a < comm_->size() && msg.status == 0; ++a)
      for (int b = a + 1; b < comm_->size() && msg.status == 0; ++b)
        if (all[a].same_gpu(all[b])) {
          msg.status = 1;
          set_text(msg, "backend 'nccl' needs one GPU per rank, but ranks " + std::to_string(a) +
                            " and " + std::to_string(b) +
                            " both use cuda:" + std::to_string(all[a].ordinal) + " on host " +
                            all[a].host + " (" + all[a].pci + ", " + uuid_text(all[a].uuid) +
                            "): start at most as many ranks per node as it has GPUs");
        }
    if (msg.status == 0) {
      ncclResult_t rc = ncclGetUniqueId(&msg.id);
      if (rc != ncclSuccess) {
        msg.status = 2;
        set_text(msg, std::string("ncclGetUniqueId on rank 0 failed: ") + ncclGetErrorString(rc));
      }
    }
    for (int r = 1; r < comm_->size(); ++r) comm_->send(&msg, sizeof msg, r, kNcclIdTag, timeout_);
    return msg;
  }

  // Polls until the non-blocking communicator has finished the last call.
  void wait_ready(const char* what) {
    ProgressWaiter waiter(*comm_, timeout_);
    for (;;) {
      ncclResult_t st = poll_async(what);
      if (st != ncclInProgress) return;
      waiter.idle([&] { return std::string(what); });
    }
  }
  ncclResult_t poll_async(const char* what) {
    ncclResult_t st = ncclSuccess;
    CHECK_NCCL(ncclCommGetAsyncError(nccl_, &st));
    if (st != ncclSuccess && st != ncclInProgress)
      throw Error(comm_->where() + ": " + what + " failed: " + nccl_error_text(st, nccl_));
    return st;
  }
  // Marks the communicator for abort when `f` throws (an NCCL or CUDA error, a timeout), so the
  // destructor does not wait for peers that will never answer.
  template <typename F>
  void guard(F&& f) {
    try {
      f();
    } catch (...) {
      failed_ = true;
      throw;
    }
  }

  // Never throws (destructor and constructor clean-up). A healthy communicator is finalized
  // (which waits for the peers to finalize too) for at most the timeout, then destroyed; one
  // that failed, or whose finalize does not complete in time, is aborted.
  void release(bool abort) {
    if (nccl_) {
      if (!abort && !finalize()) abort = true;
      abort ? ncclCommAbort(nccl_) : ncclCommDestroy(nccl_);
      nccl_ = nullptr;
    }
    if (stream_) cudaStreamDestroy(stream_);
    stream_ = nullptr;
  }
  bool finalize() {
    ncclResult_t rc = ncclCommFinalize(nccl_);
    if (rc != ncclSuccess && rc != ncclInProgress) return false;
    const auto deadline = std::chrono::steady_clock::now() + timeout_;
    for (;;) {
      ncclResult_t st = ncclSuccess;
      if (ncclCommGetAsyncError(nccl_, &st) != ncclSuccess) return false;
      if (st == ncclSuccess) return true;
      if (st != ncclInProgress || std::chrono::steady_clock::now() > deadline) return false;
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  }

  std::shared_ptr<Comm> comm_;
  Device* device_;
  Seconds timeout_;
  int ordinal_ = -1;
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
