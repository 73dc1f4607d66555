// The overlap benchmark (see bench_overlap.h for what it measures and how).
#include "experiments/bench_overlap.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <optional>
#include <thread>
#include <utility>

#include "common/clock.h"
#include "common/comm_util.h"
#include "common/device.h"
#include "common/error.h"
#include "common/kept_memory.h"
#include "common/sub_comm.h"
#include "experiments/backend_registry.h"
#include "experiments/bench_agreement.h"
#include "experiments/bench_harness.h"
#include "experiments/bench_on_ranks.h"
#include "ps/ps_group.h"

namespace starring {

namespace {

// Control messages of this harness: a range of its own inside the bench's.
constexpr int kTagBase = tags::kBenchBase + (1 << 22);

// One compute kind, calibrated to last about `target` seconds on the training thread.
class Compute {
 public:
  Compute(std::string kind, int threads) : kind_(std::move(kind)) {
    if (kind_ != "busy") return;
    dev_ = make_device("cpu", threads, 0);
    a_ = dev_->alloc(kDim * kDim);
    b_ = dev_->alloc(kDim * kDim);
    c_ = dev_->alloc(kDim * kDim);
    dev_->fill(a_, 0.5f, kDim * kDim);
    dev_->fill(b_, 0.25f, kDim * kDim);
  }
  ~Compute() {
    if (!dev_) return;
    dev_->free(a_);
    dev_->free(b_);
    dev_->free(c_);
  }
  Compute(const Compute&) = delete;
  Compute& operator=(const Compute&) = delete;

  // The control posts the sync only after its compute.
  bool posted_after() const { return kind_ == "serial"; }

  void calibrate(double target_s) {
    sleep_s_ = target_s;
    if (!dev_) return;
    gemm(2);  // warm the caches and OpenBLAS's threads
    long reps = 0;
    const auto t0 = Clock::now();
    while (seconds_since(t0) < 0.02 || reps < 4) reps += gemm(4);  // at least 20 ms of it
    const double per_rep = seconds_since(t0) / static_cast<double>(reps);
    reps_ = std::max(1L, std::lround(target_s / per_rep));
    retune_ = true;
  }

  // One compute; returns its duration in seconds.
  double run() {
    const auto t0 = Clock::now();
    if (dev_) {
      gemm(reps_);
      if (std::exchange(retune_, false)) {  // the calibration ran beside other ranks' set-up
        const double t = seconds_since(t0);
        if (t > 0) reps_ = std::max(1L, std::lround(static_cast<double>(reps_) * sleep_s_ / t));
      }
    } else {
      std::this_thread::sleep_for(std::chrono::duration<double>(sleep_s_));
    }
    return seconds_since(t0);
  }

 private:
  static constexpr int kDim = 128;
  long gemm(long reps) {
    for (long r = 0; r < reps; ++r)
      dev_->gemm(false, false, kDim, kDim, kDim, 1.0f, a_, b_, r ? 1.0f : 0.0f, c_);
    dev_->synchronize();
    return reps;
  }

  std::string kind_;
  double sleep_s_ = 0;
  long reps_ = 1;
  bool retune_ = false;  // rescale reps_ after the first timed run
  std::unique_ptr<Device> dev_;
  float *a_ = nullptr, *b_ = nullptr, *c_ = nullptr;
};

double median(std::vector<double> v) {
  STARRING_CHECK(!v.empty(), "overlap bench: median of no values");
  std::sort(v.begin(), v.end());
  const std::size_t mid = v.size() / 2;
  return v.size() % 2 ? v[mid] : (v[mid - 1] + v[mid]) / 2;
}

// The largest of every rank's `v`, on every rank of `comm`.
double max_over(Comm& comm, double v, int tag) {
  const Seconds t = comm.timeout();
  if (comm.rank() != 0) {
    comm.send(&v, sizeof v, 0, tag, t);
    recv_exact(comm, &v, sizeof v, 0, tag, t, "the largest value");
    return v;
  }
  for (int r = 1; r < comm.size(); ++r) {
    double x = 0;
    recv_exact(comm, &x, sizeof x, r, tag, t, "its value");
    v = std::max(v, x);
  }
  for (int r = 1; r < comm.size(); ++r) comm.send(&v, sizeof v, r, tag, t);
  return v;
}

// One iteration through the seam, as the trainer drives it (see bench_overlap.h).
class Driver {
 public:
  Driver(GradientSync& sync, Comm& workers, std::size_t tensors)
      : sync_(sync), workers_(workers), tensors_(tensors) {}

  // Sync, with `c` overlapped (or before it, for the control); `inside` gets the compute's time.
  double sync(Compute* c = nullptr, double* inside = nullptr) {
    workers_.barrier(workers_.timeout());
    sync_.begin_step(++step_, 0.0f);
    const auto t0 = Clock::now();
    double in = 0;
    if (c && c->posted_after()) in = c->run();
    for (std::size_t i = 0; i < tensors_; ++i) sync_.tensor_ready(i);
    if (c && !c->posted_after()) in = c->run();
    for (std::size_t i = tensors_; i-- > 0;) sync_.wait_params(i);  // forward: first layer first
    sync_.flush();
    const double t = seconds_since(t0);
    if (inside) *inside = in;
    return t;
  }

  double compute_alone(Compute& c) {
    workers_.barrier(workers_.timeout());
    return c.run();
  }

 private:
  GradientSync& sync_;
  Comm& workers_;
  std::size_t tensors_;
  std::int64_t step_ = 0;
};

// A worker's measurements for one size and backend (every worker calls it together).
OverlapSample measure(Driver& d, Comm& workers, const BenchConfig& bc,
                      std::vector<std::unique_ptr<Compute>>& kinds, int tag) {
  // As OSU: the pure communication time first (-w warm-up, then -n timed), its median over the
  // slowest worker the compute's target; then the interleaved rounds.
  for (int i = 0; i < std::max(bc.warmup, 1); ++i) d.sync();
  std::vector<double> pure;
  for (int i = 0; i < bc.iters; ++i) pure.push_back(d.sync());
  const double est = max_over(workers, median(pure), tag);
  for (auto& k : kinds) k->calibrate(est);
  const std::size_t nk = kinds.size();
  std::vector<double> comm;
  std::vector<std::vector<double>> compute(nk), total(nk), inside(nk);
  for (int it = 0; it < bc.iters; ++it) {  // interleaved, so load changes hit all alike
    comm.push_back(d.sync());
    for (std::size_t k = 0; k < nk; ++k) {
      compute[k].push_back(d.compute_alone(*kinds[k]));
      double in = 0;
      total[k].push_back(d.sync(kinds[k].get(), &in));
      inside[k].push_back(in);
    }
  }
  OverlapSample s;
  s.t_comm = median(comm);
  for (std::size_t k = 0; k < nk; ++k) {
    s.t_compute.push_back(median(compute[k]));
    s.t_total.push_back(median(total[k]));
    s.t_inside.push_back(median(inside[k]));
  }
  return s;
}

// "ps-colocated" is the registry's "ps" with --servers colocated.
std::pair<std::string, Config> registry_entry(const std::string& name, const Config& cfg) {
  Config c = cfg;
  if (name == "ps-colocated") {
    c.sync.servers = "colocated";
    return {"ps", c};
  }
  return {name, c};
}

// A --backends name this mode runs: a registry entry, "ps-colocated" or "mpi-nothread".
void check_overlap_backend(const std::string& name) {
  const auto known = BackendRegistry::instance().names();
  if (name == "ps-colocated" || name == "mpi-nothread" ||
      std::find(known.begin(), known.end(), name) != known.end())
    return;
  std::string list;
  for (const auto& n : known) list += n + ", ";
  throw ConfigError("bench --mode overlap: unknown backend '" + name + "' (known: " + list +
                    "ps-colocated, mpi-nothread)");
}

struct RankMeasured {
  std::optional<OverlapSample> sample;  // workers only
  int workers = 0;
  nlohmann::json servers = 0;
};

// What this rank holds in host memory at the largest size at least, over the backends it runs
// (one at a time), for check_bench_host_memory: a worker its parameters and gradients and the
// backend's buffers, a parameter-server shard its parameters, sums, optimizer state and early
// pushes' copies. Peak RSS measured at -e 128M (2026-12-02), in buffers of -e: ring 2.9 a rank;
// ps --servers 1 np 3: workers 3.9, the server 5.0; ps co-located np 2: 4.9; counted a little
// below (2.5, 3.5, 4.5/S, 3.5 + 2/N), as "at least" says. Ranks outside NAME@N hold nothing,
// but every rank checks a ps@N's --servers, so that all refuse it alike.
double overlap_host_bytes(const Config& cfg, const std::vector<std::string>& names, int rank,
                          int size) {
  const double bytes =
      static_cast<double>(largest_bench_size(cfg.bench) / sizeof(float) * sizeof(float));
  double holds = 0;
  for (const auto& name : names) {
    const auto [base_name, n] = split_ranks_suffix(name);
    const int ranks = n == 0 ? size : n;
    const auto [entry, c] = registry_entry(base_name, cfg);
    double buffers = 2.5;
    if (entry == "ps") {
      ps::PsGroup g;
      try {
        g = ps::make_ps_group(c.sync.servers, ranks);
      } catch (const ConfigError& e) {  // as bandwidth mode says it (bench_on_ranks.cc)
        if (n == 0 || n == size) throw;
        throw ConfigError(detail::concat("bench op on the first ", n, " of ", size, " ranks (@", n,
                                         "): ", e.what()));
      }
      buffers = g.is_dedicated_server(rank) ? 4.5 / g.num_servers()
                                            : 3.5 + (g.colocated ? 2.0 / ranks : 0.0);
    }
    if (rank < ranks) holds = std::max(holds, buffers * bytes);  // else it sits out
  }
  return holds;
}

// This rank's part of one size on one backend, on `comm` (the ranks that run it).

RankMeasured run_backend(const std::string& name, const Config& cfg, std::shared_ptr<Comm> comm,
                         std::size_t count, int tag) {
  const auto [entry, c] = registry_entry(name, cfg);
  Backend be;
  if (entry == "mpi-nothread") {
    be.workers = comm;
    be.worker_index = comm->rank();
    be.num_workers = comm->size();
    be.sync = make_nothread_iallreduce(comm, Seconds(cfg.sync.timeout_s));
  } else {
    be = BackendRegistry::instance().create(entry, BackendContext{c, comm, nullptr, nullptr});
  }
  RankMeasured m;
  m.workers = be.num_workers;
  if (entry == "ps")
    m.servers = c.sync.servers == "colocated" ? nlohmann::json("colocated")
                                              : nlohmann::json(std::stoi(c.sync.servers));
  if (be.role == "server") {
    be.serve();  // until the workers shut down
    return m;
  }
  const auto sizes = overlap_tensor_sizes(count);
  ParamLayout layout;
  for (std::size_t t = 0; t < sizes.size(); ++t)
    layout.add("t" + std::to_string(t), {static_cast<int>(sizes[t])});
  // the backends send from and receive into them: kept where a transfer let go on a failure may
  // still use them (common/kept_memory.h)
  ReceiveVector<float> params(count, 0.0f), grads(count);
  for (std::size_t i = 0; i < count; ++i) grads[i] = input_value(be.worker_index, i);
  std::vector<std::unique_ptr<Compute>> kinds;
  for (const auto& k : cfg.bench.compute)
    kinds.push_back(std::make_unique<Compute>(k, cfg.train.threads));
  be.sync->start(layout, SyncBuffers{params.data(), grads.data(), false, nullptr},
                 OptimizerConfig{});
  Driver d(*be.sync, *be.workers, sizes.size());
  try {
    m.sample = measure(d, *be.workers, cfg.bench, kinds, tag);
  } catch (...) {
    // As in Trainer::run: stop the backend while params/grads still exist (a wait that gave up
    // on its own deadline leaves the communication thread inside the all-reduce on them).
    try {
      be.sync->shutdown();
    } catch (...) {  // the first error is the one to report
    }
    throw;
  }
  be.sync->shutdown();
  return m;
}

std::vector<double> flatten(const std::optional<OverlapSample>& s, std::size_t kinds) {
  std::vector<double> v(2 + 3 * kinds, 0.0);
  if (!s) return v;
  v[0] = 1;
  v[1] = s->t_comm;
  for (std::size_t k = 0; k < kinds; ++k) {
    v[2 + 3 * k] = s->t_compute[k];
    v[3 + 3 * k] = s->t_total[k];
    v[4 + 3 * k] = s->t_inside[k];
  }
  return v;
}

std::vector<OverlapSample> unflatten(const std::vector<std::vector<double>>& all,
                                     std::size_t kinds) {
  std::vector<OverlapSample> out;
  for (const auto& v : all) {
    if (v[0] == 0) continue;  // not a worker
    OverlapSample s;
    s.t_comm = v[1];
    for (std::size_t k = 0; k < kinds; ++k) {
      s.t_compute.push_back(v[2 + 3 * k]);
      s.t_total.push_back(v[3 + 3 * k]);
      s.t_inside.push_back(v[4 + 3 * k]);
    }
    out.push_back(std::move(s));
  }
  return out;
}

void print_header(const Config& cfg, int np) {
  std::printf(
      "#\n# starring bench --mode overlap: through GradientSync, post (tensor_ready every tensor), "
      "compute, wait (wait_params, flush); np %d, --overlap %s, bucket %.4g MiB%s\n",
      np, cfg.sync.overlap ? "on" : "off", cfg.sync.bucket_mb,
      cfg.sync.compress == "none" ? "" : (", --compress " + cfg.sync.compress).c_str());
  std::printf("#  %12s %-18s %-7s %12s %13s %12s %10s\n", "size(B)", "backend", "compute",
              "t_comm(us)", "t_compute(us)", "t_total(us)", "overlap(%)");
}

void print_row(const OverlapRow& r, const Config& cfg, const nlohmann::json& hosts) {
  std::printf("   %12zu %-18s %-7s %12.1f %13.1f %12.1f %10.1f\n", r.bytes, r.backend.c_str(),
              r.compute.c_str(), r.t_comm_us, r.t_compute_us, r.t_total_us, r.overlap_pct);
  if (!cfg.bench.json) return;
  nlohmann::json j = to_json(r);  // labelled as bandwidth rows are (bench_harness.cc)
  if (cfg.sync.compress != "none") j["compress"] = cfg.sync.compress;
  if (!cfg.out.run_name.empty()) j["run_name"] = cfg.out.run_name;
  j.update(hosts);  // host by host, as bandwidth rows say it: the sweep's time-shared marks
  std::printf("%s\n", j.dump().c_str());
}

void print_footer(const std::vector<std::string>& names, const std::vector<std::string>& kinds,
                  const std::vector<OverlapRow>& rows) {
  for (const auto& n : names)
    for (const auto& k : kinds) {
      double sum = 0;
      int cnt = 0;
      for (const auto& r : rows)
        if (r.backend == n && r.compute == k) sum += r.overlap_pct, ++cnt;
      std::printf("#  %-18s %-7s Avg overlap : %5.1f %%\n", n.c_str(), k.c_str(),
                  sum / std::max(cnt, 1));
    }
  std::printf(
      "#  overlap = 100 * (1 - (t_total - t_compute) / t_comm), clamped to 0..100 (OSU's "
      "formula); medians over -n iterations, then means over workers\n"
      "#  sleep: the training thread sleeps (a GPU kernel, seen from the host); busy: it "
      "multiplies matrices (CPU training);\n"
      "#  serial: the control - the sleep, then post: nothing can overlap, so it must read "
      "~0\n#\n");
  std::fflush(stdout);
}

}  // namespace

double overlap_percent(double t_comm, double t_compute, double t_total) {
  if (!(t_comm > 0)) return 0.0;
  const double pct = 100.0 * (1.0 - (t_total - t_compute) / t_comm);
  return std::clamp(pct, 0.0, 100.0);
}

std::vector<std::size_t> overlap_tensor_sizes(std::size_t count) {
  STARRING_CHECK(count > 0, "overlap bench: a buffer of 0 floats");
  const std::size_t n = std::min<std::size_t>(4, count), each = count / n;
  std::vector<std::size_t> sizes(n, each);
  sizes.back() += count - each * n;
  return sizes;
}

nlohmann::json to_json(const OverlapRow& r) {
  return {{"bench", "overlap"},
          {"backend", r.backend},
          {"compute", r.compute},
          {"np", r.np},
          {"workers", r.workers},
          {"servers", r.servers},
          {"sync_overlap", r.sync_overlap},
          {"size", r.bytes},
          {"count", r.count},
          {"tensors", r.tensors},
          {"iters", r.iters},
          {"t_comm_us", r.t_comm_us},
          {"t_compute_us", r.t_compute_us},
          {"t_total_us", r.t_total_us},
          {"t_inside_us", r.t_inside_us},
          {"overlap_pct", r.overlap_pct}};
}

std::vector<OverlapRow> overlap_rows(const OverlapRow& base, const std::vector<std::string>& kinds,
                                     const std::vector<OverlapSample>& workers) {
  std::vector<OverlapRow> rows;
  const double nw = std::max<std::size_t>(workers.size(), 1);
  double comm = 0;
  for (const auto& s : workers) comm += s.t_comm / nw;
  for (std::size_t k = 0; k < kinds.size(); ++k) {
    OverlapRow r = base;
    r.compute = kinds[k];
    double compute = 0, total = 0, inside = 0;
    for (const auto& s : workers) {
      compute += s.t_compute.at(k) / nw;
      total += s.t_total.at(k) / nw;
      inside += s.t_inside.at(k) / nw;
    }
    r.t_comm_us = comm * 1e6;
    r.t_compute_us = compute * 1e6;
    r.t_total_us = total * 1e6;
    r.t_inside_us = inside * 1e6;
    r.overlap_pct = overlap_percent(comm, compute, total);
    rows.push_back(std::move(r));
  }
  return rows;
}

std::vector<OverlapRow> run_overlap_bench(const Config& cfg, std::shared_ptr<Comm> world,
                                          const std::function<void()>& checked) {
  const BenchConfig& bc = cfg.bench;
  STARRING_CONFIG_CHECK(bc.factor >= 2 && bc.min_bytes >= 4 && bc.min_bytes <= bc.max_bytes &&
                            bc.iters >= 1 && !bc.compute.empty(),
                        "bench --mode overlap: need -f >= 2, 4 <= -b <= -e, -n >= 1 and a "
                        "--compute kind");
  std::vector<std::string> names = bc.backends;
  if (names.empty()) names.push_back(cfg.sync.backend == "local" ? "ring" : cfg.sync.backend);
  for (const auto& name : names) {  // all checked before the table's header is printed
    const auto [base_name, n] = split_ranks_suffix(name);
    check_overlap_backend(base_name);
    STARRING_CONFIG_CHECK(n <= world->size(), "bench backend '", name, "' on ", n,
                          " ranks, but only ", world->size(), " were started");
  }
  check_bench_host_memory(*world, overlap_host_bytes(cfg, names, world->rank(), world->size()),
                          bc.max_bytes);
  if (checked) checked();
  const bool leader = world->rank() == 0;
  if (leader) print_header(cfg, world->size());
  std::vector<OverlapRow> rows;
  int tag = kTagBase;
  const nlohmann::json hosts = job_hosts(*world, ++tag);
  for (std::size_t bytes = bc.min_bytes; bytes <= bc.max_bytes; bytes *= bc.factor) {
    const std::size_t count = bytes / sizeof(float);
    for (const auto& name : names) {
      const auto [base_name, n] = split_ranks_suffix(name);
      RankMeasured m;
      if (n == 0 || n == world->size()) {
        m = run_backend(base_name, cfg, world, count, ++tag);
      } else if (world->rank() < n) {
        std::vector<int> members(n);
        for (int r = 0; r < n; ++r) members[r] = r;
        m = run_backend(base_name, cfg, std::make_shared<SubComm>(world, members), count, ++tag);
      } else {
        ++tag;  // sits out
      }
      auto all = gather_to_root(*world, flatten(m.sample, bc.compute.size()), ++tag);
      // Ranks that sat out a NAME@N backend wait here for its members: the next backend's set-up
      // (a PS init, bounded by --timeout) must not start while they are still measuring.
      world->barrier(Seconds(std::max(world->timeout().count(), 600.0)));
      if (!leader) continue;
      OverlapRow base;
      base.backend = name;
      base.np = world->size();
      base.workers = m.workers;
      base.servers = m.servers;
      base.sync_overlap = cfg.sync.overlap;
      base.bytes = count * sizeof(float);
      base.count = count;
      base.tensors = static_cast<int>(overlap_tensor_sizes(count).size());
      base.iters = bc.iters;
      for (auto& r : overlap_rows(base, bc.compute, unflatten(all, bc.compute.size()))) {
        print_row(r, cfg, hosts);
        rows.push_back(std::move(r));
      }
      std::fflush(stdout);
    }
    if (bytes > bc.max_bytes / bc.factor) break;  // the next size would pass -e (or overflow)
  }
  if (leader) print_footer(names, bc.compute, rows);
  return rows;
}

}  // namespace starring
