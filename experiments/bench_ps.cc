// `starring bench` adapter for the parameter server: one iteration is a push of the worker's
// buffer and a pull of the sum over workers (the servers' update rule is "sum": parameters :=
// sum of the pushes, so the result checks exactly against expected_sum), through the same
// PsWorker/ServerLoop code that training uses.
//
//   ps            servers from --servers: S dedicated ranks (the last S; W = np - S workers), or
//                 "colocated" (every rank a worker and a shard);
//   ps-colocated  co-located shards on every rank of its world, whatever --servers says.
// With a suffix @N (experiments/bench_on_ranks.h) an op runs on the first N ranks only, so one
// run compares them at the same number of workers:
//   scripts/mpirun.sh -np 5 starring bench --servers 1 --backends ps,ps-colocated@4,ring@4
//
// busbw for PS: bytes through the busiest link (one direction) per second. With dedicated
// servers a server's link carries W*D/S each way and a worker's D, so busbw = algbw *
// max(1, W/S); co-located, every rank sends 2(W-1)/W * D, so busbw = algbw * 2(W-1)/W - the same
// definition as the ring's, and the columns compare directly. Each size also prints, per server,
// the bytes in and out per iteration against the theory (W*D/S each way; co-located (W-1)/W*D
// each way per shard), counted as the workers' bytes_sent count them: every push message carries
// a 32-byte chunk header (ps/protocol.h), replies carry none. The --json rows' server_bytes_in
// and server_bytes_out are these wire bytes (the headers in), server_push_payload_in the floats
// alone.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <thread>

#include "common/error.h"
#include "common/kept_memory.h"
#include "experiments/bench_harness.h"
#include "ps/protocol.h"
#include "ps/ps_worker.h"
#include "ps/server_loop.h"

namespace starring {
namespace {

class PsBenchOp : public BenchOp {
 public:
  PsBenchOp(const BenchOpContext& ctx, bool colocated)
      : cfg_(ctx.cfg),
        group_(
            ps::make_ps_group(colocated ? "colocated" : ctx.cfg.sync.servers, ctx.world->size())),
        comm_(ctx.world),
        rank_(ctx.world->rank()) {
    // Found by every rank here, before the first barrier (bench_harness.cc agrees on it): in
    // prepare() the workers alone found it, after the table's header, and ended by MPI_Abort.
    STARRING_CONFIG_CHECK(ctx.cfg.sync.ps_partition != "tensor" || group_.num_servers() < 2,
                          "bench ", colocated ? "ps-colocated" : "ps",
                          ": --ps-partition tensor places whole tensors, and "
                          "the bench pushes one buffer (one tensor), so ",
                          group_.num_servers() - 1, " of its ", group_.num_servers(),
                          " server shards would own nothing: use --ps-partition range");
    // The sizes only grow from -b: checked here, before the table's header, so that a refused -b
    // prints no half table (found in prepare(), the header and the size's other backends had run).
    check_fits_shards(ctx.cfg.bench.min_bytes / sizeof(float));
  }
  ~PsBenchOp() override {
    try {
      finish();
    } catch (...) {
    }
    if (rank_ == 0 && sizes_ > 0)  // after the harness's footer
      std::printf(
          "#  %s busbw = bytes through the busiest link (one direction) per second = "
          "algbw * %s = algbw * %.3f\n#\n",
          group_.colocated ? "ps-colocated" : "ps", group_.colocated ? "2(W-1)/W" : "max(1, W/S)",
          bus_factor());
  }

  std::string kind() const override { return "pushpull"; }
  bool is_worker() const override { return group_.worker_index(rank_) >= 0; }
  int worker_index() const override { return std::max(0, group_.worker_index(rank_)); }
  int workers() const override { return group_.num_workers(); }
  nlohmann::json servers() const override {
    if (group_.colocated) return "colocated";
    return group_.num_servers();
  }
  // A worker's parameters and its pushes' buffers; a server shard's parameters, sums and early
  // pushes' copies (ps/shard_server.h: only the shard's pages of them are touched). Peak RSS
  // measured at -e 128M (2026-12-02), in buffers of -e besides a worker's input and result:
  // --servers 1 np 3 workers 2.85, the server 3.0. Counted a little below (2.5, 2.5/S), and a
  // co-located worker's shard as its parameters and sums (2 + 2/N).
  double host_buffers() const override {
    if (!is_worker()) return 2.5 / group_.num_servers();
    return group_.colocated ? 2.0 + 2.0 / group_.num_workers() : 2.5;
  }
  double bus_factor() const override {
    const double w = workers(), s = group_.num_servers();
    return group_.colocated ? 2.0 * (w - 1) / w : std::max(1.0, w / s);
  }

  void prepare(const float* input, std::size_t count) override {
    finish();
    check_fits_shards(count);  // on every rank, so that the job ends at once
    // A tensor's shape is int (ParamLayout), as MPI's counts are: refused, not wrapped. On every
    // rank, as above: refused by the workers alone, a dedicated server waited for them.
    STARRING_CHECK(count <= static_cast<std::size_t>(INT32_MAX), comm_->where(),
                   ": a push+pull of ", count, " floats exceeds the parameter server's int count");
    count_ = count;
    iters_ = 0;
    if (group_.is_dedicated_server(rank_)) {
      ps::ServerOptions so;
      so.timeout = Seconds(cfg_.sync.timeout_s);
      so.chunk_bytes = cfg_.sync.ps_chunk_bytes;
      so.shared_memory = cfg_.sync.ps_shared_memory;
      server_ = std::thread([this, so] {
        try {
          ps::ServerLoop(comm_, group_, so).run();  // its totals reach the workers (goodbye)
        } catch (...) {
          server_error_ = std::current_exception();
        }
      });
      return;
    }
    layout_ = ParamLayout();
    layout_.add("buffer", {static_cast<int>(count)});
    params_.assign(count, 0.0f);
    auto opt = ps::worker_options(cfg_.sync, nullptr);
    opt.update = "sum";
    opt.consistency = "bsp";
    worker_ = std::make_unique<ps::PsWorker>(comm_, group_, opt);
    worker_->start(layout_, {params_.data(), const_cast<float*>(input), false, nullptr},
                   OptimizerConfig{});
  }

  void run() override {
    if (!worker_) return;
    ++iters_;
    worker_->begin_step(iters_, 0.0f);
    worker_->tensor_ready(0);
    worker_->wait_params(0);
  }

  void result(float* out) override { std::memcpy(out, params_.data(), count_ * sizeof(float)); }
  void clear_result() override { std::fill(params_.begin(), params_.end(), 0.0f); }

  // A worker's count includes the data it moved through shared segments instead of messages.
  std::optional<CommCounters> counters() const override {
    return worker_ ? worker_->counters() : comm_->counters();
  }

  // Ends this size's session (workers say done, servers return their totals) and reports each
  // server's bytes per iteration: its step traffic (bytes_recv/bytes_sent: pushes with their
  // headers, replies), the bytes the workers' bytes_sent count. push_bytes_in, the floats alone,
  // left 32 bytes per push message out: 2 x 32 of the 64 KiB row's 131136 at W = 2.
  nlohmann::json extra_fields(std::size_t count, int) override {
    const bool had_worker = worker_ != nullptr;
    finish();
    const nlohmann::json servers = had_worker ? last_servers_ : nlohmann::json::array();
    nlohmann::json in = nlohmann::json::array(), out = nlohmann::json::array(),
                   payload = nlohmann::json::array(), chunks = nlohmann::json::array(),
                   busy = nlohmann::json::array();
    for (const auto& s : servers) {
      const double rounds = std::max(1.0, s.value("rounds", 1.0));
      in.push_back(s.value("bytes_recv", 0.0) / rounds);
      out.push_back(s.value("bytes_sent", 0.0) / rounds);
      payload.push_back(s.value("push_bytes_in", 0.0) / rounds);
      chunks.push_back(s.value("chunks", 0));
      busy.push_back(s.value("busy_s", 0.0) / std::max(1e-9, s.value("wall_s", 1.0)));
    }
    if (rank_ == 0) print_servers(count, in, out, chunks);
    ++sizes_;
    return {{"server_bytes_in", in},
            {"server_bytes_out", out},
            {"server_push_payload_in", payload},
            {"server_chunks", chunks},
            {"server_busy_frac", busy}};
  }

 private:
  // Every shard needs a part of the one buffer.
  void check_fits_shards(std::size_t count) const {
    const auto shards = static_cast<std::size_t>(group_.num_servers());
    STARRING_CONFIG_CHECK(count >= shards, "bench ", group_.colocated ? "ps-colocated" : "ps",
                          ": a message of ", count * sizeof(float), " B (", count,
                          " floats) cannot be split over ", shards,
                          " parameter-server shards: give -b ", shards * sizeof(float),
                          " or more (a float per shard)");
  }

  void finish() {
    if (worker_) {
      worker_->shutdown();
      last_servers_ = worker_->server_stats();
      worker_.reset();
    }
    if (server_.joinable()) server_.join();
    if (server_error_) std::rethrow_exception(std::exchange(server_error_, nullptr));
  }

  // Theory: each server gets W*D/S (co-located: (W-1)/W*D from the other workers) each way,
  // plus a 32-byte header on each push message in: one per chunk of its shard per pushing worker.
  void print_servers(std::size_t count, const nlohmann::json& in, const nlohmann::json& out,
                     const nlohmann::json& chunks) {
    const double d = static_cast<double>(count * sizeof(float)), w = workers();
    const double pushers = group_.colocated ? w - 1 : w;
    const double theory =
        group_.colocated ? (w - 1) / w * d : w * d / std::max(1, group_.num_servers());
    std::printf(
        "#  ps (%s) %zu B: bytes per iteration per server, measured / theory (in: the pushes "
        "with a %zu-B header per chunk message, as the workers count them; out: the replies):",
        group_.colocated ? "co-located" : "dedicated", count * sizeof(float), sizeof(ps::PsHeader));
    for (std::size_t s = 0; s < in.size(); ++s)
      std::printf("  server %zu in %.0f / %.0f out %.0f / %.0f", s, in[s].get<double>(),
                  theory + pushers * chunks[s].get<double>() * sizeof(ps::PsHeader),
                  out[s].get<double>(), theory);
    std::printf("\n");
  }

  const Config& cfg_;
  ps::PsGroup group_;
  std::shared_ptr<Comm> comm_;
  int rank_ = 0;
  std::size_t count_ = 0;
  std::int64_t iters_ = 0;
  int sizes_ = 0;
  ParamLayout layout_;
  ReceiveVector<float> params_;  // the replies land here (common/kept_memory.h)
  std::unique_ptr<ps::PsWorker> worker_;
  std::thread server_;
  nlohmann::json last_servers_ = nlohmann::json::array();
  std::exception_ptr server_error_;
};

const BenchOpRegistrar kPsBench("ps", [](const BenchOpContext& ctx) {
  return std::make_unique<PsBenchOp>(ctx, false);
});
const BenchOpRegistrar kPsColocatedBench("ps-colocated", [](const BenchOpContext& ctx) {
  return std::make_unique<PsBenchOp>(ctx, true);
});

}  // namespace
}  // namespace starring
