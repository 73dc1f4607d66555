// Checkpoint files: encoding, verification, atomic writes, rotation (see checkpoint.h).
#include "trainer/checkpoint.h"

#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <system_error>

#include "common/error.h"
#include "common/file_kind.h"
#include "trainer/checkpoint_fields.h"

namespace starring {
namespace fs = std::filesystem;
namespace {

constexpr char kMagic[8] = {'S', 'T', 'A', 'R', 'C', 'K', 'P', 'T'};
constexpr std::size_t kHeaderBytes = 24;  // magic, version, reserved, meta length
constexpr char kPrefix[] = "ckpt-";
constexpr char kSuffix[] = ".ckpt";

std::uint32_t crc_of(const char* p, std::size_t n) {
  return static_cast<std::uint32_t>(
      crc32_z(0L, reinterpret_cast<const Bytef*>(p), static_cast<z_size_t>(n)));
}

template <typename T>
void put(std::string& out, const T& v) {
  out.append(reinterpret_cast<const char*>(&v), sizeof v);
}
template <typename T>
T get(const std::string& in, std::size_t at) {
  T v;
  std::memcpy(&v, in.data() + at, sizeof v);
  return v;
}
void put_floats(std::string& out, const std::vector<float>& v) {
  out.append(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float));
}
std::vector<float> get_floats(const std::string& in, std::size_t at, std::uint64_t n) {
  std::vector<float> v(n);
  if (n) std::memcpy(v.data(), in.data() + at, n * sizeof(float));
  return v;
}

ConfigError bad_file(const std::string& where, const std::string& file, const std::string& what) {
  return ConfigError(where + ": checkpoint " + file + ": " + what);
}

// Step of "ckpt-<step>.ckpt", or -1 for any other name (also one whose digits overflow 64 bits:
// no run of ours wrote it, and std::stoll's out_of_range escaped the save's rotation and resume).
std::int64_t step_of_name(const std::string& name) {
  const std::size_t p = sizeof kPrefix - 1, s = sizeof kSuffix - 1;
  if (name.size() <= p + s || name.compare(0, p, kPrefix) != 0 ||
      name.compare(name.size() - s, s, kSuffix) != 0)
    return -1;
  const char* first = name.data() + p;
  const char* last = name.data() + name.size() - s;
  std::int64_t step = -1;
  const auto [end, err] = std::from_chars(first, last, step);  // no space or "+"; "-" below
  if (err != std::errc() || end != last || *first == '-') return -1;
  return step;
}

// (step, path) of the checkpoints in dir, newest first.
std::vector<std::pair<std::int64_t, fs::path>> list_checkpoints(const std::string& dir) {
  std::vector<std::pair<std::int64_t, fs::path>> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::int64_t step = step_of_name(e.path().filename().string());
    if (step >= 0 && e.is_regular_file(ec)) out.emplace_back(step, e.path());
  }
  std::sort(out.begin(), out.end(), [](auto& a, auto& b) { return a.first > b.first; });
  return out;
}

}  // namespace

void CheckpointFields::bad(const std::string& field, const nlohmann::json* v,
                           const std::string& what) const {
  if (v) bad(field, v->dump(), what);
  throw bad_file(where_, file_, "bad metadata: " + field + " is missing (" + what + ")");
}

void CheckpointFields::bad(const std::string& field, const std::string& shown,
                           const std::string& what) const {
  // one short line, whatever the field held
  const std::string s = shown.size() > 40 ? shown.substr(0, 37) + "..." : shown;
  throw bad_file(where_, file_, "bad metadata: " + field + " is " + s + ", not " + what);
}

std::int64_t CheckpointFields::integer(const nlohmann::json& j, const char* key, std::int64_t lo,
                                       std::int64_t hi, std::optional<std::int64_t> fallback,
                                       const std::string& field) const {
  const std::string name = field.empty() ? key : field;
  const std::string what = detail::concat("an integer from ", lo, " to ", hi);
  if (!j.is_object() || !j.contains(key)) {
    if (fallback) return *fallback;
    bad(name, nullptr, what);
  }
  const nlohmann::json& v = j[key];
  // nlohmann's own conversions cast: 2^40 into an int, 1e30 (a float) into an int64
  if (v.is_number_unsigned()) {
    const std::uint64_t u = v.get<std::uint64_t>();
    if (hi >= 0 && u <= static_cast<std::uint64_t>(hi) && static_cast<std::int64_t>(u) >= lo)
      return static_cast<std::int64_t>(u);
  } else if (v.is_number_integer()) {
    const std::int64_t i = v.get<std::int64_t>();
    if (i >= lo && i <= hi) return i;
  }
  bad(name, &v, what);
}

std::uint64_t CheckpointFields::unsigned_integer(const nlohmann::json& j, const char* key,
                                                 const std::string& field) const {
  const nlohmann::json* v = j.is_object() && j.contains(key) ? &j[key] : nullptr;
  if (!v || !v->is_number_unsigned()) bad(field.empty() ? key : field, v, "an unsigned integer");
  return v->get<std::uint64_t>();
}

double CheckpointFields::seconds(const nlohmann::json& j, const char* key,
                                 std::optional<double> fallback, const std::string& field) const {
  if ((!j.is_object() || !j.contains(key)) && fallback) return *fallback;
  const nlohmann::json* v = j.is_object() && j.contains(key) ? &j[key] : nullptr;
  if (v && v->is_number()) {
    const double d = v->get<double>();
    if (std::isfinite(d) && d >= 0) return d;
  }
  bad(field.empty() ? key : field, v, "a number of seconds (0 or more)");
}

// A loss (or accuracy) of the metadata: JSON has no NaN or infinity, so a diverged run's are null
// there, read back as NaN. The key must be there.
double CheckpointFields::number_or_nan(const nlohmann::json& j, const char* key,
                                       const std::string& field) const {
  const nlohmann::json* v = j.is_object() && j.contains(key) ? &j[key] : nullptr;
  if (v && v->is_null()) return std::numeric_limits<double>::quiet_NaN();
  if (!v || !v->is_number()) bad(field.empty() ? key : field, v, "a number or null");
  return v->get<double>();
}

std::string checkpoint_file_name(std::int64_t step) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%s%010lld%s", kPrefix, static_cast<long long>(step), kSuffix);
  return buf;
}

bool is_checkpoint_file_name(const std::string& name) { return step_of_name(name) >= 0; }

nlohmann::json history_json(const std::vector<EpochRecord>& history) {
  nlohmann::json out = nlohmann::json::array();
  for (const EpochRecord& e : history)
    out.push_back({{"epoch", e.epoch},
                   {"step", e.step},
                   {"wall_s", e.wall_s},
                   {"train_loss", e.train_loss},
                   {"test_accuracy", e.test_accuracy},
                   {"test_loss", e.test_loss}});
  return out;
}

std::string encode_checkpoint(const CheckpointData& c) {
  nlohmann::json meta = c.meta;
  meta["format"] = "starring.checkpoint";
  meta["step"] = c.step;
  meta["epoch"] = c.epoch;
  meta["next_batch"] = c.next_batch;
  meta["epoch_loss_sum"] = c.epoch_loss_sum;
  meta["epoch_steps"] = c.epoch_steps;
  meta["legs"] = c.legs;
  meta["train_s"] = c.train_s;
  meta["leg_train_s"] = c.leg_train_s;
  meta["worker0_train_s"] = c.worker0_train_s;
  meta["history"] = history_json(c.history);
  const std::string text = meta.dump();
  std::string out;
  out.reserve(kHeaderBytes + text.size() + 28 +
              (c.params.size() + c.state1.size() + c.state2.size()) * sizeof(float));
  out.append(kMagic, sizeof kMagic);
  put<std::uint32_t>(out, kCheckpointVersion);
  put<std::uint32_t>(out, 0);
  put<std::uint64_t>(out, text.size());
  out += text;
  put<std::uint64_t>(out, c.params.size());
  put<std::uint64_t>(out, c.state1.size());
  put<std::uint64_t>(out, c.state2.size());
  put_floats(out, c.params);
  put_floats(out, c.state1);
  put_floats(out, c.state2);
  put<std::uint32_t>(out, crc_of(out.data(), out.size()));
  return out;
}

CheckpointData decode_checkpoint(const std::string& in, const std::string& file,
                                 const std::string& where) {
  if (in.size() < sizeof kMagic || std::memcmp(in.data(), kMagic, sizeof kMagic) != 0)
    throw bad_file(where, file,
                   in.size() < sizeof kMagic ? "truncated (" + std::to_string(in.size()) +
                                                   " bytes, shorter than the header)"
                                             : "not a StarRing checkpoint (wrong magic)");
  if (in.size() < kHeaderBytes)
    throw bad_file(where, file, "truncated (" + std::to_string(in.size()) + " bytes)");
  const auto version = get<std::uint32_t>(in, 8);
  if (version != kCheckpointVersion)
    throw bad_file(where, file,
                   "format version " + std::to_string(version) + ", this build reads version " +
                       std::to_string(kCheckpointVersion));
  // Sizes as the header describes them; every addition is checked against the real size.
  const std::uint64_t meta_len = get<std::uint64_t>(in, 16);
  std::uint64_t need = kHeaderBytes;
  std::uint64_t counts[3] = {0, 0, 0};
  bool fits = meta_len <= in.size() && (need += meta_len + 24) <= in.size();
  if (fits) {
    for (int i = 0; i < 3; ++i) counts[i] = get<std::uint64_t>(in, kHeaderBytes + meta_len + 8 * i);
    for (int i = 0; i < 3 && fits; ++i)
      fits = counts[i] <= in.size() / sizeof(float) &&
             (need += counts[i] * sizeof(float)) <= in.size();
    need += sizeof(std::uint32_t);
  }
  if (!fits || need != in.size())
    throw bad_file(
        where, file,
        "truncated or corrupt: " + std::to_string(in.size()) + " bytes, the header " +
            (fits ? "describes " + std::to_string(need) : std::string("describes more")));
  const std::uint32_t stored = get<std::uint32_t>(in, in.size() - 4);
  const std::uint32_t actual = crc_of(in.data(), in.size() - 4);
  if (stored != actual) {
    char buf[96];
    std::snprintf(buf, sizeof buf, "corrupt: CRC mismatch (stored %08x, computed %08x)", stored,
                  actual);
    throw bad_file(where, file, buf);
  }
  CheckpointData c;
  try {
    c.meta = nlohmann::json::parse(in.substr(kHeaderBytes, meta_len));
  } catch (const nlohmann::json::exception& e) {
    throw bad_file(where, file, std::string("bad metadata: ") + e.what());
  }
  if (!c.meta.is_object()) throw bad_file(where, file, "bad metadata: not a JSON object");
  // Every count as what a run writes: >= 0, and an int where the trainer keeps one. Whether the
  // position fits the run (inside its epochs, adding up to the step) is check_resume_fits_run's.
  const CheckpointFields f(where, file);
  constexpr std::int64_t kInt = std::numeric_limits<int>::max();
  constexpr std::int64_t kInt64 = std::numeric_limits<std::int64_t>::max();
  const nlohmann::json& m = c.meta;
  c.step = f.integer(m, "step", 0, kInt64);
  c.epoch = static_cast<int>(f.integer(m, "epoch", 0, kInt));
  c.next_batch = f.integer(m, "next_batch", 0, kInt64);
  c.epoch_loss_sum = f.number_or_nan(m, "epoch_loss_sum");
  c.epoch_steps = f.integer(m, "epoch_steps", 0, kInt);
  // The job so far: absent from a file of an older build (legs 0: unknown).
  c.legs = static_cast<int>(f.integer(m, "legs", 0, kInt - 1, 0));
  c.train_s = f.seconds(m, "train_s", 0.0);
  if (m.contains("leg_train_s")) {
    if (!m["leg_train_s"].is_array()) f.bad("leg_train_s", &m["leg_train_s"], "an array");
    for (std::size_t i = 0; i < m["leg_train_s"].size(); ++i)
      c.leg_train_s.push_back(f.seconds({{"v", m["leg_train_s"][i]}}, "v", std::nullopt,
                                        detail::concat("leg_train_s[", i, "]")));
  }
  c.worker0_train_s = f.seconds(m, "worker0_train_s", c.train_s);
  if (m.contains("history")) {
    if (!m["history"].is_array()) f.bad("history", &m["history"], "an array");
    for (std::size_t i = 0; i < m["history"].size(); ++i) {
      const nlohmann::json& e = m["history"][i];
      const auto at = [&](const char* key) { return detail::concat("history[", i, "].", key); };
      EpochRecord r;
      r.epoch = static_cast<int>(f.integer(e, "epoch", 0, kInt, std::nullopt, at("epoch")));
      r.wall_s = f.seconds(e, "wall_s", std::nullopt, at("wall_s"));
      r.train_loss = f.number_or_nan(e, "train_loss", at("train_loss"));
      r.test_accuracy = f.number_or_nan(e, "test_accuracy", at("test_accuracy"));
      r.test_loss = f.number_or_nan(e, "test_loss", at("test_loss"));
      // evaluated after a step the checkpoint has passed
      r.step = f.integer(e, "step", 0, c.step, std::nullopt, at("step"));
      c.history.push_back(r);
    }
  }
  std::size_t at = kHeaderBytes + meta_len + 24;
  c.params = get_floats(in, at, counts[0]);
  c.state1 = get_floats(in, at += counts[0] * sizeof(float), counts[1]);
  c.state2 = get_floats(in, at += counts[1] * sizeof(float), counts[2]);
  return c;
}

CheckpointData read_checkpoint(const std::string& path, const std::string& where) {
  std::error_code ec;
  if (fs::is_directory(path, ec))
    throw ConfigError(where + ": checkpoint " + path + " is a folder (to resume from the newest " +
                      "checkpoint in it: --resume latest --checkpoint-dir " + path + ")");
  // Only a regular file: a FIFO's open waited for a writer forever, /dev/zero was read without
  // end.
  if (const char* kind = not_a_regular_file(path))
    throw ConfigError(where + ": checkpoint " + path + " is not a regular file (" + kind + ")");
  std::ifstream f(path, std::ios::binary);
  if (!f)
    throw ConfigError(where + ": checkpoint " + path + ": cannot open (" + std::strerror(errno) +
                      ")");
  std::string bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  if (f.bad()) throw ConfigError(where + ": checkpoint " + path + ": read error");
  return decode_checkpoint(bytes, path, where);
}

std::string save_checkpoint(const CheckpointConfig& k, const CheckpointData& c,
                            const std::string& where) {
  std::error_code ec;
  fs::create_directories(k.dir, ec);
  if (ec) throw Error(where + ": cannot create --checkpoint-dir " + k.dir + ": " + ec.message());
  const std::string name = checkpoint_file_name(c.step);
  const std::string path = (fs::path(k.dir) / name).string();
  write_file_atomically(path, encode_checkpoint(c), where);
  write_file_atomically((fs::path(k.dir) / "latest").string(), name + "\n", where);
  // Leftovers of writers killed mid-write (never a live writer's: atomic_file.h), then the
  // oldest checkpoints.
  remove_stale_temporary_files(
      k.dir, [](const std::string& f) { return f == "latest" || is_checkpoint_file_name(f); });
  int kept = 1;  // the one just written
  for (const auto& [step, p] : list_checkpoints(k.dir)) {
    if (p.filename() == name) continue;
    if (kept < k.keep)
      ++kept;
    else
      fs::remove(p, ec);
  }
  return path;
}

CheckpointData load_resume(const CheckpointConfig& k, const std::string& where, std::string& path) {
  if (k.resume != "latest" && k.resume != "auto") {
    path = k.resume;
    return read_checkpoint(path, where);
  }
  std::error_code ec;
  if (k.resume == "auto" && list_checkpoints(k.dir).empty()) {
    // Nothing written yet: a fresh run. A 'latest' pointer left behind names a checkpoint that
    // is gone (deleted by hand), so there is nothing to resume and nothing to lose.
    if (fs::exists(fs::path(k.dir) / "latest", ec))
      std::fprintf(stderr,
                   "[starring] %s: --resume auto: %s/latest names no checkpoint that exists; "
                   "starting a fresh run\n",
                   where.c_str(), k.dir.c_str());
    path.clear();
    return CheckpointData{};
  }
  // Why the file the pointer names was passed over (for the note), and the newest file's error.
  std::string passed_over, first_error;
  // The pointer first: it names the newest checkpoint that was completely written.
  std::ifstream ptr(fs::path(k.dir) / "latest");
  std::string name;
  if (ptr && std::getline(ptr, name) && step_of_name(name) >= 0) {
    path = (fs::path(k.dir) / name).string();
    if (!fs::exists(path, ec)) {  // ec: a name that cannot be looked at is absent
      passed_over =
          detail::concat(where, ": ", (fs::path(k.dir) / "latest").string(), " names ", name,
                         ec ? detail::concat(", which cannot be looked at (", ec.message(), ")")
                            : std::string(", which does not exist"));
    } else {
      try {
        return read_checkpoint(path, where);
      } catch (const ConfigError& e) {
        passed_over = first_error = e.what();
      }
    }
  }
  for (const auto& [step, p] : list_checkpoints(k.dir)) {
    path = p.string();
    try {
      CheckpointData c = read_checkpoint(path, where);
      // what was passed over: the pointer's file, newer files that did not verify
      std::string why = passed_over;
      if (!first_error.empty() && first_error != passed_over)
        why += (why.empty() ? "" : "; ") + first_error;
      if (!why.empty())
        std::fprintf(stderr, "[starring] %s; resuming from %s instead\n", why.c_str(),
                     path.c_str());
      return c;
    } catch (const ConfigError& e) {
      if (first_error.empty()) first_error = e.what();
    }
  }
  if (first_error.empty()) first_error = passed_over;
  // the newest's error names the rank already (read_checkpoint's `where`): not twice
  if (first_error.rfind(where + ": ", 0) == 0) first_error.erase(0, where.size() + 2);
  throw ConfigError(
      where + ": --resume " + k.resume + ": no valid checkpoint in " + k.dir +
      (first_error.empty() ? " (none written yet)" : " (newest: " + first_error + ")"));
}

}  // namespace starring
