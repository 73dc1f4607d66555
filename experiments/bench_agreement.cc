#include "experiments/bench_agreement.h"

#include <cmath>
#include <iomanip>
#include <map>
#include <sstream>

#include "common/census.h"
#include "common/comm_util.h"
#include "common/config_detail.h"
#include "common/error.h"
#include "common/gpu_assignment.h"

namespace starring {

using detail::concat;

namespace {

std::string join(const std::vector<std::string>& v) {
  std::string out;
  for (const auto& s : v) out += (out.empty() ? "" : ",") + s;
  return out;
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::stringstream ss(text);
  for (std::string line; std::getline(ss, line);) out.push_back(line);
  return out;
}

// "name\tvalue" -> {name, value}
std::pair<std::string, std::string> split_line(const std::string& line) {
  const auto tab = line.find('\t');
  if (tab == std::string::npos) return {line, ""};
  return {line.substr(0, tab), line.substr(tab + 1)};
}

// Agrees on `mine` (a ConfigError's message on the rank that found it, else empty): every rank
// throws the lowest failing rank's.
void agree(Comm& world, const std::string& mine, int tag) {
  const std::string first =
      first_error(world, mine.empty() ? "" : "C" + mine, tag, world.timeout());
  if (!first.empty()) throw_failure(first[0], first.substr(1));
}

// GiB to one decimal, or to as many as tell `bytes` from `other` (up to 3): "23.6 GiB, more than
// its memory (23.6 GiB)" read as a contradiction. Closer than that (under about 0.0005 GiB
// apart): whole bytes.
std::string gib(double bytes, double other) {
  int digits = 1;
  const auto at = [](double b, int d) { return std::round(b / (1 << 30) * std::pow(10, d)); };
  while (digits < 3 && at(bytes, digits) == at(other, digits)) ++digits;
  std::ostringstream s;
  if (at(bytes, digits) == at(other, digits)) {
    s << std::fixed << std::setprecision(0) << bytes << " bytes";
    return s.str();
  }
  s << std::fixed << std::setprecision(digits) << bytes / (1 << 30);
  std::string t = s.str();  // always has a '.': 54.0 -> 54, 23.60 -> 23.6
  t.erase(t.find_last_not_of('0') + 1);
  if (t.back() == '.') t.pop_back();
  return t + " GiB";
}

}  // namespace

std::vector<std::string> bench_schedule(const Config& cfg) {
  const BenchConfig& b = cfg.bench;
  const SyncConfig& s = cfg.sync;
  std::vector<std::string> names = b.backends;  // as the harness resolves them
  if (names.empty()) names.push_back(s.backend == "local" ? "ring" : s.backend);
  std::ostringstream bucket;
  bucket << s.bucket_mb;
  const std::vector<std::pair<std::string, std::string>> fields{
      {"-b/--min-bytes", format_bytes(b.min_bytes)},
      {"-e/--max-bytes", format_bytes(b.max_bytes)},
      {"-f/--factor", std::to_string(b.factor)},
      {"-n/--iters", std::to_string(b.iters)},
      {"-w/--warmup", std::to_string(b.warmup)},
      {"-c/--check", std::to_string(b.check)},
      {"--mode", b.mode},
      {"--backends", join(names)},
      {"--compute", join(b.compute)},
      {"--compress", s.compress},
      {"--segment-bytes", format_bytes(s.segment_bytes)},
      {"--nccl-force-ring", s.nccl_force_ring ? "true" : "false"},
      {"--bucket-mb", bucket.str()},
      {"--overlap", s.overlap ? "on" : "off"},
      {"--servers", s.servers},
      {"--ps-partition", s.ps_partition},
      {"--ps-chunk-bytes", format_bytes(s.ps_chunk_bytes)},
      {"--ps-shared-memory", s.ps_shared_memory ? "on" : "off"},
      {"--consistency", s.consistency},
      {"--staleness", std::to_string(s.staleness)}};
  std::vector<std::string> out;
  for (const auto& [name, value] : fields) out.push_back(name + "\t" + value);
  return out;
}

void agree_on_bench_options(const Config& cfg, Comm& world) {
  if (world.size() < 2) return;
  const std::vector<std::string> mine = bench_schedule(cfg);
  std::string text;
  for (const auto& line : mine) text += line + "\n";
  const Seconds timeout = world.timeout();
  std::string problem;
  if (world.rank() == 0) {
    for (int r = 1; r < world.size(); ++r) send_text(world, text, r, tags::kBenchOptions, timeout);
  } else {
    const std::vector<std::string> theirs = lines_of(
        recv_text(world, 0, tags::kBenchOptions, timeout, kMaxNoteBytes, "rank 0's bench options"));
    for (std::size_t i = 0; i < mine.size() && problem.empty(); ++i) {
      const auto [name, value] = split_line(mine[i]);
      const std::string other = i < theirs.size() ? split_line(theirs[i]).second : "(none)";
      if (value != other)
        problem = concat("bench options differ between ranks: rank ", world.rank(), " was given ",
                         name, " ", value, ", rank 0 ", other,
                         " (every rank must run the same sizes, iterations and backends: give "
                         "every rank the same options)");
    }
  }
  agree(world, problem, tags::kBenchOptions + 1);
}

std::string host_memory_problem(const std::vector<RankMemory>& ranks, std::size_t max_bytes) {
  std::map<std::string, std::vector<int>> by_host;  // its ranks, in order
  std::vector<std::string> hosts;                   // in the order of their lowest rank
  for (std::size_t r = 0; r < ranks.size(); ++r) {
    auto& members = by_host[ranks[r].host];
    if (members.empty()) hosts.push_back(ranks[r].host);
    members.push_back(static_cast<int>(r));
  }
  for (const auto& host : hosts) {
    const std::vector<int>& members = by_host[host];
    double holds = 0;
    for (int r : members) holds += ranks[r].holds;
    const double memory = ranks[members.front()].host_memory;
    if (memory <= 0 || holds <= memory) continue;
    return concat("--max-bytes ", format_bytes(max_bytes), ": the ", members.size(),
                  members.size() == 1 ? " rank" : " ranks", " on host ", host, " (",
                  rank_list(members), ") hold at least ", gib(holds, memory),
                  " together at that size (each worker its input, its result and the "
                  "backend's buffer; a parameter server its shard's parameters and sums), more "
                  "than its memory (",
                  gib(memory, holds), "): give a smaller -e or start fewer ranks on that host");
  }
  return "";
}

void check_bench_host_memory(Comm& world, double holds, std::size_t max_bytes) {
  const Seconds timeout = world.timeout();
  std::ostringstream note;
  note.precision(17);
  note << this_host_name() << "\n" << physical_memory_bytes() << "\n" << holds << "\n";
  std::string problem;
  if (world.rank() != 0) {
    send_text(world, note.str(), 0, tags::kBenchMemory, timeout);
  } else {
    std::vector<RankMemory> ranks;
    for (int r = 0; r < world.size(); ++r) {
      const std::vector<std::string> f =
          lines_of(r == 0 ? note.str()
                          : recv_text(world, r, tags::kBenchMemory, timeout, kMaxNoteBytes,
                                      "its host and memory"));
      STARRING_CHECK(f.size() == 3, world.where(), ": rank ", r, " sent ", f.size(),
                     " lines for its host and memory, expected 3");
      ranks.push_back({f[0], std::stod(f[1]), std::stod(f[2])});
    }
    problem = host_memory_problem(ranks, max_bytes);
  }
  agree(world, problem, tags::kBenchMemory + 1);
}

}  // namespace starring
