// The bench driver (see bench_harness.h for what it measures and how).
#include "experiments/bench_harness.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <set>
#include <thread>

#include "common/clock.h"
#include "common/comm_util.h"
#include "common/error.h"
#include "common/fault.h"
#include "common/gpu_assignment.h"
#include "common/kept_memory.h"
#include "common/stall_watch.h"
#include "experiments/bench_agreement.h"
#include "experiments/bench_on_ranks.h"
#include "experiments/host_cpus.h"

namespace starring {

namespace {

std::vector<std::pair<std::string, BenchOpFactory>>& table() {
  static std::vector<std::pair<std::string, BenchOpFactory>> t;
  return t;
}

struct Measured {
  double time_s = 0;
  long wrong = 0;
  double sent = 0, recv = 0;  // per rank per iteration
  bool bytes_measured = true;
};

// One size on one op (`name`): warm-up, timed loop, check; every rank takes part. The `mpi` op
// calls the blocking MPI_Allreduce, which waits for a silent peer for good: each iteration must
// complete within --timeout + 10 s (the other ops fail sooner, at --timeout, naming the peer).
Measured measure(BenchOp& op, const std::string& name, Comm& world, const BenchConfig& bc,
                 std::size_t count, const ClosedForm& cf, const ReceiveVector<float>& input,
                 std::vector<float>& out) {
  const bool worker = op.is_worker();
  const bool blocking = name == "mpi" || name.rfind("mpi@", 0) == 0;
  StallWatch watch(
      detail::concat("bench: an iteration of ", name, " at ", count * sizeof(float), " B"),
      blocking ? "a peer is stopped or stuck (the mpi rows call the blocking MPI_Allreduce, "
                 "as nccl-tests does)"
               : "a peer is stopped or stuck");
  op.prepare(worker ? input.data() : nullptr, count);
  for (int i = 0; i < bc.warmup; ++i) {
    op.run();
    watch.progress();
  }
  // Counters are read between two barriers: after the first, every rank's warm-up traffic is
  // over; before the second, no rank has started the timed loop. With one barrier, a fast rank's
  // first push reached a slow rank's co-located shard (its server thread counts it) before the
  // slow rank read its counters, and that push fell out of the window (co-located rows read up
  // to 12 % low in bytes received). The second barrier's few bytes (p2p barriers send 1 byte a
  // round) land in the window.
  world.barrier(world.timeout());
  auto c0 = op.counters();
  world.barrier(world.timeout());
  test_stop_point("bench-loop", world.rank());
  const auto t0 = Clock::now();
  for (int i = 0; i < bc.iters; ++i) {
    op.run();
    watch.progress();
  }
  Measured m;
  m.time_s = seconds_since(t0) / std::max(bc.iters, 1);
  auto c1 = op.counters();
  if (c0 && c1) {
    m.sent = static_cast<double>(c1->bytes_sent - c0->bytes_sent) / std::max(bc.iters, 1);
    m.recv = static_cast<double>(c1->bytes_recv - c0->bytes_recv) / std::max(bc.iters, 1);
  } else {
    m.bytes_measured = false;
  }
  // The check: a run of its own into a zeroed result (every rank runs it; -c is agreed), after a
  // barrier, so that no rank's check traffic reaches a slower rank's co-located shard before that
  // rank read its counters (co-located rows read up to 11 % high in bytes received without it).
  if (bc.check) {
    world.barrier(world.timeout());
    if (worker) op.clear_result();
    op.run();
    watch.progress();
  }
  if (worker && bc.check) {
    op.result(out.data());
    const std::vector<float> expected = cf.sums_by_phase(op.workers());
    for (std::size_t i = 0; i < count; ++i)
      if (out[i] != expected[cf.phase(i)]) ++m.wrong;
  }
  return m;
}

// `width`: the backend column, wide enough for the longest name (ps-colocated@4).
void print_header(int np, const BenchConfig& bc, const std::string& compress, int width) {
  // --compress: the rows' size, algbw and busbw count float32 data; the wire carries half
  const std::string wire = compress == "none" ? "" : " (" + compress + " on the wire: --compress)";
  std::printf("#\n# starring bench: all-reduce / push-pull of float32%s, sum over workers, np %d\n",
              wire.c_str(), np);
  std::printf(
      "#  minBytes %zu maxBytes %zu step: %d(factor) warmup iters: %d iters: %d "
      "validation: %d\n",
      bc.min_bytes, bc.max_bytes, bc.factor, bc.warmup, bc.iters, bc.check ? 1 : 0);
  std::printf("#  %-*s %-9s %12s %12s %6s %11s %9s %9s %7s %8s %8s\n", width, "backend", "shape",
              "size", "count", "type", "time(us)", "algbw", "busbw", "#wrong", "%memcpy",
              "vs base");
  std::printf("#  %-*s %-9s %12s %12s %6s %11s %9s %9s %7s %8s %8s\n", width, "", "", "(B)",
              "(elements)", "", "", "(GB/s)", "(GB/s)", "", "", "");
}

}  // namespace

void register_bench_op(const std::string& name, BenchOpFactory f) {
  for (auto& [n, _] : table()) STARRING_CHECK(n != name, "bench op registered twice: ", name);
  table().emplace_back(name, std::move(f));
}

std::unique_ptr<BenchOp> make_bench_op(const std::string& name, const BenchOpContext& ctx) {
  const auto [base, ranks] = split_ranks_suffix(name);  // "ring@4": ranks 0..3 (bench_on_ranks.h)
  STARRING_CONFIG_CHECK(ranks <= ctx.world->size(), "--backends ", name, ": ", ranks,
                        " ranks, but only ", ctx.world->size(), " were started");
  for (auto& [n, f] : table())
    if (n == base) return ranks ? make_bench_op_on_ranks(f, ranks, ctx) : f(ctx);
  std::string known;
  for (const auto& n : bench_op_names()) known += (known.empty() ? "" : ", ") + n;
  throw ConfigError("unknown bench backend '" + name + "' (known: " + known + ")");
}

std::vector<std::string> bench_op_names() {
  std::vector<std::string> out;
  for (auto& [n, _] : table()) out.push_back(n);
  return out;
}

nlohmann::json to_json(const BenchRow& r) {
  nlohmann::json j{{"bench", r.kind},
                   {"backend", r.backend},
                   {"np", r.np},
                   {"workers", r.workers},
                   {"servers", r.servers},
                   {"ranks_used", r.ranks},
                   {"size", r.bytes},
                   {"count", r.count},
                   {"type", "float"},
                   {"time_us", r.time_us},
                   {"algbw_GBps", r.algbw_GBps},
                   {"busbw_GBps", r.busbw_GBps},
                   {"wrong", r.checked ? nlohmann::json(r.wrong) : nlohmann::json(nullptr)},
                   {"checked", r.checked},
                   {"iters", r.iters},
                   {"warmup", r.warmup},
                   {"memcpy_GBps",  // null: not measured (--memcpy-baseline false)
                    r.memcpy_GBps > 0 ? nlohmann::json(r.memcpy_GBps) : nlohmann::json(nullptr)},
                   {"bytes_sent_per_rank", r.bytes_sent_per_rank},
                   {"bytes_recv_per_rank", r.bytes_recv_per_rank},
                   {"bytes_measured", r.bytes_measured},
                   {"vs_base", r.vs_base ? nlohmann::json(*r.vs_base) : nlohmann::json(nullptr)},
                   {"base", r.base}};
  for (auto& [k, v] : r.extra.items()) j[k] = v;
  return j;
}

std::string shape_label(const BenchRow& r) {
  std::string s = "W=" + std::to_string(r.workers);
  if (r.servers.is_string()) return s + ",co";
  if (r.servers.is_number() && r.servers.get<int>() > 0)
    s += ",S=" + std::to_string(r.servers.get<int>());
  return s;
}

ClosedForm closed_form_for(int workers, const std::string& compress) {
  if (compress != "fp16" && compress != "bf16") return {};
  const long limit = compress == "bf16" ? 256 : 2048;  // integers exact in the wire format
  // input_value's largest partial sum: the ring adds the workers in order from any start.
  auto default_exact = [&] {
    if (workers * (30L + workers - 1) <= limit) return true;  // |input_value| <= 30 + worker
    if (workers > 64) return false;
    for (std::size_t ph = 0; ph < 61; ++ph)  // input_value depends on i through its phase
      for (int start = 0; start < workers; ++start) {
        long s = 0;
        for (int k = 0; k < workers; ++k)
          if (std::labs(s += static_cast<long>(input_value_at_phase((start + k) % workers, ph))) >
              limit)
            return false;
      }
    return true;
  };
  if (default_exact()) return {};
  ClosedForm cf;
  cf.period = 1;
  for (int p : {59, 53, 47, 43, 41, 37, 31, 29, 23, 19, 17, 13, 11, 7, 5, 3})
    if (static_cast<long>(workers) * ((p - 1) / 2) <= limit) {
      cf.period = p;
      break;
    }
  return cf;
}

double measure_memcpy_GBps(std::size_t bytes) {
  bytes = std::max<std::size_t>(bytes, 1 << 20);
  std::vector<char> a(bytes, 1), b(bytes, 0);
  std::memcpy(b.data(), a.data(), bytes);  // touch both
  double best = 0;
  for (int rep = 0; rep < 5; ++rep) {
    const auto t0 = Clock::now();
    std::memcpy(rep % 2 ? a.data() : b.data(), rep % 2 ? b.data() : a.data(), bytes);
    best = std::max(best, static_cast<double>(bytes) / seconds_since(t0) / 1e9);
  }
  return best;
}

namespace {

void validate(const BenchConfig& bc) {
  STARRING_CONFIG_CHECK(bc.factor >= 2, "-f/--factor must be >= 2, got ", bc.factor);
  STARRING_CONFIG_CHECK(bc.min_bytes >= 4 && bc.min_bytes <= bc.max_bytes,
                        "-b/-e: need 4 <= min bytes <= max bytes, got ", bc.min_bytes, " and ",
                        bc.max_bytes);
  STARRING_CONFIG_CHECK(bc.iters >= 1 && bc.warmup >= 0, "-n must be >= 1 and -w >= 0");
}

// Rank 0: one row from every rank's {time, wrong, sent, recv, is_worker}.
BenchRow make_row(const BenchOp& op, const std::string& name, int np, std::size_t count,
                  const std::vector<std::vector<double>>& all, bool bytes_measured) {
  BenchRow row;
  row.backend = name;
  row.kind = op.kind();
  row.np = np;
  row.workers = op.workers();
  row.servers = op.servers();
  row.ranks = row.workers + (row.servers.is_number() ? row.servers.get<int>() : 0);
  row.bytes = count * sizeof(float);
  row.count = count;
  double nw = 0;
  for (const auto& v : all) {
    row.time_us = std::max(row.time_us, v[0] * 1e6);  // the slowest worker
    row.wrong += static_cast<long>(v[1]);
    row.bytes_sent_per_rank += v[2];
    row.bytes_recv_per_rank += v[3];
    nw += v[4];
  }
  row.bytes_sent_per_rank /= std::max(nw, 1.0);
  row.bytes_recv_per_rank /= std::max(nw, 1.0);
  row.bytes_measured = bytes_measured;
  if (!bytes_measured) {  // opaque transport: the bus bytes of the algorithm as the reference
    row.bytes_sent_per_rank = row.bytes_recv_per_rank = row.bytes * op.bus_factor();
  }
  row.algbw_GBps = row.time_us > 0 ? row.bytes / (row.time_us * 1e-6) / 1e9 : 0;
  row.busbw_GBps = row.algbw_GBps * op.bus_factor();
  return row;
}

// The base's own rows read "base"; rows of another shape "-" (not compared).
void print_row(const BenchRow& r, bool json, int width) {
  char vs[16] = "-", pct[16] = "", wrong[24] = "N/A";
  if (r.backend == r.base)
    std::snprintf(vs, sizeof vs, "base");
  else if (r.vs_base)
    std::snprintf(vs, sizeof vs, "%.2fx", *r.vs_base);
  if (r.memcpy_GBps > 0)
    std::snprintf(pct, sizeof pct, "%.1f%%", 100.0 * r.busbw_GBps / r.memcpy_GBps);
  if (r.checked) std::snprintf(wrong, sizeof wrong, "%ld", r.wrong);
  std::printf("   %-*s %-9s %12zu %12zu %6s %11.1f %9.2f %9.2f %7s %8s %8s\n", width,
              r.backend.c_str(), shape_label(r).c_str(), r.bytes, r.count, "float", r.time_us,
              r.algbw_GBps, r.busbw_GBps, wrong, pct, vs);
  if (json) std::printf("%s\n", to_json(r).dump().c_str());
}

void print_footer(const std::vector<std::string>& names, const std::vector<BenchRow>& rows,
                  const BenchRow& base, bool checked, int width) {
  for (const auto& n : names) {
    double busbw = 0;
    long wrong = 0;
    int k = 0;
    for (const auto& r : rows) {
      if (r.backend != n) continue;
      busbw += r.busbw_GBps;
      wrong += r.wrong;
      ++k;
    }
    if (checked)
      std::printf("#  %-*s Out of bounds values : %ld %s\n", width, n.c_str(), wrong,
                  wrong ? "FAILED" : "OK");
    else
      std::printf("#  %-*s Out of bounds values : N/A (not checked: -c 0)\n", width, n.c_str());
    std::printf("#  %-*s Avg bus bandwidth    : %.3f GB/s\n", width, n.c_str(),
                busbw / std::max(k, 1));
  }
  std::printf(
      "#  busbw = algbw * bus factor (all-reduce: 2(N-1)/N); %%memcpy = busbw as a percentage "
      "of memcpy bandwidth; shape = W workers (,S=S dedicated servers; ,co co-located)\n"
      "#  vs base = busbw / busbw of %s (%s) at the same size, on rows of that shape only; '-': "
      "another shape, not compared (its busbw counts other links, its time other ranks)\n#\n",
      base.backend.c_str(), shape_label(base).c_str());
  std::fflush(stdout);
}

// Every rank agrees that each op could be made, before making the next: a bad setting found
// only by the ranks of an `@N` sub-run (ps@3 with --servers 3) left the ranks sitting it out at
// the harness's first barrier for its 120 s, then the job ended by MPI_Abort; and those ranks went
// on to make the next op alone (ps@3,ring: rank 3 hung in ring's collective MPI_Comm_dup).
std::vector<std::unique_ptr<BenchOp>> make_ops_agreed(const std::vector<std::string>& names,
                                                      const Config& cfg,
                                                      const std::shared_ptr<Comm>& world,
                                                      Device* device) {
  BenchOpContext ctx{cfg, world, device};
  std::vector<std::unique_ptr<BenchOp>> ops;
  for (const auto& n : names) {
    std::string failed;  // its first character says what kind (failure_kind), then the message
    try {
      ops.push_back(make_bench_op(n, ctx));
    } catch (const std::exception& e) {
      failed = std::string(1, failure_kind(e)) + e.what();
    }
    failed = first_error(*world, failed, tags::kBenchBase, world->timeout());
    if (!failed.empty()) throw_failure(failed[0], failed.substr(1));
  }
  return ops;
}

// What this rank holds in host memory at the largest size at least: on a worker of any op, the
// input and result vectors of measure(); on every rank, the op's own buffers (BenchOp::
// host_buffers: a dedicated server's shard too, 2 x D/S with S = 1 the largest of a 4-rank job).
double host_bytes_at_largest(const BenchConfig& bc,
                             const std::vector<std::unique_ptr<BenchOp>>& ops) {
  const double bytes = static_cast<double>(largest_bench_size(bc) / sizeof(float) * sizeof(float));
  double holds = 0;
  for (const auto& op : ops)
    holds = std::max(holds, ((op->is_worker() ? 2.0 : 0.0) + op->host_buffers()) * bytes);
  return holds;
}

// vs base: busbw over the base backend's at the same size, for rows of the base's shape only.
void compare_to_base(std::vector<BenchRow>& size_rows, std::size_t base) {
  const BenchRow base_row = size_rows[base];
  for (BenchRow& r : size_rows) {
    r.base = base_row.backend;
    if (r.workers == base_row.workers && r.ranks == base_row.ranks && base_row.busbw_GBps > 0)
      r.vs_base = r.busbw_GBps / base_row.busbw_GBps;
  }
}

}  // namespace

std::size_t largest_bench_size(const BenchConfig& bc) {
  std::size_t largest = bc.min_bytes;
  while (largest <= bc.max_bytes / bc.factor) largest *= bc.factor;  // the size loop's last
  return largest;
}

// The sweep driver had only its own host's CPUs against the job's
// ranks: 4 ranks on two hosts of 2 CPUs read as time-shared.
nlohmann::json job_hosts(Comm& world, int tag) {
  const nlohmann::json mine{
      {"host", this_host_name()}, {"cpus", usable_cpus()}, {"cpu_ids", usable_cpu_ids()}};
  if (world.rank() != 0) {
    send_text(world, mine.dump(), 0, tag, world.timeout());
    return {};
  }
  std::vector<nlohmann::json> ranks{mine};
  std::set<std::string> hosts{mine["host"].get<std::string>()};
  for (int r = 1; r < world.size(); ++r) {
    ranks.push_back(nlohmann::json::parse(
        recv_text(world, r, tag, world.timeout(), kMaxNoteBytes, "its host and CPUs")));
    hosts.insert(ranks.back().value("host", std::string()));
  }
  const std::string over = oversubscription(ranks);
  nlohmann::json j{{"hosts", hosts.size()},
                   {"cores", host_cpus(ranks, mine["host"].get<std::string>())},
                   {"oversubscribed", !over.empty()}};
  if (!over.empty()) j["oversubscribed_where"] = over;
  return j;
}

std::vector<BenchRow> run_bench_harness(const Config& cfg, std::shared_ptr<Comm> world,
                                        Device* device, const std::function<void()>& checked) {
  const BenchConfig& bc = cfg.bench;
  validate(bc);
  std::vector<std::string> names = bc.backends;
  if (names.empty()) names.push_back(cfg.sync.backend == "local" ? "ring" : cfg.sync.backend);
  const bool leader = world->rank() == 0;
  const std::vector<std::unique_ptr<BenchOp>> ops = make_ops_agreed(names, cfg, world, device);
  check_bench_host_memory(*world, host_bytes_at_largest(bc, ops), bc.max_bytes);
  if (checked) checked();
  std::size_t base = 0;  // the baseline column: "mpi" when present, else the first backend
  int width = 10;
  for (const auto& n : names) width = std::max(width, static_cast<int>(n.size()));
  for (std::size_t b = 0; b < names.size(); ++b)
    if (names[b] == "mpi") base = b;

  // memcpy bandwidth of this machine, measured by rank 0 while the others wait at a barrier.
  double memcpy_GBps = 0;
  const std::size_t memcpy_bytes = std::max(bc.max_bytes, kMemcpyReferenceBytes);
  if (bc.memcpy_baseline && leader) memcpy_GBps = measure_memcpy_GBps(memcpy_bytes);
  world->barrier(Seconds(std::max(world->timeout().count(), 120.0)));
  if (leader) {
    print_header(world->size(), bc, cfg.sync.compress, width);
    if (bc.memcpy_baseline)
      std::printf("#  memcpy bandwidth of this machine (one process, %zu B): %.2f GB/s\n",
                  memcpy_bytes, memcpy_GBps);
    // other work on the host slows every row (bench-model says it too)
    std::printf("#  load average at start: %s (1 min) on %u CPUs\n", load_average().c_str(),
                std::thread::hardware_concurrency());
  }
  std::vector<BenchRow> rows;
  int tag = tags::kBenchBase;
  const nlohmann::json hosts = job_hosts(*world, ++tag);
  for (std::size_t bytes = bc.min_bytes; bytes <= bc.max_bytes; bytes *= bc.factor) {
    const std::size_t count = bytes / sizeof(float);
    std::vector<BenchRow> size_rows;
    for (std::size_t b = 0; b < ops.size(); ++b) {  // backends side by side at each size
      BenchOp& op = *ops[b];
      const ClosedForm cf = closed_form_for(op.workers(), cfg.sync.compress);
      // kept where a send let go may still read it (an op that failed: common/kept_memory.h)
      ReceiveVector<float> input(op.is_worker() ? count : 0);
      std::vector<float> out(input.size());
      for (std::size_t i = 0; i < input.size(); ++i) input[i] = cf.value(op.worker_index(), i);
      Measured m = measure(op, names[b], *world, bc, count, cf, input, out);
      nlohmann::json extra = op.extra_fields(count, bc.iters);
      const double w = op.is_worker() ? 1 : 0;
      auto all = gather_to_root(
          *world, {m.time_s * w, static_cast<double>(m.wrong), m.sent * w, m.recv * w, w}, ++tag);
      if (!leader) continue;
      size_rows.push_back(make_row(op, names[b], world->size(), count, all, m.bytes_measured));
      size_rows.back().memcpy_GBps = memcpy_GBps;
      size_rows.back().checked = bc.check != 0;
      size_rows.back().iters = bc.iters;
      size_rows.back().warmup = bc.warmup;
      size_rows.back().extra = extra;
      size_rows.back().extra.update(hosts);
      if (cfg.sync.compress != "none") size_rows.back().extra["compress"] = cfg.sync.compress;
      if (!cfg.out.run_name.empty()) size_rows.back().extra["run_name"] = cfg.out.run_name;
    }
    if (leader) {
      compare_to_base(size_rows, base);
      for (const auto& r : size_rows) print_row(r, bc.json, width);
      std::fflush(stdout);
      rows.insert(rows.end(), size_rows.begin(), size_rows.end());
    }
    if (bytes > bc.max_bytes / bc.factor) break;  // the next size would pass -e (or overflow)
  }
  if (leader && !rows.empty()) print_footer(names, rows, rows[base], bc.check != 0, width);
  return rows;
}

}  // namespace starring
