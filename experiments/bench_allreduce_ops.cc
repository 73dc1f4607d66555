// Bench adapters of the all-reduce engines: ring (the project's; ring-p2p forces its MPI
// point-to-point data path), mpi (a plain MPI_Allreduce call, the vendor baseline), nccl (device
// buffers). Each is a sum over all ranks of the world; busbw = algbw * 2(N-1)/N as in nccl-tests.
#include <algorithm>
#include <vector>

#include "allreduce/private_comm.h"
#include "common/device.h"
#include "common/error.h"
#include "common/kept_memory.h"
#include "experiments/bench_harness.h"
#include "experiments/register_ring.h"

namespace starring {
namespace {

class AllreduceBenchOp : public BenchOp {
 public:
  AllreduceBenchOp(const std::string& engine, const BenchOpContext& ctx)
      : comm_(private_comm(ctx.world)), device_(ctx.device) {
    engine_ = make_allreducer(engine, comm_, ctx.cfg.sync, ctx.device, MpiMode::kBlocking);
  }
  ~AllreduceBenchOp() override { release(); }

  int worker_index() const override { return comm_->rank(); }
  int workers() const override { return comm_->size(); }
  double bus_factor() const override {
    const double n = comm_->size();
    return 2.0 * (n - 1) / n;
  }

  void prepare(const float* input, std::size_t count) override {
    count_ = count;
    if (engine_->on_device()) {
      release();
      d_in_ = device_->alloc(std::max<std::size_t>(count, 1));
      d_out_ = device_->alloc(std::max<std::size_t>(count, 1));
      device_->to_device(d_in_, input, count);
      device_->synchronize();
      in_ = d_in_;
      out_ = d_out_;
    } else {
      host_out_.assign(count, 0.0f);
      in_ = input;
      out_ = host_out_.data();
    }
  }
  void run() override { engine_->run(in_, out_, count_, 1.0f); }
  void result(float* out) override {
    if (engine_->on_device()) {
      device_->to_host(out, d_out_, count_);
    } else {
      std::copy(host_out_.begin(), host_out_.end(), out);
    }
  }
  double host_buffers() const override { return engine_->on_device() ? 0 : 1; }
  void clear_result() override {
    if (engine_->on_device()) {
      device_->fill(d_out_, 0.0f, count_);
      device_->synchronize();  // done before NCCL's own stream writes it (as in prepare())
    } else {
      std::fill(host_out_.begin(), host_out_.end(), 0.0f);
    }
  }
  std::optional<CommCounters> counters() const override { return engine_->counters(); }

 private:
  void release() {
    if (d_in_) device_->free(d_in_);
    if (d_out_) device_->free(d_out_);
    d_in_ = d_out_ = nullptr;
  }
  std::shared_ptr<Comm> comm_;
  Device* device_;
  std::unique_ptr<Allreducer> engine_;
  std::size_t count_ = 0;
  const float* in_ = nullptr;
  float* out_ = nullptr;
  ReceiveVector<float> host_out_;  // the ring receives into it (common/kept_memory.h)
  float* d_in_ = nullptr;
  float* d_out_ = nullptr;
};

const BenchOpRegistrar kRingOp("ring", [](const BenchOpContext& c) {
  return std::make_unique<AllreduceBenchOp>("ring", c);
});
const BenchOpRegistrar kRingP2pOp("ring-p2p", [](const BenchOpContext& c) {
  return std::make_unique<AllreduceBenchOp>("ring-p2p", c);
});
const BenchOpRegistrar kMpiOp("mpi", [](const BenchOpContext& c) {
  return std::make_unique<AllreduceBenchOp>("mpi", c);
});
const BenchOpRegistrar kNcclOp("nccl", [](const BenchOpContext& c) {
  return std::make_unique<AllreduceBenchOp>("nccl", c);
});

}  // namespace
}  // namespace starring
