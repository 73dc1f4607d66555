// finalize_config: resolves the model preset into hidden widths and checks every value that can
// be checked without data, so a bad option fails before any rank starts work. Every check throws
// one ConfigError line of the form "--option: what is wrong (got VALUE)". Also the text-to-value
// conversions the parser uses (sizes with K/M/G suffixes, comma lists, on/off).
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <limits>
#include <sstream>
#include <type_traits>

#include "common/blas_kernels.h"
#include "common/config.h"
#include "common/config_detail.h"
#include "common/error.h"
#include "common/fault.h"

namespace starring {
namespace {

std::string lower(std::string s) {
  for (auto& ch : s) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  return s;
}

std::string strip(const std::string& s) {
  auto b = s.find_first_not_of(" \t");
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(" \t") - b + 1);
}

bool parse_int64(const std::string& s, std::int64_t& out) {
  if (s.empty()) return false;
  std::size_t pos = 0;
  try {
    out = std::stoll(s, &pos);
  } catch (const std::exception&) {
    return false;
  }
  return pos == s.size();
}

void check_choice(const char* option, const std::string& value,
                  std::initializer_list<const char*> choices) {
  std::string all;
  for (const char* c : choices) {
    if (value == c) return;
    if (!all.empty()) all += " | ";
    all += c;
  }
  throw ConfigError(detail::concat(option, ": '", value, "' is not one of ", all));
}

// A refused value as the user gave it: a floating-point one by format_number (the stream's 6
// digits printed 1000000.1 as 1e+06, inside the range the line names).
template <typename T>
std::string as_given(const T& v) {
  if constexpr (std::is_floating_point_v<T>) {
    return format_number(v);
  } else {
    return detail::concat(v);
  }
}

template <typename T>
void check(bool ok, const char* option, const char* rule, const T& got) {
  if (!ok)
    throw ConfigError(detail::concat(option, ": must be ", rule, " (got ", as_given(got), ")"));
}

// Beyond these a value overflows where it is converted (a timeout into a clock deadline in
// nanoseconds, a bucket into bytes): 'inf' or 1e10 s timed out at once.
constexpr double kMaxTimeoutS = 1e6;      // 11.6 days
constexpr double kMaxBucketMb = 1 << 20;  // 1 TiB

// "A:B" or "A:B:C" where the listed parts (1-based) are integers >= 0.
void check_colon_spec(const char* option, const std::string& spec, std::size_t parts,
                      std::size_t first_int, const char* form) {
  if (spec.empty()) return;
  std::vector<std::string> p;
  std::stringstream ss(spec);
  for (std::string item; std::getline(ss, item, ':');) p.push_back(item);
  bool ok = p.size() == parts;
  for (std::size_t i = first_int; ok && i < p.size(); ++i) {
    std::int64_t v = 0;
    ok = parse_int64(p[i], v) && v >= 0;
  }
  if (!ok) throw ConfigError(detail::concat(option, ": expected ", form, " (got '", spec, "')"));
}

// "default" also yields to widths set in code: a Config whose hidden widths were changed from the
// default ones (without touching the preset) is a custom model, not a default one.
void resolve_preset(ModelConfig& m) {
  check_choice("--preset", m.preset, {"default", "wide", "custom"});
  if (m.preset == "default" && m.hidden != preset_hidden("default")) m.preset = "custom";
  if (m.preset != "custom") m.hidden = preset_hidden(m.preset);
}

void check_model(const Config& c) {
  const auto& h = c.model.hidden;
  if (h.empty()) throw ConfigError("--hidden: at least one hidden width is needed");
  const bool synthetic = c.data.dataset == "synthetic";
  int in = synthetic ? c.data.synthetic_dim : 784;
  int out = synthetic ? c.data.synthetic_classes : 10;
  double params = 0;
  int prev = in;
  for (std::size_t i = 0; i < h.size(); ++i) {
    if (h[i] <= 0)
      throw ConfigError(detail::concat("--hidden: width ", i + 1, " must be > 0 (got ", h[i], ")"));
    params += double(prev) * h[i] + h[i];
    prev = h[i];
  }
  params += double(prev) * out + out;
  if (params > double(std::numeric_limits<std::int32_t>::max()))
    throw ConfigError(detail::concat("--hidden: ", join_ints(h), " gives ", params,
                                     " parameters (over 2^31, 8 GiB of floats)"));
  // A rank holds about five float copies of the model (weights, gradients, optimizer state,
  // bucket and staging buffers: 20 bytes a parameter measured with sgd on the wide preset, 24
  // with adamw); beyond memory the kernel's OOM killer ended the run with no word.
  const double memory = physical_memory_bytes(), need = 20.0 * params;
  if (memory > 0 && need > memory)
    throw ConfigError(detail::concat("--hidden: ", join_ints(h), " gives ", params,
                                     " parameters, about ", std::round(need / (1 << 30) * 10) / 10,
                                     " GiB per rank: more than this machine's memory (",
                                     std::round(memory / (1 << 30) * 10) / 10, " GiB)"));
}

void check_data(const DataConfig& d) {
  check_choice("--dataset", d.dataset, {"fashion-mnist", "mnist", "synthetic"});
  check(d.synthetic_train > 0, "--synthetic-train", "> 0", d.synthetic_train);
  check(d.synthetic_test > 0, "--synthetic-test", "> 0", d.synthetic_test);
  check(d.synthetic_dim > 0, "--synthetic-dim", "> 0", d.synthetic_dim);
  check(d.synthetic_classes >= 2, "--synthetic-classes", ">= 2", d.synthetic_classes);
  // Both are read from --data-dir by the same file names: with the default folder (Debian's
  // Fashion-MNIST) "--dataset mnist" trained on Fashion-MNIST and reported it as MNIST.
  if (d.dataset == "mnist" && d.data_dir == DataConfig{}.data_dir)
    throw ConfigError(detail::concat("--dataset mnist: give --data-dir, the folder of MNIST's ",
                                     "IDX files (the default, ", d.data_dir,
                                     ", holds Fashion-MNIST)"));
  if (d.dataset != "synthetic") return;
  // Made as one set of train + test samples (an int count): past 2^31 - 1 the count wrapped
  // negative ("bad shape n=-2147483393"). Each rank holds the samples about twice (the train and
  // test copies keep the whole set's capacity); beyond memory the OOM killer ended the run.
  const double n = double(d.synthetic_train) + d.synthetic_test;
  if (n > std::numeric_limits<std::int32_t>::max())
    throw ConfigError(detail::concat("--synthetic-train + --synthetic-test: ",
                                     static_cast<long long>(n), " samples, more than 2^31 - 1"));
  const double memory = physical_memory_bytes(), need = 2.0 * n * (d.synthetic_dim + 1) * 4;
  if (memory > 0 && need > memory)
    throw ConfigError(detail::concat(
        "--synthetic-train + --synthetic-test: ", static_cast<long long>(n), " samples of ",
        d.synthetic_dim, " floats need about ", std::round(need / (1 << 30) * 10) / 10,
        " GiB per rank: more than this machine's memory (",
        std::round(memory / (1 << 30) * 10) / 10, " GiB)"));
}

void check_train(const TrainConfig& t) {
  check(t.epochs > 0, "--epochs", "> 0", t.epochs);
  check(t.max_steps == -1 || t.max_steps > 0, "--max-steps", "> 0 or -1", t.max_steps);
  check(t.untimed_steps >= 0, "--untimed-steps", ">= 0", t.untimed_steps);
  check(t.batch > 0, "--batch", "> 0", t.batch);
  check(t.accum > 0, "--accum", "> 0", t.accum);
  check(std::isfinite(t.lr) && t.lr > 0, "--lr", "finite and > 0", t.lr);
  check_choice("--lr-scale", t.lr_scale, {"none", "linear", "sqrt"});
  check(t.warmup_steps >= 0, "--warmup-steps", ">= 0", t.warmup_steps);
  check_choice("--lr-schedule", t.lr_schedule, {"constant", "cosine"});
  check_choice("--optimizer", t.opt.type, {"sgd", "adamw"});
  check(t.opt.momentum >= 0 && t.opt.momentum < 1, "--momentum", "in [0, 1)", t.opt.momentum);
  check(std::isfinite(t.opt.weight_decay) && t.opt.weight_decay >= 0, "--weight-decay",
        "finite and >= 0", t.opt.weight_decay);
  check(t.opt.beta1 >= 0 && t.opt.beta1 < 1, "--beta1", "in [0, 1)", t.opt.beta1);
  check(t.opt.beta2 >= 0 && t.opt.beta2 < 1, "--beta2", "in [0, 1)", t.opt.beta2);
  check(std::isfinite(t.opt.eps) && t.opt.eps > 0, "--eps", "finite and > 0", t.opt.eps);
  check_choice("--device", t.device, {"cpu", "cuda", "auto"});
  check(t.threads > 0, "--threads", "> 0", t.threads);
  // Beyond this OpenBLAS's own limit the count was capped without a word (--threads 100 ran 64).
  if (const int most = blas_max_threads(); most > 0)
    check(t.threads <= most, "--threads",
          detail::concat("between 1 and ", most, " (this OpenBLAS's MAX_THREADS)").c_str(),
          t.threads);
  check_colon_spec("--straggler", t.straggler, 2, t.straggler.rfind("any:", 0) == 0 ? 1 : 0,
                   "RANK:MS or any:MS");
  check_colon_spec("--fault", t.fault, 3, 1, "kill:RANK:STEP, hang:RANK:STEP or stop:RANK:STEP");
  if (!t.fault.empty())
    check_choice("--fault", t.fault.substr(0, t.fault.find(':')), {"kill", "hang", "stop"});
  // The readers' own rule (parse_fault, common/fault.h), here too: the check above (std::stoll)
  // also takes ' 1' and '+1', which parse_fault refused later, in the preflight.
  (void)parse_fault(t.fault);
}

void check_sync(const SyncConfig& s) {
  if (s.backend.empty()) throw ConfigError("--backend: must name a backend (e.g. local, ring, ps)");
  check(s.timeout_s > 0 && s.timeout_s <= kMaxTimeoutS, "--timeout", "> 0 and at most 1e6 seconds",
        s.timeout_s);
  check(s.bucket_mb > 0 && s.bucket_mb <= kMaxBucketMb, "--bucket-mb",
        "> 0 and at most 1048576 (1 TiB)", s.bucket_mb);
  check_choice("--compress", s.compress, {"none", "fp16", "bf16"});
  // The ring's own minimum (allreduce/ring_allreduce.cc): below it the ring refused at start-up
  // with exit 1, after the option had been accepted. Above 1 GiB (as --ps-chunk-bytes) a segment
  // of a large enough buffer overflowed MPI's int count at send time, naming no option.
  check(s.segment_bytes >= 64 && s.segment_bytes <= (std::size_t{1} << 30), "--segment-bytes",
        "between 64 and 1G", format_bytes(s.segment_bytes));
  // The parameter server's own bounds (ps/ps_worker.cc): above 1 GiB a worker refused it only
  // once training had started, while a dedicated server failed on a message too large for MPI.
  check(s.ps_chunk_bytes >= sizeof(float) && s.ps_chunk_bytes <= (std::size_t{1} << 30),
        "--ps-chunk-bytes", "between 4 and 1G", format_bytes(s.ps_chunk_bytes));
  std::int64_t servers = 0;
  if (s.servers != "colocated" && !(parse_int64(s.servers, servers) && servers > 0))
    throw ConfigError(
        detail::concat("--servers: must be a number > 0 or 'colocated' (got '", s.servers, "')"));
  check_choice("--ps-partition", s.ps_partition, {"range", "tensor"});
  check_choice("--consistency", s.consistency, {"bsp", "asp", "ssp"});
  check(s.staleness >= 0, "--staleness", ">= 0", s.staleness);
}

// A live worker's long step is waited for (its sleep counts as work: common/thread_pulse.h) under
// ps (bsp, asp, ssp: heartbeats) and the collective backends whose waits ask the trainer's
// PeerWatch (ring, ring-p2p, mpi, nccl: common/peer_liveness.h), up to the range of --timeout
// itself. Under local a delay of --timeout or more is refused: it has no peer to wait for it
// (alone, 0:99999999999 slept for three years).
void check_straggler_delay(const std::string& spec, const SyncConfig& s) {
  if (spec.empty()) return;
  std::int64_t ms = 0;
  parse_int64(spec.substr(spec.find(':') + 1), ms);  // the format is already checked
  const bool waited = s.backend != "local";
  if (waited && double(ms) > 1e9)
    throw ConfigError(
        detail::concat("--straggler ", spec, ": a delay of ", ms, " ms per step is above 10^6 s"));
  if (!waited && double(ms) >= s.timeout_s * 1000)
    throw ConfigError(detail::concat(
        "--straggler ", spec, ": a delay of ", ms, " ms per step must be shorter than --timeout (",
        s.timeout_s, " s): backend '", s.backend,
        "' does not wait for a longer step (it has no peer to wait for "
        "it; the other backends do)"));
}

void check_checkpoint(const CheckpointConfig& k) {
  check(k.every >= 0, "--checkpoint-every", ">= 0", k.every);
  check(k.keep >= 1, "--keep-checkpoints", ">= 1", k.keep);
  if (k.every > 0 && k.dir.empty())
    throw ConfigError("--checkpoint-every: needs --checkpoint-dir (where to write them)");
  if ((k.resume == "latest" || k.resume == "auto") && k.dir.empty())
    throw ConfigError("--resume " + k.resume +
                      ": needs --checkpoint-dir (where to look for checkpoints)");
}

void check_bench(const BenchConfig& b) {
  // -b 1..3 passed here and the harness refused it later in other words ("-b/-e: need 4 <= min
  // bytes <= max bytes"); a row is whole float32 values (nccl-tests' count = size / 4)
  check(b.min_bytes >= sizeof(float), "-b/--min-bytes", ">= 4 (one float32 value)", b.min_bytes);
  if (b.max_bytes < b.min_bytes)  // both named, in the short forms users type too
    throw ConfigError(detail::concat("-e/--max-bytes ", format_bytes(b.max_bytes),
                                     " is below -b/--min-bytes ", format_bytes(b.min_bytes),
                                     ": the sizes run from -b up to -e"));
  check(b.factor >= 2, "--factor", ">= 2", b.factor);
  check(b.iters > 0, "--iters", "> 0", b.iters);
  check(b.warmup >= 0, "--warmup", ">= 0", b.warmup);
  check(b.check == 0 || b.check == 1, "--check", "0 or 1 (off or on, nccl-tests' -c <0/1>)",
        b.check);
  check_choice("--mode", b.mode, {"bandwidth", "overlap"});
  // a name twice ran twice under one name: the footer printed its line twice, each with the
  // out-of-bounds count and average busbw of both runs' rows together
  for (std::size_t i = 0; i < b.backends.size(); ++i)
    for (std::size_t j = 0; j < i; ++j)
      if (b.backends[i] == b.backends[j])
        throw ConfigError(detail::concat("--backends: '", b.backends[i],
                                         "' is listed twice (its rows would share one name)"));
  for (const auto& c : b.compute) check_choice("--compute", c, {"sleep", "busy", "serial"});
}

}  // namespace

double physical_memory_bytes() {
  const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGESIZE);
  return pages > 0 && page > 0 ? double(pages) * double(page) : 0.0;
}

std::vector<int> preset_hidden(const std::string& preset) {
  if (preset == "default") return {256, 128};
  if (preset == "wide") return {4096, 4096};  // 784*4096 + 4096*4096 + 4096*10 + biases: ~20.0M
  return {};
}

std::size_t parse_bytes(const std::string& option, const std::string& text) {
  std::string t = lower(strip(text));
  auto bad = [&] {
    return ConfigError(
        detail::concat(option, ": '", text, "' is not a byte size (e.g. 4096, 4K, 1M, 64M, 1G)"));
  };
  if (t.size() > 2 && t.compare(t.size() - 2, 2, "ib") == 0) {
    t.resize(t.size() - 2);  // "1MiB"
  } else if (t.size() > 1 && t.back() == 'b') {
    t.pop_back();  // "1MB", "4096B"
  }
  std::uint64_t mult = 1;
  if (!t.empty() && std::string("kmg").find(t.back()) != std::string::npos) {
    mult = t.back() == 'k' ? 1ull << 10 : t.back() == 'm' ? 1ull << 20 : 1ull << 30;
    t.pop_back();
  }
  std::int64_t v = 0;
  // digits past 64 bits are a size, too large, not "not a byte size" ('-e 99999999999G')
  const auto too_large = [&] {
    return ConfigError(detail::concat(option, ": '", text, "' is too large a byte size"));
  };
  const bool digits = !t.empty() && t.find_first_not_of("0123456789") == std::string::npos;
  if (!parse_int64(t, v)) throw digits ? too_large() : bad();
  if (v < 0) throw bad();
  if (std::uint64_t(v) > std::numeric_limits<std::uint64_t>::max() / mult) throw too_large();
  return static_cast<std::size_t>(std::uint64_t(v) * mult);
}

namespace {
// Plain digits where a person writes them (2000000, 0.0005: to_chars' shortest form is
// scientific whenever that is shorter, 2e+06), scientific only outside [1e-4, 1e15) (1e-08).
template <typename T>
std::string shortest(T v) {
  char buf[64];
  const T a = std::abs(v);
  const bool plain = a == 0 || (a >= T(1e-4) && a < T(1e15));
  const auto fmt = plain ? std::chars_format::fixed : std::chars_format::general;
  return std::string(buf, std::to_chars(buf, buf + sizeof buf, v, fmt).ptr);
}
}  // namespace
std::string format_number(float v) { return shortest(v); }
std::string format_number(double v) { return shortest(v); }

std::string format_bytes(std::size_t bytes) {
  const char* units[] = {"G", "M", "K"};
  const std::size_t sizes[] = {1ull << 30, 1ull << 20, 1ull << 10};
  for (int i = 0; i < 3; ++i)
    if (bytes >= sizes[i] && bytes % sizes[i] == 0)
      return std::to_string(bytes / sizes[i]) + units[i];
  return std::to_string(bytes);
}

std::vector<std::string> split_list(const std::string& option, const std::string& text) {
  std::vector<std::string> out;
  std::stringstream ss(text);
  for (std::string item; std::getline(ss, item, ',');) {
    item = strip(item);
    if (item.empty())
      throw ConfigError(detail::concat(option, ": empty entry in list '", text, "'"));
    out.push_back(item);
  }
  if (out.empty() || text.back() == ',')
    throw ConfigError(detail::concat(option, ": empty entry in list '", text, "'"));
  return out;
}

std::vector<int> parse_int_list(const std::string& option, const std::string& text) {
  std::vector<int> out;
  for (const auto& item : split_list(option, text)) {
    // an optional sign, then digits: an integer, however many digits
    const std::size_t sign = item[0] == '-' || item[0] == '+' ? 1 : 0;
    const bool integer =
        item.size() > sign && item.find_first_not_of("0123456789", sign) == std::string::npos;
    if (!integer)
      throw ConfigError(
          detail::concat(option, ": '", item, "' is not an integer (in '", text, "')"));
    std::int64_t v = 0;
    if (!parse_int64(item, v) || v < std::numeric_limits<int>::min() ||
        v > std::numeric_limits<int>::max())
      throw ConfigError(detail::concat(
          option, ": '", item, "' is out of an int's range (",
          item[0] == '-' ? "at least " : "at most ",
          item[0] == '-' ? std::numeric_limits<int>::min() : std::numeric_limits<int>::max(),
          "; in '", text, "')"));
    out.push_back(static_cast<int>(v));
  }
  return out;
}

std::string join_ints(const std::vector<int>& v) {
  std::string s;
  for (std::size_t i = 0; i < v.size(); ++i) {
    if (i) s += ',';
    s += std::to_string(v[i]);
  }
  return s;
}

bool parse_on_off(const std::string& option, const std::string& text) {
  std::string t = lower(strip(text));
  if (t == "on" || t == "true" || t == "yes" || t == "1") return true;
  if (t == "off" || t == "false" || t == "no" || t == "0") return false;
  throw ConfigError(detail::concat(option, ": '", text, "' is not one of on | off"));
}

void finalize_config(Config& cfg) {
  resolve_preset(cfg.model);
  check_data(cfg.data);
  check_model(cfg);
  check_train(cfg.train);
  check_sync(cfg.sync);
  check_straggler_delay(cfg.train.straggler, cfg.sync);
  check_bench(cfg.bench);
  check_checkpoint(cfg.ckpt);
  check(cfg.out.log_every > 0, "--log-every", "> 0", cfg.out.log_every);
  check_choice("--progress", cfg.out.progress, {"auto", "bar", "lines", "off"});
  check_choice("--metrics-loss", cfg.out.metrics_loss, {"all", "worker0"});
}

}  // namespace starring
