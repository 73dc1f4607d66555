// The nccl engine: ncclAllReduce on device buffers, on its own CUDA stream.
//
// Set-up: the engine first makes the Device's GPU current on the constructing thread (the stream
// and the communicator belong to the current GPU). Every rank sends rank 0 which GPU it drives
// (host, PCI address, UUID; common/gpu_assignment.h) or that it has none; a rank without a GPU
// (a CPU Device: --device cpu, or a GPU that could not be used) and two ranks on one GPU (NCCL
// needs a GPU per rank) are refused with ConfigError on every rank at once, naming the ranks and
// the GPU, instead of one rank failing while the others wait out the timeout. Otherwise rank 0
// creates the unique id and sends it, with a status, to every other rank over the Comm (a failed
// ncclGetUniqueId is reported on every rank too). Every rank then creates its communicator in
// NCCL's non-blocking mode, so that set-up and every collective can be polled against the
// timeout (ncclCommGetAsyncError / cudaStreamQuery) and a silent peer aborts the communicator
// with TimeoutError instead of hanging. The set-up's wait is the longer of the timeout and 120 s
// (NCCL's set-up takes seconds on a node of many GPUs; every rank was alive just before it). A
// collective's waits, for the call to be ready (the first one connects to the peers under NCCL's
// lazy connection) and for the stream, ask the trainer's PeerWatch past the timeout. force_ring
// sets NCCL_ALGO=Ring while the communicator is created (NCCL reads it only from the environment,
// during initialisation, which runs on NCCL's own thread in non-blocking mode) and puts back the
// previous value once it is ready, so later communicators of the process get the user's setting.
// Threads: run() is called on BucketSync's communication thread, whose current GPU is CUDA's
// default, device 0: it makes the engine's GPU current first (else the stream queries would
// make a context on GPU 0 for every rank of the node).
// Ordering: `in` must be complete when run() is called -- BucketSync and the bench synchronize
// the Device that wrote it -- and run() returns once NCCL's stream has finished, so the compute
// stream can use `out` at once. Averaging: NCCL sums in float32, then the Device scales by 1/N,
// like the host engines. Tear-down: ncclCommFinalize polled up to the timeout, then
// ncclCommDestroy; a communicator that failed or timed out is aborted at once (guard()), so
// that no NCCL kernel is left waiting on the GPU for a peer that is gone.
#include <cuda_runtime.h>
#include <nccl.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <optional>
#include <thread>
#include <vector>

#include "allreduce/allreducer.h"
#include "allreduce/progress_waiter.h"
#include "common/comm_util.h"
#include "common/device.h"
#include "common/error.h"
#include "common/gpu_assignment.h"
#include "common/scoped_env.h"

namespace starring {

namespace {

constexpr int kNcclIdTag = tags::kRingBase + 900000;
constexpr int kGpuIdTag = kNcclIdTag + 1;
// The least time ncclCommInitRank may take (the wait is the longer of this and --timeout).
constexpr double kInitWaitFloorS = 120.0;

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

// A GpuSlot on the wire (fixed size: every rank runs the same binary).
struct SlotMessage {
  int ordinal;
  int visible;
  char host[64];
  char pci[32];
  char uuid[48];
  char note[160];
};
// Rank 0's answer: status 0 = go (id valid), 1 = configuration refused, 2 = NCCL failed.
struct IdMessage {
  int status;
  char text[480];
  ncclUniqueId id;
};

template <std::size_t N>
void put(char (&dst)[N], const std::string& src) {
  std::snprintf(dst, N, "%s", src.c_str());
}
SlotMessage to_message(const GpuSlot& s) {
  SlotMessage m{};
  m.ordinal = s.ordinal;
  m.visible = s.visible;
  put(m.host, s.host);
  put(m.pci, s.pci);
  put(m.uuid, s.uuid);
  put(m.note, s.note);
  return m;
}
GpuSlot from_message(const SlotMessage& m) {
  GpuSlot s;
  s.ordinal = m.ordinal;
  s.visible = m.visible;
  s.host = m.host;
  s.pci = m.pci;
  s.uuid = m.uuid;
  s.note = m.note;
  return s;
}

class NcclAllreducer : public Allreducer {
 public:
  NcclAllreducer(std::shared_ptr<Comm> comm, Device* device, bool force_ring, Seconds timeout)
      : comm_(std::move(comm)), device_(device), timeout_(timeout) {
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
  // Its wait for the stream asks the trainer's PeerWatch past --timeout, as the ring's do
  // (common/peer_liveness.h); the ncclAllReduce's own progress is the GPU's.
  bool can_watch_peers() const override { return true; }
  void watch_peers(PeerLiveness* liveness) override { liveness_ = liveness; }

  void run(const float* in, float* out, std::size_t count, float scale) override {
    if (count == 0) return;
    if (!nccl_)
      throw Error(comm_->where() + ": backend 'nccl': the communicator was aborted after an " +
                  "earlier failure");
    guard([&] {
      CHECK_CUDA(cudaSetDevice(ordinal_));  // this thread may have another GPU current (header)
      CHECK_NCCL(ncclAllReduce(in, out, count, ncclFloat, ncclSum, nccl_, stream_));
      // The first call connects to the peers (NCCL_RUNTIME_CONNECT, NCCL's default since 2.22),
      // so it is ready only once they reach theirs: a live straggler's first step is waited for
      // here as its later ones are in the stream's wait below.
      wait_ready("ncclAllReduce", timeout_, liveness_);
      // Yield, never sleep, as for MPI_Iallreduce: a sleep of up to 500 us would be added to
      // every all-reduce longer than 2 ms (not measured: one GPU runs NCCL on one rank only).
      ProgressWaiter waiter(*comm_, timeout_, std::chrono::microseconds(0), /*max_sleep_us=*/0,
                            liveness_);
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
    return reference_wire_bytes(comm_->size(), count);
  }

 private:
  void setup(bool force_ring) {
    GpuSlot mine;
    if (device_ && device_->is_gpu()) {
      // CudaDevice::synchronize makes its GPU current on this thread (device.h): the stream and
      // the communicator below are created on that GPU, not on whichever one this thread had.
      device_->synchronize();
      CHECK_CUDA(cudaGetDevice(&ordinal_));
      mine = describe_gpu(ordinal_);
    } else {
      mine.host = this_host_name();
      mine.note = "it computes on " + (device_ ? device_->name() : std::string("no device"));
    }
    IdMessage msg = exchange_id(mine);
    if (msg.status == 1) throw ConfigError(comm_->where() + ": " + msg.text);
    if (msg.status != 0) throw Error(comm_->where() + ": " + msg.text);
    // Until the communicator is ready (or aborted, in release()): NCCL reads it while it sets up.
    if (force_ring) algo_env_.emplace("NCCL_ALGO", "Ring");
    CHECK_CUDA(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    ncclResult_t rc = ncclCommInitRankConfig(&nccl_, comm_->size(), msg.id, comm_->rank(), &config);
    CHECK_NCCL(rc);
    // Every rank has just sent rank 0 its GPU, so all are alive; NCCL's set-up (topology, and
    // with lazy connection off the connections) takes seconds on a node of many GPUs, more than
    // a short --timeout meant for a peer that stops answering in training.
    const Seconds init_wait(std::max(timeout_.count(), kInitWaitFloorS));
    guard([&] { wait_ready("ncclCommInitRank", init_wait, nullptr); });
    algo_env_.reset();
  }

  // Gathers every rank's GPU on rank 0, which checks them (one_gpu_per_rank_problem) and answers
  // with the unique id or why there is none; every rank returns the same status.
  IdMessage exchange_id(const GpuSlot& slot) {
    const SlotMessage mine = to_message(slot);
    IdMessage msg{};
    if (comm_->rank() != 0) {
      comm_->send(&mine, sizeof mine, 0, kGpuIdTag, timeout_);
      recv_exact(*comm_, &msg, sizeof msg, 0, kNcclIdTag, timeout_, "the NCCL unique id");
      return msg;
    }
    std::vector<GpuSlot> all(comm_->size());
    all[0] = from_message(mine);  // cut to the message's fields as the other ranks' are
    for (int r = 1; r < comm_->size(); ++r) {
      SlotMessage m{};
      recv_exact(*comm_, &m, sizeof m, r, kGpuIdTag, timeout_, "its GPU");
      all[r] = from_message(m);
    }
    const std::string problem = one_gpu_per_rank_problem(all, "backend 'nccl'");
    if (!problem.empty()) {
      msg.status = 1;
      put(msg.text, problem);
    } else if (ncclResult_t rc = ncclGetUniqueId(&msg.id); rc != ncclSuccess) {
      msg.status = 2;
      put(msg.text, std::string("ncclGetUniqueId on rank 0 failed: ") + ncclGetErrorString(rc));
    }
    for (int r = 1; r < comm_->size(); ++r) comm_->send(&msg, sizeof msg, r, kNcclIdTag, timeout_);
    return msg;
  }

  // Polls until the non-blocking communicator has finished the last call: for at most `limit`
  // without progress, or past it while `liveness` (if any) says a peer is alive.
  void wait_ready(const char* what, Seconds limit, PeerLiveness* liveness) {
    ProgressWaiter waiter(*comm_, limit, std::chrono::microseconds(0), 500, liveness);
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
  // Aborts the communicator at once when `f` throws (an NCCL or CUDA error, a timeout): its
  // kernel may be waiting for a peer that will never answer, and until the abort it keeps
  // spinning on the GPU, so the next cudaFree of the Device (BucketSync's and the bench's
  // buffers are freed before this engine is destroyed), which waits for the whole GPU, would
  // hang the rank for good instead of letting it report the error. Only the thread that calls
  // run() uses the communicator, so aborting here races with nothing.
  template <typename F>
  void guard(F&& f) {
    try {
      f();
    } catch (...) {
      failed_ = true;
      if (nccl_) {
        ncclCommAbort(nccl_);
        nccl_ = nullptr;
      }
      throw;
    }
  }

  // Never throws (destructor and constructor clean-up). A healthy communicator is finalized
  // (which waits for the peers to finalize too) for at most the timeout, then destroyed; one
  // that failed, or whose finalize does not complete in time, is aborted.
  void release(bool abort) {
    if (ordinal_ >= 0) cudaSetDevice(ordinal_);  // the destructor may run on another thread
    if (nccl_) {
      if (!abort && !finalize()) abort = true;
      abort ? ncclCommAbort(nccl_) : ncclCommDestroy(nccl_);
      nccl_ = nullptr;
    }
    algo_env_.reset();  // after the abort: NCCL's set-up thread no longer reads it
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
  PeerLiveness* liveness_ = nullptr;  // watch_peers: asked by run()'s wait past its deadline
  int ordinal_ = -1;
  cudaStream_t stream_ = nullptr;
  ncclComm_t nccl_ = nullptr;
  bool failed_ = false;
  std::optional<ScopedEnv> algo_env_;  // NCCL_ALGO=Ring while the communicator is set up
};

}  // namespace

std::unique_ptr<Allreducer> make_nccl_allreducer(std::shared_ptr<Comm> comm, Device* device,
                                                 bool force_ring, Seconds timeout) {
  return std::make_unique<NcclAllreducer>(std::move(comm), device, force_ring, timeout);
}

}  // namespace starring
