#include "allreduce/allreducer.h"

namespace starring {

namespace {

class RingAllreducer : public Allreducer {
 public:
  RingAllreducer(std::shared_ptr<Comm> comm, RingOptions opt)
      : comm_(std::move(comm)), ring_(*comm_, opt) {}
  std::string name() const override { return "ring"; }
  void run(const float* in, float* out, std::size_t count, float scale) override {
    ring_.run(in, out, count, scale);
  }
  std::optional<CommCounters> counters() const override { return comm_->counters(); }
  std::uint64_t wire_bytes(std::size_t count) const override {
    return ring_.wire_bytes_per_run(count);
  }

 private:
  std::shared_ptr<Comm> comm_;
  RingAllreduce ring_;
};

}  // namespace

std::unique_ptr<Allreducer> make_ring_allreducer(std::shared_ptr<Comm> comm, RingOptions opt) {
  return std::make_unique<RingAllreducer>(std::move(comm), opt);
}

}  // namespace starring
