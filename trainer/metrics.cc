#include "trainer/metrics.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "common/error.h"
#include "common/fault.h"
#include "trainer/checkpoint.h"

namespace starring {

double json_float(float f) {
  char buf[32];
  const auto r = std::to_chars(buf, buf + sizeof buf, f);  // shortest form that reads back as f
  return std::strtod(std::string(buf, r.ptr).c_str(), nullptr);
}

void write_json_atomically(const std::string& path, const nlohmann::json& j) {
  if (path.empty()) return;
  // tmp file, fsync, rename; a failed write (a full disk) removes the tmp file
  write_file_atomically(path, j.dump(1) + "\n", "--summary-file");
}

MetricsWriter::MetricsWriter(const std::string& path) : path_(path) {
  if (path_.empty()) return;
  out_.open(path_ + ".partial", std::ios::trunc);
  if (!out_) throw ConfigError("cannot open metrics file " + path_ + ".partial for writing");
}

MetricsWriter::~MetricsWriter() {
  // Not finished (an exception unwound the run): leave only the .partial file behind.
}

// A write that fails (a full disk) is reported at once on stderr and fails the run at finish(),
// when no peer waits for this rank any more (thrown mid-step, the other ranks sat out --timeout);
// the lines before it stay in the .partial file, and no complete-looking file is left.
void MetricsWriter::check_stream(const char* doing) {
  if (out_ || !failure_.empty()) return;
  const int err = errno;
  failure_ = detail::concat("--metrics-file: ", doing, " ", path_, ".partial failed",
                            err ? ": " : "", err ? std::strerror(err) : "");
  std::fprintf(stderr, "[starring] %s (the run goes on and fails at its end)\n", failure_.c_str());
  std::fflush(stderr);
}

void MetricsWriter::write(const nlohmann::json& record) {
  if (!enabled() || !failure_.empty()) return;
  errno = 0;
  if (time_offset_ > 0 && record.contains("time_s") && record["time_s"].is_number()) {
    nlohmann::json shifted = record;
    shifted["time_s"] = record["time_s"].get<double>() + time_offset_;
    out_ << shifted.dump() << '\n';
  } else {
    out_ << record.dump() << '\n';
  }
  check_stream("writing");
}

void MetricsLine::format(std::string& out, double time_offset) const {
  char num[32];
  out += '{';
  for (const Field& f : fields_) {
    if (&f != fields_.data()) out += ',';
    out += '"';
    out += f.key;
    out += "\":";
    if (f.integer) {
      out.append(num, std::to_chars(num, num + sizeof num, f.ivalue).ptr);
      continue;
    }
    const double v = f.key == "time_s" ? f.value + time_offset : f.value;
    if (!std::isfinite(v)) {
      out += "null";
      continue;
    }
    char* end = std::to_chars(num, num + sizeof num, v).ptr;  // shortest round trip
    out.append(num, end);
    if (std::find_if(num, end, [](char c) { return c == '.' || c == 'e'; }) == end) out += ".0";
  }
  out += "}\n";
}

void MetricsWriter::write(const MetricsLine& line) {
  if (!enabled() || !failure_.empty()) return;
  errno = 0;
  buf_.clear();
  line.format(buf_, time_offset_);
  out_.write(buf_.data(), static_cast<std::streamsize>(buf_.size()));
  check_stream("writing");
}

void MetricsWriter::write_earlier(const std::vector<std::string>& lines, double earlier_s) {
  double last = earlier_s;
  for (const auto& line : lines) {
    const nlohmann::json j = nlohmann::json::parse(line);
    if (j.contains("time_s") && j["time_s"].is_number())
      last = std::max(last, j["time_s"].get<double>());
    write(j);
  }
  time_offset_ = last;
}

void MetricsWriter::flush() {
  if (!enabled() || !failure_.empty()) return;
  errno = 0;
  out_.flush();
  check_stream("writing");
}

void MetricsWriter::finish() {
  if (!enabled() || finished_) return;
  if (failure_.empty()) {
    errno = 0;
    out_.close();
    check_stream("closing");
  }
  if (!failure_.empty()) throw Error(failure_);
  std::error_code ec;  // a failed rename fails the run after its summary, as a failed write does
  std::filesystem::rename(path_ + ".partial", path_, ec);
  if (ec) {
    failure_ = detail::concat("--metrics-file: renaming ", path_, ".partial to ", path_,
                              " failed: ", ec.message(), " (the lines stay in the .partial file)");
    throw Error(failure_);
  }
  finished_ = true;
}

void MetricsWriter::keep_partial() {
  flush();
  if (!failure_.empty()) throw Error(failure_);
}

static std::string fmt_eta(double s) {
  char buf[32];
  int t = static_cast<int>(s + 0.5);
  std::snprintf(buf, sizeof buf, "%d:%02d", t / 60, t % 60);
  return buf;
}

Progress::Progress(const std::string& mode, std::int64_t total_steps, int log_every, bool enabled)
    : total_(total_steps), log_every_(log_every > 0 ? log_every : 50) {
  start_ = last_draw_ = std::chrono::steady_clock::now();
  if (!enabled || mode == "off") return;
  const bool tty = isatty(fileno(stderr));
  bar_ = mode == "bar" || (mode == "auto" && tty);
  lines_ = !bar_;
}

void Progress::update(std::int64_t step, int epoch, double loss, double samples_per_s) {
  if (!bar_ && !lines_) return;
  auto now = std::chrono::steady_clock::now();
  double elapsed = std::chrono::duration<double>(now - start_).count();
  const std::int64_t done = step - first_step_;
  double eta =
      done > 0 ? elapsed / static_cast<double>(done) * static_cast<double>(total_ - step) : 0;
  if (bar_) {
    if (step != total_ && now - last_draw_ < std::chrono::milliseconds(100)) return;
    if (interrupt_in_progress()) return;  // the stop line stays the last one
    last_draw_ = now;
    const int width = 28;
    int filled = total_ > 0 ? static_cast<int>(width * step / total_) : 0;
    std::string bar(filled, '#');
    bar.resize(width, '.');
    std::fprintf(stderr, "\r[%s] step %lld/%lld  epoch %d  loss %.4f  %.0f samples/s  ETA %s ",
                 bar.c_str(), static_cast<long long>(step), static_cast<long long>(total_), epoch,
                 loss, samples_per_s, fmt_eta(eta).c_str());
    drawn_ = true;
    set_stderr_line_open(true);
  } else if (step % log_every_ == 0 || step == total_) {
    std::fprintf(stderr, "step %lld/%lld epoch %d loss %.4f %.0f samples/s ETA %s\n",
                 static_cast<long long>(step), static_cast<long long>(total_), epoch, loss,
                 samples_per_s, fmt_eta(eta).c_str());
  }
  std::fflush(stderr);
}

void Progress::resume_at(std::int64_t step) {
  first_step_ = step;
  start_ = last_draw_ = std::chrono::steady_clock::now();
}

void Progress::message(const std::string& line) {
  if (!bar_ && !lines_) return;
  if (drawn_) std::fprintf(stderr, "\n");
  drawn_ = false;
  set_stderr_line_open(false);
  std::fprintf(stderr, "%s\n", line.c_str());
  std::fflush(stderr);
}

void Progress::done() {
  if (drawn_) std::fprintf(stderr, "\n");
  drawn_ = false;
  set_stderr_line_open(false);
}

}  // namespace starring
