// Trace: records complete ("X") and counter ("C") events in memory under one mutex and writes
// them at close() as a Chrome trace-event JSON object {"traceEvents": [...]}. Metadata events
// ("M") name the process ("rank N") and every thread that recorded something, so Perfetto shows
// one track per thread. Timestamps are written on the host's monotonic clock (steady_clock, the
// same for every process of a host), so the files of all ranks of one host line up when merged
// (scripts/merge_traces.py). The file is written to a temporary name next to the target and
// renamed, so a reader never sees half a file.
#include "common/trace.h"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <iostream>
#include <nlohmann/json.hpp>
#include <thread>

#include "common/error.h"

namespace starring {

std::string expand_rank(const std::string& pattern, int rank) {
  std::string out;
  for (std::size_t i = 0; i < pattern.size(); ++i) {
    if (pattern[i] == '%' && i + 1 < pattern.size() && pattern[i + 1] == 'r') {
      out += std::to_string(rank);
      ++i;
    } else {
      out += pattern[i];
    }
  }
  return out;
}

namespace {

nlohmann::json metadata(const char* what, int pid, int tid, const std::string& name) {
  return {{"name", what}, {"ph", "M"}, {"pid", pid}, {"tid", tid}, {"args", {{"name", name}}}};
}

}  // namespace

Trace::Trace(int rank) : rank_(rank), t0_(std::chrono::steady_clock::now()) {}

Trace::~Trace() {
  try {
    close();
  } catch (const std::exception& e) {
    std::cerr << "rank " << rank_ << ": trace: " << e.what() << "\n";
  }
}

void Trace::open(const std::string& path_pattern) {
  STARRING_CHECK(!path_pattern.empty(), "rank ", rank_, ": trace path is empty");
  std::lock_guard<std::mutex> lock(mu_);
  path_ = expand_rank(path_pattern, rank_);
  events_.clear();
  enabled_ = true;
}

double Trace::now_us() const {
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0_).count();
}

int Trace::thread_id() {  // caller holds mu_
  const std::size_t key = std::hash<std::thread::id>{}(std::this_thread::get_id());
  auto it = tids_.find(key);
  if (it != tids_.end()) return it->second;
  const int tid = static_cast<int>(tids_.size());
  tids_.emplace(key, tid);
  return tid;
}

void Trace::complete(const std::string& name, const std::string& cat, double start_us,
                     double dur_us, const std::map<std::string, double>& args) {
  if (!enabled_) return;
  std::lock_guard<std::mutex> lock(mu_);
  events_.push_back(Event{name, cat, 'X', start_us, dur_us, thread_id(), args});
}

void Trace::counter(const std::string& name, double value) {
  if (!enabled_) return;
  const double ts = now_us();
  std::lock_guard<std::mutex> lock(mu_);
  events_.push_back(Event{name, "counter", 'C', ts, 0.0, thread_id(), {{name, value}}});
}

void Trace::set_thread_name(const std::string& name) {
  std::lock_guard<std::mutex> lock(mu_);
  thread_names_[thread_id()] = name;
}

void Trace::close() {
  std::lock_guard<std::mutex> lock(mu_);
  if (!enabled_) return;
  enabled_ = false;
  nlohmann::json events = nlohmann::json::array();
  events.push_back(metadata("process_name", rank_, 0, "rank " + std::to_string(rank_)));
  events.push_back({{"name", "process_sort_index"},
                    {"ph", "M"},
                    {"pid", rank_},
                    {"tid", 0},
                    {"args", {{"sort_index", rank_}}}});
  for (const auto& [key, tid] : tids_) {
    auto named = thread_names_.find(tid);
    const std::string name =
        named != thread_names_.end() ? named->second : "thread " + std::to_string(tid);
    events.push_back(metadata("thread_name", rank_, tid, name));
  }
  const double origin_us =
      std::chrono::duration<double, std::micro>(t0_.time_since_epoch()).count();
  for (const Event& e : events_) {
    nlohmann::json j = {{"name", e.name},         {"cat", e.cat}, {"ph", std::string(1, e.ph)},
                        {"ts", origin_us + e.ts}, {"pid", rank_}, {"tid", e.tid}};
    if (e.ph == 'X') j["dur"] = e.dur;
    if (!e.args.empty()) j["args"] = e.args;
    events.push_back(std::move(j));
  }
  events_.clear();
  const nlohmann::json doc = {{"traceEvents", std::move(events)}, {"displayTimeUnit", "ms"}};
  const std::string tmp = path_ + ".tmp." + std::to_string(::getpid());
  {
    errno = 0;
    std::ofstream out(tmp);
    if (!out)
      throw Error(detail::concat("rank ", rank_, ": --trace: cannot write ", tmp, ": ",
                                 std::strerror(errno)));
    out << doc.dump() << '\n';
    out.close();
    if (!out) {  // a full disk: no half-written file is left behind
      const int err = errno;
      std::remove(tmp.c_str());
      throw Error(detail::concat("rank ", rank_, ": --trace: writing ", tmp, " failed",
                                 err ? ": " : "", err ? std::strerror(err) : ""));
    }
  }
  if (std::rename(tmp.c_str(), path_.c_str()) != 0) {
    std::remove(tmp.c_str());
    throw Error(detail::concat("rank ", rank_, ": cannot rename trace file to ", path_));
  }
}

TraceScope::TraceScope(Trace* trace, const char* name, const char* cat)
    : trace_(trace && trace->enabled() ? trace : nullptr), name_(name), cat_(cat) {
  if (trace_) start_ = trace_->now_us();
}

TraceScope::~TraceScope() {
  if (trace_) trace_->complete(name_, cat_, start_, trace_->now_us() - start_);
}

}  // namespace starring
