#include "allreduce/allreducer.h"

#include "allreduce/shm_ring.h"

namespace starring {

namespace {

class RingAllreducer : public Allreducer {
 public:
  RingAllreducer(std::shared_ptr<Comm> comm, RingOptions opt)
      : comm_(std::move(comm)), ring_(*comm_, opt) {
    if (opt.shared_memory) shm_ = ShmRing::create(*comm_, opt);
  }
  std::string name() const override { return "ring"; }
  void run(const float* in, float* out, std::size_t count, float scale) override {
    if (shm_) {
      shm_->run(in, out, count, scale);
    } else {
      ring_.run(in, out, count, scale);
    }
  }
  std::optional<CommCounters> counters() const override {
    CommCounters c = comm_->counters();
    if (shm_) {
      CommCounters s = shm_->counters();
      c.bytes_sent += s.bytes_sent;
      c.bytes_recv += s.bytes_recv;
      c.msgs_sent += s.msgs_sent;
      c.msgs_recv += s.msgs_recv;
    }
    return c;
  }
  std::uint64_t wire_bytes(std::size_t count) const override {
    return ring_.wire_bytes_per_run(count);
  }
  void close(bool failed) override {
    if (shm_) shm_->close(failed);
  }
  bool can_watch_peers() const override { return true; }
  void watch_peers(PeerLiveness* liveness) override {
    ring_.watch_peers(liveness);
    if (shm_) shm_->watch_peers(liveness);
  }

 private:
  std::shared_ptr<Comm> comm_;
  RingAllreduce ring_;
  std::unique_ptr<ShmRing> shm_;  // the shared-memory data path, when every rank is on one node
};

}  // namespace

std::uint64_t reference_wire_bytes(int ranks, std::size_t count) {
  const std::uint64_t n = ranks;
  return n <= 1 ? 0 : 2 * (n - 1) * count * 4 / n;
}

std::unique_ptr<Allreducer> make_ring_allreducer(std::shared_ptr<Comm> comm, RingOptions opt) {
  return std::make_unique<RingAllreducer>(std::move(comm), opt);
}

}  // namespace starring
